// JpegDecoder: JPEG bytes -> u8 HWC RGB pixels, decoding only the crop the caller keeps (DCT
// scaling, cropped scanlines) and resizing straight into the caller's buffer; a reused libjpeg
// state, so a steady-state decode allocates nothing. Every libjpeg error and warning is a
// DecodeError naming the key; headers over `max_pixels` are refused before allocating.
// Ownership: input bytes are borrowed for a call; `dst` is caller-owned.
// Thread-safety: one thread at a time per decoder (keep one per thread).
// Details: docs/data_loader.md#what-happens-to-a-sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/core/error.h"

namespace stoker::data {

// Time one decoder spent in each stage, summed over its calls (steady clock; the loader's
// per-stage counters add these up over its threads). header: magic check + jpeg_read_header;
// decode: entropy decoding, IDCT, upsampling and colour conversion of the rows kept (the crop
// window in decode_crop, everything in decode_full*); resize: resampling + flip into `dst`
// (decode_crop only). Page faults on bytes read from a memory map land in header/decode.
struct DecodeStageTimes {
  double header_s = 0.0;
  double decode_s = 0.0;
  double resize_s = 0.0;
  int64_t images = 0;  // successful decode_crop / decode_full* calls
  int64_t tiled = 0;   // crops decoded from their restart-interval tiles only
};

// A region of the source image in continuous pixel coordinates: pixel (row r, column c) covers
// [c, c+1) x [r, r+1). Integer values select whole pixels; fractional ones are resampled
// exactly (the eval transform uses them).
struct CropRect {
  double x = 0.0;
  double y = 0.0;
  double width = 0.0;
  double height = 0.0;
};

// What the header says.
struct JpegInfo {
  int width = 0;
  int height = 0;
  int components = 0;  // 1 grayscale, 3 YCbCr/RGB, 4 CMYK/YCCK (output is always RGB)
  bool progressive = false;
};

// A decoded image: height * width * 3 bytes, rows top to bottom, RGB interleaved.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

struct DecoderOptions {
  // Headers claiming more pixels than this are rejected before allocation.
  int64_t max_pixels = int64_t{16384} * 16384;
  // Decode at M/8 scale when the crop is >= 2x the output in both directions.
  bool dct_scaling = true;
  // libjpeg warnings (corrupt data, premature end of file) are errors.
  bool warnings_are_errors = true;
  // JDCT_IFAST instead of JDCT_ISLOW (<= 10 % faster; lower quality above q90).
  bool fast_dct = false;
  // A crop of a JPEG whose restart intervals tile its MCU rows (`stoker pack` writes them)
  // decodes only the tiles it needs: no Huffman decoding of the rows above it or the columns
  // beside it. The same pixels as the whole-image path (tested); off = always the whole path.
  bool restart_tiles = true;
};

// A JPEG that could not be decoded: bad bytes, truncated, over budget. what() names the key.
class DecodeError : public core::Error {
 public:
  DecodeError(std::string key, std::string reason, std::string what, std::string where,
              std::string hint)
      : core::Error(std::move(what), std::move(where), std::move(hint)),
        key_(std::move(key)),
        reason_(std::move(reason)) {}
  // The sample key given to the decode call (may be empty).
  const std::string& key() const { return key_; }
  // Why, in libjpeg's or our words ("Premature end of JPEG file").
  const std::string& reason() const { return reason_; }

 private:
  std::string key_;
  std::string reason_;
};

struct RgbView;

class JpegDecoder {
 public:
  explicit JpegDecoder(DecoderOptions options = {});
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // The header only (cheap: no entropy decoding). Validates magic, size and pixel budget.
  JpegInfo read_header(std::span<const uint8_t> bytes, std::string_view key = {});

  // The whole image.
  Image decode_full(std::span<const uint8_t> bytes, std::string_view key = {});
  // Same, reusing `out`'s pixel storage (no allocation once it is large enough).
  void decode_full_into(std::span<const uint8_t> bytes, Image& out, std::string_view key = {});

  // Decodes `crop` (inside the image) and resizes it to out_w x out_h u8 RGB written to dst
  // (out_h rows of out_w*3 bytes, contiguous), mirrored left-right when `flip`.
  void decode_crop(std::span<const uint8_t> bytes, const CropRect& crop, int out_w, int out_h,
                   uint8_t* dst, std::string_view key = {}, bool flip = false);

  // Only the decoding part of decode_crop: the same header read, DCT scale and rows/columns,
  // then stops — no resize, nothing written. Returns the decoded window's (width, height). For
  // measuring what decoding alone costs (benchmarks' crop-decode ceiling).
  std::pair<int, int> decode_crop_window(std::span<const uint8_t> bytes, const CropRect& crop,
                                         int out_w, int out_h, std::string_view key = {});

  // The DCT scale numerator (of 8) the last decode_crop used; 8 = no scaling.
  int last_scale_num() const;
  // Cumulative per-stage times of this decoder (see DecodeStageTimes).
  const DecodeStageTimes& stage_times() const;
  const DecoderOptions& options() const;

 private:
  RgbView decode_window(std::span<const uint8_t> bytes, const CropRect& crop, int out_w, int out_h,
                        std::string_view key);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::data

// Image augmentation for the loader: RandomResizedCrop + horizontal flip (training) and
namespace stoker::data {

struct TransformOptions {
  bool train = true;      // RandomResizedCrop + flip; false: resize shorter side + centre crop
  int output_size = 224;  // output is output_size x output_size RGB
  uint64_t seed = 0;      // augmentation seed (same on all ranks for identical draws)
  // RandomResizedCrop (torchvision defaults).
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
  int attempts = 10;
  double flip_probability = 0.5;  // horizontal flip in training; 0 disables
  // Evaluation: resize the shorter side to eval_resize, then centre-crop output_size.
  int eval_resize = 256;
};

// What the training transform does to one sample.
struct CropParams {
  CropRect rect;  // integer pixel crop of the source image (torchvision's i, j, h, w)
  bool flip = false;
};

// torchvision RandomResizedCrop.get_params + flip draw for sample `index` of `epoch`.
CropParams random_resized_crop(int width, int height, uint64_t epoch, uint64_t index,
                               const TransformOptions& options);

// The region of the source that Resize(eval_resize) + CenterCrop(output_size) keeps, in source
// coordinates (fractional in general). Throws if the resized image is smaller than the crop.
CropRect eval_crop(int width, int height, const TransformOptions& options);

// Reads the header of `bytes`, draws the crop (train) or centres it (eval), decodes and writes
// output_size x output_size x 3 u8 (HWC RGB) to dst. Errors (DecodeError) name `key`.
void augment_into(JpegDecoder& decoder, std::span<const uint8_t> bytes, std::string_view key,
                  uint64_t epoch, uint64_t index, const TransformOptions& options, uint8_t* dst);

}  // namespace stoker::data
