// Image augmentation for the loader: RandomResizedCrop + horizontal flip (training) and
// resize-shorter-side + centre crop (evaluation), each done as one JpegDecoder::decode_crop.
//
// Randomness: the draws for sample `index` in epoch `epoch` come from a Philox stream keyed by
// (seed, epoch, index) — a pure function, so augmentation is reproducible on resume and does
// not depend on which thread decodes which sample or in what order. RandomResizedCrop follows
// torchvision's get_params exactly (10 attempts of area ~ U(scale) * image area and
// log(aspect) ~ U(log ratio), w = round(sqrt(area * aspect)), h = round(sqrt(area / aspect)),
// accepted when it fits; then the centre crop clamped to the ratio range), with Philox uniforms
// in place of torch's generator. Only the JPEG header is read to choose the crop.
//
// Ownership: `dst` is the caller's (e.g. a slot of a pinned batch). Thread-safety: the free
// functions are pure; augment_into uses the given decoder (one per thread).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "stoker/data/decode.h"

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
