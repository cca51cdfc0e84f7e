// Synthetic shapes. Each image draws its parameters from its own Philox stream (seed, index), so
// any subset can be generated in any order on any thread. Shapes are rendered with 4x4
// supersampling (soft edges survive JPEG better) over a per-pixel noisy background.
#include "stoker/data/pack.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "data/pack_jpeg.h"
#include "stoker/core/error.h"
#include "stoker/core/rng.h"

namespace stoker::data {

namespace {

constexpr uint64_t kSynthStream = 0x73796E7468000000ull;  // "synth"
constexpr const char* kShapeNames[kSynthMaxClasses] = {"circle", "square",  "triangle", "cross",
                                                       "ring",   "diamond", "hbar",     "vbar"};

class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint32_t next() {
    if (pos_ == 4) {
      block_ = core::philox_block(seed_, stream_, counter_++);
      pos_ = 0;
    }
    return block_.v[pos_++];
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 8) * (1.0f / 16777216.0f);
  }
  int integer(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(next() % static_cast<uint32_t>(hi - lo + 1));
  }

 private:
  uint64_t seed_, stream_, counter_ = 0;
  core::Philox4 block_{};
  int pos_ = 4;
};

// Whether the point (dx, dy), in units of the shape's radius around its centre, is inside.
bool inside(int shape, float dx, float dy) {
  const float ax = std::fabs(dx), ay = std::fabs(dy);
  switch (shape) {
    case 0:
      return dx * dx + dy * dy <= 1.0f;
    case 1:
      return ax <= 0.8f && ay <= 0.8f;
    case 2:
      return dy >= -0.85f && dy <= 0.8f && ax <= 0.55f * (dy + 0.85f);
    case 3:
      return (ax <= 0.25f && ay <= 0.95f) || (ay <= 0.25f && ax <= 0.95f);
    case 4: {
      const float d2 = dx * dx + dy * dy;
      return d2 <= 1.0f && d2 >= 0.36f;
    }
    case 5:
      return ax + ay <= 1.0f;
    case 6:
      return ax <= 0.95f && ay <= 0.3f;
    default:
      return ay <= 0.95f && ax <= 0.3f;
  }
}

void check_options(const SynthOptions& o) {
  STOKER_CHECK(o.classes >= 1 && o.classes <= kSynthMaxClasses, "synth: classes ", o.classes,
               " is not in [1, ", kSynthMaxClasses, "]");
  STOKER_CHECK(o.size >= 8 && o.size <= 4096, "synth: size ", o.size, " is not in [8, 4096]");
  STOKER_CHECK(o.samples > 0, "synth: samples ", o.samples, " must be positive");
  STOKER_CHECK(o.quality >= 1 && o.quality <= 100, "synth: quality ", o.quality,
               " is not in [1, 100]");
}

}  // namespace

std::vector<std::string> synth_class_names(int classes) {
  STOKER_CHECK(classes >= 1 && classes <= kSynthMaxClasses, "synth: classes ", classes,
               " is not in [1, ", kSynthMaxClasses, "]");
  return std::vector<std::string>(kShapeNames, kShapeNames + classes);
}

std::vector<uint8_t> synth_image(const SynthOptions& o, int64_t index, int32_t& label) {
  check_options(o);
  STOKER_CHECK(index >= 0, "synth: index ", index, " must be >= 0");
  label = static_cast<int32_t>(index % o.classes);
  Draws d(o.seed, kSynthStream + static_cast<uint64_t>(index));
  const int s = o.size;
  const float radius = d.uniform(0.22f, 0.42f) * s;
  const float cx = d.uniform(radius, s - radius), cy = d.uniform(radius, s - radius);
  int fg[3], bg[3];
  for (int c = 0; c < 3; ++c) fg[c] = d.integer(140, 255);
  for (int c = 0; c < 3; ++c) bg[c] = d.integer(0, 100);
  const int noise = d.integer(4, 24);
  std::vector<uint8_t> px(static_cast<size_t>(s) * s * 3);
  constexpr int kSuper = 4;
  for (int y = 0; y < s; ++y) {
    for (int x = 0; x < s; ++x) {
      int hits = 0;
      for (int sy = 0; sy < kSuper; ++sy) {
        for (int sx = 0; sx < kSuper; ++sx) {
          const float fx = x + (sx + 0.5f) / kSuper, fy = y + (sy + 0.5f) / kSuper;
          hits += inside(label, (fx - cx) / radius, (fy - cy) / radius) ? 1 : 0;
        }
      }
      const float alpha = static_cast<float>(hits) / (kSuper * kSuper);
      const uint32_t r = d.next();
      for (int c = 0; c < 3; ++c) {
        const int jitter = static_cast<int>((r >> (8 * c)) & 0xFF) % (2 * noise + 1) - noise;
        const float v = alpha * fg[c] + (1.0f - alpha) * (bg[c] + jitter);
        px[(static_cast<size_t>(y) * s + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(std::lround(v), 0l, 255l));
      }
    }
  }
  return px;
}

std::vector<uint8_t> synth_jpeg(const SynthOptions& o, int64_t index, int32_t& label) {
  const std::vector<uint8_t> px = synth_image(o, index, label);
  return detail::compress_rgb(px.data(), o.size, o.size, o.quality);
}

PackSummary pack_synth(const SynthOptions& synth, const std::filesystem::path& out,
                       const PackOptions& options) {
  check_options(synth);
  return pack_generated(
      synth.samples, [&](int64_t i, int32_t& label) { return synth_jpeg(synth, i, label); },
      synth_class_names(synth.classes), out, options);
}

void write_synth_folder(const SynthOptions& synth, const std::filesystem::path& out) {
  check_options(synth);
  const auto names = synth_class_names(synth.classes);
  std::error_code ec;
  for (const auto& name : names) {
    std::filesystem::create_directories(out / name, ec);
    STOKER_CHECK_HINT(!ec, "choose a writable --out", "synth: cannot create ",
                      (out / name).string(), ": ", ec.message());
  }
  for (int64_t i = 0; i < synth.samples; ++i) {
    int32_t label = 0;
    const std::vector<uint8_t> jpeg = synth_jpeg(synth, i, label);
    char file[32];
    std::snprintf(file, sizeof(file), "%08lld.jpg", static_cast<long long>(i));
    const auto path = out / names[static_cast<size_t>(label)] / file;
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
    STOKER_CHECK_HINT(static_cast<bool>(f), "check free disk space and permissions",
                      "synth: cannot write ", path.string());
  }
}

}  // namespace stoker::data
