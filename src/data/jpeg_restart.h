// Private: JPEG restart markers, added losslessly at pack time and used at decode time to decode
// only the part of an image a crop needs.
//
// Why: in a baseline JPEG every block's Huffman code depends on the one before it, so decoding
// any crop means entropy-decoding every row above it and every column beside it (libjpeg's
// jpeg_skip_scanlines and jpeg_crop_scanline skip the IDCT and colour work, not the Huffman
// decoding, about half of a full decode). Restart markers cut the entropy-coded data into
// byte-aligned intervals of `k` MCUs that start afresh (DC predictions reset). When `k` divides
// the MCUs of a row, the intervals form a grid of (k MCUs x 1 MCU row) tiles, and the tiles that
// cover a crop can be cut out and stitched into a smaller, valid JPEG (same tables, new size,
// renumbered markers) that libjpeg decodes to exactly the same pixels as the same area of the
// whole image, away from the tile edges (chroma upsampling treats them as image edges).
//
// add_restart_markers rewrites a JPEG with such intervals from its DCT coefficients
// (jpeg_read_coefficients / jpeg_write_coefficients, like `jpegtran -restart`): the coefficients,
// hence the decoded pixels, are unchanged; progressive and arithmetic-coded files become baseline
// Huffman (also faster to decode); markers (EXIF, ICC) are kept.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace stoker::data::detail {

// MCUs per restart interval for a row of `mcus_per_row` MCUs: a divisor of it near 4 (tiles of
// about 64 pixels for 4:2:0), else 1.
int restart_interval_for(int mcus_per_row);

// Rewrites `jpeg` with restart intervals that tile each MCU row. Returns "" and fills `out`, or
// the reason it could not (the input is then not a decodable JPEG; `out` is cleared).
std::string add_restart_markers(std::span<const uint8_t> jpeg, std::vector<uint8_t>& out);

// Where the tiles of a JPEG with row-aligned restart intervals are.
class RestartTiles {
 public:
  // Parses the markers up to the scan. False (and nothing usable) unless the file is one
  // interleaved baseline/extended Huffman scan (or one grayscale component) whose restart
  // interval divides the MCUs of a row.
  bool parse(std::span<const uint8_t> jpeg);

  int width() const { return width_; }
  int height() const { return height_; }
  int tile_width() const { return mcu_w_ * interval_; }  // pixels
  int tile_height() const { return mcu_h_; }             // pixels (one MCU row)
  int columns() const { return columns_; }               // tiles per MCU row
  int rows() const { return rows_; }                     // MCU rows

  // Cuts tiles [col0, col1] x [row0, row1] into `out` as a complete JPEG whose pixel (0, 0) is
  // pixel (col0 * tile_width(), row0 * tile_height()) of the image. False when the entropy data
  // does not have the expected markers (a corrupt or truncated file: decode it whole instead).
  bool slice(std::span<const uint8_t> jpeg, int col0, int col1, int row0, int row1,
             std::vector<uint8_t>& out);

 private:
  // Finds the entropy-coded intervals up to tile `last` (row-major); false on a marker that
  // should not be there or data that ends early.
  bool locate(std::span<const uint8_t> jpeg, int last);

  int width_ = 0, height_ = 0, mcu_w_ = 0, mcu_h_ = 0, interval_ = 0, columns_ = 0, rows_ = 0;
  size_t sof_size_at_ = 0;             // offset of the SOF's height field
  size_t scan_begin_ = 0;              // first byte of entropy-coded data
  std::vector<uint32_t> begin_, end_;  // per located interval: [begin, end) in the file
};

}  // namespace stoker::data::detail
