// The synthetic image dataset: coloured shapes (circle, square, triangle, cross, ring, diamond,
// horizontal bar, vertical bar) of varied size, position and colour on a noisy background,
// which a small CNN learns in a few epochs. It is the default dataset of the demos and tests.
//
// Image i is a pure function of (seed, i, size): its class is i % classes (so classes are
// balanced), everything else is drawn from Philox. `stoker pack synth` packs it into LMDB.
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "stoker/data/pack.h"

namespace stoker::data {

inline constexpr int kSynthMaxClasses = 8;

struct SynthOptions {
  int64_t samples = 1000;
  int classes = 4;  // 2..kSynthMaxClasses
  int size = 32;    // square images of size x size pixels (>= 8)
  uint64_t seed = 0;
  int quality = 90;  // JPEG quality
};

// "circle", "square", ... (the first `classes` shape names).
std::vector<std::string> synth_class_names(int classes);

// RGB pixels (HWC, size * size * 3) of image `index`; its label goes to `label`.
std::vector<uint8_t> synth_image(const SynthOptions& options, int64_t index, int32_t& label);

// The same image compressed with TurboJPEG.
std::vector<uint8_t> synth_jpeg(const SynthOptions& options, int64_t index, int32_t& label);

// Packs the synthetic set into an LMDB database at `out`.
PackSummary pack_synth(const SynthOptions& synth, const std::filesystem::path& out,
                       const PackOptions& options);

// Writes the synthetic set as JPEG files: out/<class name>/<index>.jpg (for `stoker pack DIR`).
void write_synth_folder(const SynthOptions& synth, const std::filesystem::path& out);

}  // namespace stoker::data
