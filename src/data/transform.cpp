// RandomResizedCrop / flip / eval crop geometry and the per-sample augment call.
//
// Draw layout (so that a change in the number of attempts never shifts the other draws):
// uniform #0 = flip, #1-#2 = crop position, #3 + 2k / #4 + 2k = area / log-aspect of attempt k.
// Uniform #n of sample `index` in `epoch` is lane n%4 of Philox block (seed, stream, index) with
// stream = kAugmentDomain<<48 | epoch<<8 | n/4: a domain of its own, so other consumers of the
// same seed (dropout, the sampler's shuffle) never see the same numbers.
#include "stoker/data/decode.h"

#include <algorithm>
#include <cmath>

#include "stoker/core/rng.h"

namespace stoker::data {

namespace {

constexpr uint64_t kAugmentDomain = 0xA116;

class SampleDraws {
 public:
  SampleDraws(uint64_t seed, uint64_t epoch, uint64_t index)
      : seed_(seed), epoch_(epoch & ((uint64_t{1} << 40) - 1)), index_(index) {}
  // Uniform #n in the open interval (0, 1).
  double uniform(int n) const {
    const uint64_t stream = (kAugmentDomain << 48) | (epoch_ << 8) | static_cast<uint64_t>(n / 4);
    const core::Philox4 r = core::philox_block(seed_, stream, index_);
    return (static_cast<double>(r.v[n % 4]) + 0.5) * (1.0 / 4294967296.0);
  }

 private:
  uint64_t seed_, epoch_, index_;
};

// Python's round(): half to even (the default rounding mode).
double round_half_even(double v) { return std::nearbyint(v); }

}  // namespace

CropParams random_resized_crop(int width, int height, uint64_t epoch, uint64_t index,
                               const TransformOptions& o) {
  STOKER_CHECK(width > 0 && height > 0, "random_resized_crop: empty image ", width, "x", height);
  STOKER_CHECK(o.scale_min > 0 && o.scale_min <= o.scale_max && o.ratio_min > 0 &&
                   o.ratio_min <= o.ratio_max && o.attempts >= 0 && o.attempts <= 120,
               "random_resized_crop: bad options: scale (", o.scale_min, ", ", o.scale_max,
               "), ratio (", o.ratio_min, ", ", o.ratio_max, "), attempts ", o.attempts);
  const SampleDraws draws(o.seed, epoch, index);
  CropParams p;
  p.flip = draws.uniform(0) < o.flip_probability;
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(o.ratio_min), log_hi = std::log(o.ratio_max);
  for (int k = 0; k < o.attempts; ++k) {
    const double target_area =
        area * (o.scale_min + draws.uniform(3 + 2 * k) * (o.scale_max - o.scale_min));
    const double aspect = std::exp(log_lo + draws.uniform(4 + 2 * k) * (log_hi - log_lo));
    const int w = static_cast<int>(round_half_even(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(round_half_even(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      // torch.randint(0, n + 1): uniform integer in [0, n].
      const int i = std::min(height - h, static_cast<int>(draws.uniform(1) * (height - h + 1)));
      const int j = std::min(width - w, static_cast<int>(draws.uniform(2) * (width - w + 1)));
      p.rect = CropRect{double(j), double(i), double(w), double(h)};
      return p;
    }
  }
  // Fallback: centre crop, clamped to the ratio range.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < o.ratio_min) {
    h = static_cast<int>(round_half_even(w / o.ratio_min));
  } else if (in_ratio > o.ratio_max) {
    w = static_cast<int>(round_half_even(h * o.ratio_max));
  }
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  p.rect = CropRect{double((width - w) / 2), double((height - h) / 2), double(w), double(h)};
  return p;
}

CropRect eval_crop(int width, int height, const TransformOptions& o) {
  STOKER_CHECK(width > 0 && height > 0, "eval_crop: empty image ", width, "x", height);
  STOKER_CHECK_HINT(o.eval_resize >= o.output_size && o.output_size > 0,
                    "use eval_resize >= output_size (e.g. 256 and 224)", "eval_crop: eval_resize ",
                    o.eval_resize, " is smaller than the crop ", o.output_size);
  // torchvision Resize(int): shorter side -> S, longer side -> int(S * long / short).
  int rw, rh;
  if (width <= height) {
    rw = o.eval_resize;
    rh = static_cast<int>(static_cast<int64_t>(o.eval_resize) * height / width);
  } else {
    rh = o.eval_resize;
    rw = static_cast<int>(static_cast<int64_t>(o.eval_resize) * width / height);
  }
  // CenterCrop: top = int(round((H - c) / 2)), left likewise.
  const int c = o.output_size;
  const double top = round_half_even((rh - c) / 2.0);
  const double left = round_half_even((rw - c) / 2.0);
  const double sx = static_cast<double>(width) / rw, sy = static_cast<double>(height) / rh;
  return CropRect{left * sx, top * sy, c * sx, c * sy};
}

void augment_into(JpegDecoder& decoder, std::span<const uint8_t> bytes, std::string_view key,
                  uint64_t epoch, uint64_t index, const TransformOptions& options, uint8_t* dst) {
  const JpegInfo info = decoder.read_header(bytes, key);
  const int n = options.output_size;
  if (options.train) {
    const CropParams p = random_resized_crop(info.width, info.height, epoch, index, options);
    decoder.decode_crop(bytes, p.rect, n, n, dst, key, p.flip);
  } else {
    decoder.decode_crop(bytes, eval_crop(info.width, info.height, options), n, n, dst, key);
  }
}

}  // namespace stoker::data
