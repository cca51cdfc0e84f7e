// Fp8Scaling: the per-tensor delayed scale of one FP8 tensor of a layer (a Linear's input, weight
// or output gradient) and the cast that uses it; scales and amax histories stay on the device
// and are not saved. A recomputation passes new_use = false to reproduce the forward's codes.
// Details: docs/mixed_precision.md#fp8.
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
