// fill, copy and cast: moving and converting tensor data.
//
// All ops run on the current stream of the tensors' device (see core/stream.h) and return
// without waiting for the GPU. Inputs are validated first: a mismatch throws stoker::Error
// naming the op, every tensor's dtype/shape/device and what was expected.
#pragma once

#include <span>

#include "stoker/core/tensor.h"

namespace stoker::ops {

// Sets every element to `value`, converted to the tensor's dtype: float dtypes round the double
// to f32 first, then (RNE) to f16/bf16; integer dtypes truncate (out-of-range values are
// undefined).
void fill(const Tensor& out, double value);

// dst = src. Same dtype and element count; any devices (host<->device copies are asynchronous
// on the current stream of the GPU side when the host side is pinned, synchronous otherwise).
void copy(const Tensor& dst, const Tensor& src);

// dst = src converted between float dtypes (f32, f16, bf16; RNE, NaN/Inf kept; same dtype is a
// copy). Same device, same element count.
void cast(const Tensor& dst, const Tensor& src);

// dsts[i] = srcs[i] for whole lists of f32 tensors into f16 or bf16 ones (one dtype per call),
// in one multi-tensor launch on the GPU: the refresh of mixed-precision weight copies after an
// optimizer step. Pairwise equal element counts, all on one device; same rounding as cast().
void cast_multi(std::span<const Tensor> dsts, std::span<const Tensor> srcs);

}  // namespace stoker::ops
