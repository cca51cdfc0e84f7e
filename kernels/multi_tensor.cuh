// Private: the multi-tensor launch shared by the optimizer updates (optim.cu), the training-step
// ops (training.cu: clipping, loss-scale unscaling) and the mixed-precision weight refresh
// (copy.cu: cast_multi): every tensor of a list handled in one launch (or a few, for very
// long lists), instead of one launch per tensor and per operation as a naive loop would.
//
// Each tensor is cut into chunks of kChunk elements; the chunk counts' prefix sums travel in the
// kernel parameters with the tensors' pointers, and block b handles chunks b, b + grid, ... .
// A chunk's tensor is found by binary search over the prefix (uniform across the block).
//
// found_inf (optional, a device flag written by the gradient scaler) is read by every thread
// before it writes anything: an overflowed step leaves parameters and state untouched without
// a host sync.
#pragma once

#include <algorithm>
#include <concepts>
#include <memory>
#include <span>

#include "kernel_util.cuh"
#include "stoker/core/tensor.h"

namespace stoker::ops::cuda {

constexpr int64_t kChunk = 65536;
constexpr int kMaxTensorsPerLaunch = 480;  // 5 pointers + 2 ints per tensor within 32 KB
constexpr int kMultiTensorBlock = 256;

// What an update sees: per tensor t its element count, up to four f32 pointers (parameter,
// gradient, two states) and a half-precision one (the parameter's compute copy, which an
// optimizer update may write in the same pass), plus three device scalars some updates use.
struct MultiTensorArgs {
  const float* found_inf;
  float* flag;          // a device flag some updates set (unscale: found_inf)
  const float* scalar;  // a device scalar some updates read (the clipping norm)
  int32_t count;
  int64_t chunk_begin[kMaxTensorsPerLaunch + 1];
  int64_t numel[kMaxTensorsPerLaunch];
  float* p[kMaxTensorsPerLaunch];
  const float* g[kMaxTensorsPerLaunch];
  float* s1[kMaxTensorsPerLaunch];
  float* s2[kMaxTensorsPerLaunch];
  void* h[kMaxTensorsPerLaunch];  // f16/bf16 (the update knows which), or null
};
static_assert(sizeof(MultiTensorArgs) <= 32764,
              "multi-tensor kernel parameters exceed 32764 bytes");

// The tensor that chunk `chunk` belongs to: binary search over the prefix `a.chunk_begin` of
// `a.count` tensors (MultiTensorArgs, or another argument block with those two members).
template <typename Args>
__device__ STOKER_FORCEINLINE int find_tensor(const Args& a, int64_t chunk) {
  int lo = 0, hi = a.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.chunk_begin[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// An update that can also take 4 consecutive elements at once: quad(a, t, i) for elements
// i..i+3 of tensor t, when quad_ok(a, t) says its pointers allow 16-byte accesses (i is a
// multiple of 4). All of a quad's loads are issued before its stores — one element at a time,
// the stores of one element keep the compiler from hoisting the next element's loads (the
// pointers may alias), which left the AdamW update of GPT-2 124M at ~1 TB/s on an H100.
template <typename Update>
concept QuadUpdate = requires(const Update& u, const MultiTensorArgs& a) {
  u.quad(a, 0, int64_t{0});
  { u.quad_ok(a, 0) } -> std::convertible_to<bool>;
};

// Update: operator()(const MultiTensorArgs& a, int t, int64_t i), element i of tensor t (and,
// for a QuadUpdate, quads where the tensor allows them; the tail and misaligned tensors one
// element at a time: the same per-element math, so the same bits).
template <typename Update>
__global__ void __launch_bounds__(kMultiTensorBlock)
    multi_tensor_kernel(const __grid_constant__ MultiTensorArgs a, Update update) {
  if (a.found_inf && *a.found_inf != 0.0f) return;
  const int64_t chunks = a.chunk_begin[a.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = find_tensor(a, c);
    const int64_t begin = (c - a.chunk_begin[t]) * kChunk;  // a multiple of 4
    const int64_t end = min(begin + kChunk, a.numel[t]);
    int64_t first = begin;  // the first element left to the scalar loop
    if constexpr (QuadUpdate<Update>) {
      if (update.quad_ok(a, t)) {
        const int64_t quads = (end - begin) / 4;
        for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) update.quad(a, t, begin + 4 * q);
        first = begin + 4 * quads;
      }
    }
    for (int64_t i = first + threadIdx.x; i < end; i += blockDim.x) update(a, t, i);
  }
}

// Launches `update` over the tensors (params; grads, s1, s2, halves empty or of params' length;
// an undefined entry of halves gives a null h) in groups that fit the parameter block.
template <typename Update>
void launch_multi_tensor(std::span<const Tensor> params, std::span<const Tensor> grads,
                         std::span<const Tensor> s1, std::span<const Tensor> s2,
                         const Tensor& found_inf, Update update, const Tensor& scalar = {},
                         const Tensor& flag = {}, std::span<const Tensor> halves = {}) {
  const Device device = params[0].device();
  core::DeviceScope scope(device.index);
  for (size_t first = 0; first < params.size(); first += kMaxTensorsPerLaunch) {
    const size_t last = std::min(params.size(), first + kMaxTensorsPerLaunch);
    auto a = std::make_unique<MultiTensorArgs>();  // 30 KB: keep it off the host stack
    a->found_inf = found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr;
    a->scalar = scalar.defined() ? static_cast<const float*>(scalar.data()) : nullptr;
    a->flag = flag.defined() ? static_cast<float*>(flag.data()) : nullptr;
    int n = 0;
    int64_t chunks = 0;
    for (size_t t = first; t < last; ++t) {
      if (params[t].numel() == 0) continue;
      a->chunk_begin[n] = chunks;
      a->numel[n] = params[t].numel();
      a->p[n] = static_cast<float*>(params[t].data());
      a->g[n] = grads.empty() ? nullptr : static_cast<const float*>(grads[t].data());
      a->s1[n] = s1.empty() ? nullptr : static_cast<float*>(s1[t].data());
      a->s2[n] = s2.empty() ? nullptr : static_cast<float*>(s2[t].data());
      a->h[n] = halves.empty() || !halves[t].defined() ? nullptr : halves[t].data();
      chunks += (params[t].numel() + kChunk - 1) / kChunk;
      ++n;
    }
    if (n == 0) continue;
    a->count = n;
    a->chunk_begin[n] = chunks;
    const unsigned grid = static_cast<unsigned>(
        std::min<int64_t>(chunks, static_cast<int64_t>(sm_count(device.index)) * 8));
    multi_tensor_kernel<<<grid, kMultiTensorBlock, 0, core::cuda_stream(device)>>>(*a, update);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace stoker::ops::cuda
