// Layout: how a 4-D image tensor orders its extents. Tensors have no strides, so NCHW
// ([N, C, H, W], filters KCRS) vs NHWC ([N, H, W, C], channels-last, filters KRSC) is a shape
// convention every image op takes explicitly; filters are read by the same helpers (K as N).
// convert_layout runs on the current stream; the rest is host-only.
// Details: docs/architecture.md#tensors-and-memory.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "stoker/core/tensor.h"

namespace stoker::ops {

enum class Layout : uint8_t { nchw, nhwc };

constexpr std::string_view layout_name(Layout l) { return l == Layout::nchw ? "NCHW" : "NHWC"; }

// The logical extents of a 4-D tensor, whatever its layout.
struct Dims4 {
  int64_t n = 0, c = 0, h = 0, w = 0;
  bool operator==(const Dims4&) const = default;
};

// Reads the extents of a rank-4 shape in `layout` (throws stoker::Error for another rank).
Dims4 dims4(const Shape& shape, Layout layout);
// The shape of extents `d` in `layout`.
Shape shape4(const Dims4& d, Layout layout);

// dst = src with its extents reordered from layout `from` to layout `to` (e.g. NCHW -> NHWC, or
// a KCRS filter -> KRSC). src is rank 4 in `from`; dst holds the same logical extents in `to`.
// Float dtypes may differ (values are converted and rounded once); from == to is a copy/cast.
// dst must not alias src.
void convert_layout(const Tensor& dst, const Tensor& src, Layout from, Layout to);

}  // namespace stoker::ops

// fill, copy and cast: moving and converting tensor data.
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
