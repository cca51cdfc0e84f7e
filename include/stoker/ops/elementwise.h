// Elementwise arithmetic on float tensors (f32, f16, bf16). Math is done in fp32 and rounded
// once to the output dtype, so results match the CPU reference to the output's rounding.
// Shapes must have equal element counts (no broadcasting); all tensors on one device.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "stoker/core/rng.h"
#include "stoker/core/tensor.h"

namespace stoker::ops {

// out = a + b (a, b, out share one dtype; out may alias a or b).
void add(const Tensor& out, const Tensor& a, const Tensor& b);
// out = a * b (a, b, out share one dtype; out may alias a or b).
void mul(const Tensor& out, const Tensor& a, const Tensor& b);
// y += alpha * x (x and y may have different float dtypes, e.g. fp16 x into fp32 y).
void axpy(const Tensor& y, float alpha, const Tensor& x);
// x *= alpha, in place.
void scale(const Tensor& x, float alpha);
// x *= factor, in place, with `factor` a one-element f32 tensor on x's device read by the kernel
// (e.g. the loss scale, which never visits the host).
void scale_by(const Tensor& x, const Tensor& factor);

}  // namespace stoker::ops

// Reductions to a single fp32 value, kept on the tensor's device (no host sync: call
namespace stoker::ops {

enum class Reduction { sum, max_abs, l2_norm };

// A scalar (rank-0) f32 tensor on x's device.
Tensor reduce(const Tensor& x, Reduction r);
// One value over every element of every tensor (all on one device; dtypes may differ).
Tensor reduce(std::span<const Tensor> xs, Reduction r);

inline Tensor sum(const Tensor& x) { return reduce(x, Reduction::sum); }
inline Tensor max_abs(const Tensor& x) { return reduce(x, Reduction::max_abs); }
inline Tensor l2_norm(const Tensor& x) { return reduce(x, Reduction::l2_norm); }
inline Tensor sum(std::span<const Tensor> xs) { return reduce(xs, Reduction::sum); }
inline Tensor max_abs(std::span<const Tensor> xs) { return reduce(xs, Reduction::max_abs); }
inline Tensor l2_norm(std::span<const Tensor> xs) { return reduce(xs, Reduction::l2_norm); }

}  // namespace stoker::ops

// Random fills from the Philox counter-based generator (core/rng.h).
namespace stoker::ops {

// Uniform in [lo, hi).
void random_uniform(const Tensor& out, float lo, float hi, uint64_t seed, uint64_t offset);
void random_uniform(const Tensor& out, float lo, float hi, Generator& gen);
// Normal with the given mean and standard deviation.
void random_normal(const Tensor& out, float mean, float std, uint64_t seed, uint64_t offset);
void random_normal(const Tensor& out, float mean, float std, Generator& gen);

}  // namespace stoker::ops
