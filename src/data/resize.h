// Antialiased resize of a region of a u8 RGB image, written straight into its destination.
//
// Separable, fixed point: for each output row a vertical pass over the source rows it needs (only
// the needed columns) into one scratch row of 16-bit values (the u8 value times 128), then a
// horizontal pass that rounds to u8 and writes the output row, mirrored when `flip` (so the flip
// costs no extra pass). Weights are 14-bit fractions that sum to exactly 1 per output pixel, so
// constants and identity copies stay exact, and a result is within 0.51 of the exact weighted sum
// (the rounding's 0.5 plus < 0.01 of weight and intermediate quantization; tested). Along each
// axis the filter is chosen by the scale: shrinking uses the exact area (box) filter — each output
// pixel is the mean of the source area it covers, partial pixels weighted by their overlap
// (OpenCV's INTER_AREA); growing (or equal size) uses bilinear interpolation at pixel centres with
// edge clamping.
//
// The region is in continuous source coordinates (see CropRect in decode.h), so a crop decoded
// at DCT scale M/8 is resampled from exactly the same area as from the full-resolution image.
//
// Ownership: all buffers are the caller's; `Resizer` keeps only its scratch (reused across
// calls). Thread-safety: a Resizer is used by one thread at a time; `resize_rgb` is reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::data {

// Source pixels: `width` x `height` RGB, row r at `data + r * stride` (bytes). `x_origin` and
// `y_origin` are the image coordinates of data's first column and row (a decoded crop that
// starts inside a larger image); the region and the clamping use image coordinates, and only
// columns/rows that exist in `data` are read (clamped to it).
struct RgbView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  size_t stride = 0;
  int x_origin = 0;
  int y_origin = 0;
};

// Per-axis resampling weights for one output length. Public so the decoder can ask which
// source rows/columns a resize will read before decoding them.
struct AxisWeights {
  // Output pixel i reads taps [start[i], start[i] + count[i]) with weights[offset[i] + k].
  std::vector<int> start;
  std::vector<int> count;
  std::vector<int> offset;
  std::vector<float> weights;
  int min_index = 0;  // first source index read
  int max_index = 0;  // last source index read
  // The same taps as 14-bit fixed-point weights (summing to exactly 1 << 14 per output pixel),
  // padded with zeros to a fixed count per output pixel (`taps`), so the pixel loops are
  // fixed-length: output i reads fixed[i*taps + k] times source padded_start[i] + k.
  int taps = 0;
  std::vector<int> padded_start;
  std::vector<int16_t> fixed;

  // Region [begin, begin + length) of a source axis of `source_len` pixels -> `out_len` pixels.
  void compute(double begin, double length, int source_len, int out_len);
};

class Resizer {
 public:
  // simd: use the AVX2 passes when the CPU has them, and the AVX-512 ones when it has those
  // and `avx512` is on (all write the same bytes as the portable loops; false forces the
  // narrower path, for tests).
  explicit Resizer(bool simd = true, bool avx512 = true) : simd_(simd), avx512_(avx512) {}
  // Whether this CPU runs the AVX2 passes, and the AVX-512 (BW) ones.
  static bool simd_available();
  static bool avx512_available();

  // Resamples region (x, y, w, h) of an image of image_width x image_height (of which `src`
  // holds a window) to out_w x out_h into dst (rows of out_w*3 bytes, contiguous).
  void resize(const RgbView& src, int image_width, int image_height, double x, double y, double w,
              double h, int out_w, int out_h, uint8_t* dst, bool flip = false);

  // Weights for the next resize() may be computed first (by the decoder) and reused:
  // prepare() then resize_prepared() is the same as resize().
  void prepare(int image_width, int image_height, double x, double y, double w, double h, int out_w,
               int out_h);
  const AxisWeights& x_weights() const { return wx_; }
  const AxisWeights& y_weights() const { return wy_; }
  void resize_prepared(const RgbView& src, uint8_t* dst, bool flip = false);

 private:
  AxisWeights wx_, wy_;
  bool simd_ = true;
  bool avx512_ = true;
  std::vector<int16_t> row_;           // one vertically resampled row over the needed columns
  std::vector<int32_t> wide_;          // the portable vertical pass's 32-bit sums
  std::vector<int16_t> pair_weights_;  // SIMD passes: per pixel group and tap pair, 8 lanes each
};

// One-shot convenience: the whole `src` image (x_origin/y_origin 0) region to out_w x out_h.
void resize_rgb(const RgbView& src, double x, double y, double w, double h, int out_w, int out_h,
                uint8_t* dst, bool flip = false);

}  // namespace stoker::data
