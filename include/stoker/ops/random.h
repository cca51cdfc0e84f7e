// Random fills from the Philox counter-based generator (core/rng.h).
//
// Element i of the output is a pure function of (seed, offset, i): the CPU and GPU produce the
// same bits, and any fill can be replayed exactly by passing the same (seed, offset). The
// Generator overloads reserve a fresh range so consecutive fills never overlap.
// Float outputs only (f32, f16, bf16; values are computed in fp32 and rounded once).
#pragma once

#include <cstdint>

#include "stoker/core/rng.h"
#include "stoker/core/tensor.h"

namespace stoker::ops {

// Uniform in [lo, hi).
void random_uniform(const Tensor& out, float lo, float hi, uint64_t seed, uint64_t offset);
void random_uniform(const Tensor& out, float lo, float hi, Generator& gen);
// Normal with the given mean and standard deviation.
void random_normal(const Tensor& out, float mean, float std, uint64_t seed, uint64_t offset);
void random_normal(const Tensor& out, float mean, float std, Generator& gen);

}  // namespace stoker::ops
