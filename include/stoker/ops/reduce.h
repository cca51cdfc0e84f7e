// Reductions to a single fp32 value, kept on the tensor's device (no host sync: call
// `.item()` on the result when the value must reach the host).
//
// The multi-tensor forms reduce a whole list (e.g. every gradient of a model) in one kernel
// launch, as if the tensors were concatenated. Accumulation is fp32 on the GPU (fixed-order
// tree, deterministic run to run) and fp64 on the CPU. NaN in any input makes max_abs and
// l2_norm NaN, which is what overflow checks rely on.
#pragma once

#include <span>
#include <vector>

#include "stoker/core/tensor.h"

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
