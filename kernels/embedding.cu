// CUDA embedding lookup and its gradient: one warp per id (eight per block), grid-stride over
// ids; each lane moves 16-byte Packs of the row when the row start is aligned.
//
// Forward: y[i, :] = table[ids[i], :] rounded once to y's dtype (the CPU reference's bits). An
// id outside [0, V) cannot be reported without a host sync, so its row is written as NaN: the
// loss turns NaN and the Trainer's non-finite check stops the run at that step.
// Backward: dtable[ids[i], :] += dy[i, :] with fp32 atomicAdd. Repeated ids make lanes of
// different warps add into one row, and float atomics make the summation order (hence the last
// bits) vary from run to run: this op is NOT bitwise deterministic on the GPU (the CPU
// reference is). Out-of-range ids are skipped (their forward rows were already NaN).
#include <limits>

#include "kernel_util.cuh"
#include "nn_util.cuh"
#include "ops/embedding_stubs.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kRowsPerBlock = kBlockSize / 32;

template <int V, typename O, typename I>
__global__ void __launch_bounds__(kBlockSize)
    embedding_forward_kernel(O* y, const I* ids, const float* table, int64_t n, int64_t v,
                             int64_t d) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t id = static_cast<int64_t>(ids[r]);
    O* dst = y + r * d;
    if (id < 0 || id >= v) {
      const O nan = from_float<O>(std::numeric_limits<float>::quiet_NaN());
      for (int64_t j = lane; j < d; j += 32) dst[j] = nan;
      continue;
    }
    row_map<32, V>(dst, table + id * d, d, lane, [](int64_t, float x) { return x; });
  }
}

template <int V, typename G, typename I>
__global__ void __launch_bounds__(kBlockSize)
    embedding_backward_kernel(float* dtable, const G* dy, const I* ids, int64_t n, int64_t v,
                              int64_t d) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t id = static_cast<int64_t>(ids[r]);
    if (id < 0 || id >= v) continue;
    float* dst = dtable + id * d;
    row_visit<32, V>(dy + r * d, d, lane, [&](int64_t j, float g) { atomicAdd(dst + j, g); });
  }
}

template <typename F>
void visit_ids(const Tensor& ids, F&& f) {
  if (ids.dtype() == DType::i32) {
    f(static_cast<const int32_t*>(ids.data()));
  } else {
    f(static_cast<const int64_t*>(ids.data()));
  }
}

}  // namespace

void embedding_forward(const Tensor& y, const Tensor& ids, const Tensor& table) {
  const core::DeviceScope scope(table.device().index);
  const int64_t v = table.size(0), d = table.size(1), n = ids.numel();
  const cudaStream_t stream = core::cuda_stream(table.device());
  const unsigned grid = row_grid(n, 32, int64_t{sm_count(table.device().index)} * kBlocksPerSm);
  visit_ids(ids, [&](const auto* id) {
    visit_float(y.dtype(), [&](auto tag) {
      using O = typename decltype(tag)::type;
      O* out = static_cast<O*>(y.data());
      const float* t = static_cast<const float*>(table.data());
      // Packs of four: 16 bytes of the f32 table, 8 or 16 bytes of y.
      if (rows_aligned(t, d, sizeof(float)) &&
          reinterpret_cast<uintptr_t>(out) % pack_align<O, 4>() == 0 && d % 4 == 0) {
        embedding_forward_kernel<4><<<grid, kBlockSize, 0, stream>>>(out, id, t, n, v, d);
      } else {
        embedding_forward_kernel<1><<<grid, kBlockSize, 0, stream>>>(out, id, t, n, v, d);
      }
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void embedding_backward(const Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  const core::DeviceScope scope(dtable.device().index);
  const int64_t v = dtable.size(0), d = dtable.size(1), n = ids.numel();
  const cudaStream_t stream = core::cuda_stream(dtable.device());
  const unsigned grid = row_grid(n, 32, int64_t{sm_count(dtable.device().index)} * kBlocksPerSm);
  visit_ids(ids, [&](const auto* id) {
    visit_float(dy.dtype(), [&](auto tag) {
      using G = typename decltype(tag)::type;
      constexpr int V = 16 / sizeof(G);
      const G* g = static_cast<const G*>(dy.data());
      float* t = static_cast<float*>(dtable.data());
      if (rows_aligned(g, d, sizeof(G))) {
        embedding_backward_kernel<V><<<grid, kBlockSize, 0, stream>>>(t, g, id, n, v, d);
      } else {
        embedding_backward_kernel<1><<<grid, kBlockSize, 0, stream>>>(t, g, id, n, v, d);
      }
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

STOKER_REGISTER_STUB(embedding_forward, embedding_forward);
STOKER_REGISTER_STUB(embedding_backward, embedding_backward);

}  // namespace stoker::ops::cuda
