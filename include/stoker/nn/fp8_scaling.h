// Fp8Scaling: the per-tensor scale of one FP8 tensor of a layer (a Linear's input, weight or
// output gradient) under delayed scaling, and the cast that uses it.
//
// Delayed scaling (the recipe of NVIDIA's Transformer Engine): the scale a tensor is quantized
// with comes from the largest |value| (amax) the same tensor had over its last `amax_history`
// uses, scale = fp8_max / max(history) / 2^margin — so quantizing needs no pass over the tensor
// before it (the cast records this use's amax in the same pass, for the next). The first use
// has no history: its amax is measured first (one extra read of that tensor, once). Everything
// stays on the device (ops::fp8_update_scale): no host sync, and a CUDA graph can replay it.
//
// A recomputation (nn::recomputing(), an nn::Checkpoint's backward) must reproduce the
// forward's codes: cast(x, ..., new_use = false) quantizes with the current scale and leaves the
// history alone.
//
// The scales and histories are not saved in weight files or training checkpoints: a resumed run
// measures the first amax again, which is what a fresh history would hold after one step.
#pragma once

#include "stoker/ops/fp8.h"

namespace stoker::nn {

struct Fp8Options {
  int amax_history = 16;  // uses whose amax the scale follows (>= 1)
  int margin = 0;         // headroom: the scale is divided by 2^margin (0..63)
  bool operator==(const Fp8Options&) const = default;
};

class Fp8Scaling {
 public:
  explicit Fp8Scaling(core::Fp8Format format = core::Fp8Format::e4m3, Fp8Options options = {});

  // What cast() returns: the codes in x's layout and transposed (each with its own scale_inv;
  // codes undefined where not asked for).
  struct Cast {
    ops::Fp8Tensor value;       // [R, C]
    ops::Fp8Tensor transposed;  // [C, R]
  };
  // Quantizes x [R, C] (f32/f16/bf16). new_use: a new use of the tensor (the scale first steps
  // to the history's); false: a recomputation, with the scale of the last use.
  Cast cast(const Tensor& x, bool value, bool transposed, bool new_use = true);

  core::Fp8Format format() const { return format_; }
  const Fp8Options& options() const { return options_; }
  // Rank-0 f32 on the device of the last cast; undefined before the first.
  const Tensor& scale() const { return scale_; }
  // f32 [amax_history], the most recent use first; undefined before the first cast.
  const Tensor& amax_history() const { return history_; }

 private:
  core::Fp8Format format_;
  Fp8Options options_;
  Tensor scale_, history_, amax_;  // amax_: the last cast's, folded in at the next use
  bool primed_ = false;
};

}  // namespace stoker::nn
