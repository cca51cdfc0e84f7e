// CUDA per-channel image ops: layout conversion, channel bias add, channel bias gradient and
// global average pooling (forward and backward).
//
// The two reductions (bias gradient: sum over n, h, w per channel; global average: sum over h, w
// per (n, c)) are the same two shapes of sum in either layout:
//   "planes"  — x as [outer, C, inner], a channel's elements are `inner`-long contiguous runs
//               (NCHW bias grad: outer N, inner HW; NCHW global avg: outer 1, C = N*C).
//   "columns" — x as [B, M, C], a channel is a column of an M x C matrix (NHWC: bias grad with
//               B 1, M N*HW; global avg with B N, M HW). A block of 32 x 8 threads reads 32
//               adjacent channels per row, so loads are coalesced.
// Both split the long axis into a number of pieces that depends only on the shape, write one
// fp32 partial per (piece, output) and a second kernel folds the partials in piece order: no
// atomics, the same bits on every run and every GPU. Elements are read once; the bias gradient
// is added into dbias (+=) by the fold.
#include <algorithm>

#include "kernel_util.cuh"
#include "ops/conv_stubs.h"
#include "ops/layout_stubs.h"
#include "ops/pool_stubs.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kSumBlock = 256;
constexpr int64_t kMaxSplits = 256;
constexpr int64_t kPlaneSplitElems = 16384;  // elements per block before splitting a plane sum
constexpr int64_t kColumnSplitRows = 512;    // rows per block before splitting a column sum

__device__ STOKER_FORCEINLINE int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ STOKER_FORCEINLINE int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// (n, c, h, w) of element i of a tensor with extents (C, H, W) in layout nchw / nhwc, and back.
struct Index4 {
  int64_t n, c, h, w;
};
__device__ STOKER_FORCEINLINE Index4 unflatten(int64_t i, bool nchw, int64_t c, int64_t h,
                                               int64_t w) {
  Index4 r;
  if (nchw) {
    r.w = i % w, i /= w;
    r.h = i % h, i /= h;
    r.c = i % c, r.n = i / c;
  } else {
    r.c = i % c, i /= c;
    r.w = i % w, i /= w;
    r.h = i % h, r.n = i / h;
  }
  return r;
}
__device__ STOKER_FORCEINLINE int64_t flatten(const Index4& x, bool nchw, int64_t c, int64_t h,
                                              int64_t w) {
  return nchw ? ((x.n * c + x.c) * h + x.h) * w + x.w : ((x.n * h + x.h) * w + x.w) * c + x.c;
}

template <typename D, typename S>
__global__ void convert_layout_kernel(D* dst, const S* src, int64_t total, int64_t c, int64_t h,
                                      int64_t w, bool src_nchw, bool dst_nchw) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const Index4 at = unflatten(i, dst_nchw, c, h, w);
    dst[i] = from_float<D>(to_float(src[flatten(at, src_nchw, c, h, w)]));
  }
}

template <typename T>
__global__ void add_channel_bias_kernel(T* y, const float* bias, int64_t total, int64_t c,
                                        int64_t hw, bool nchw) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t ch = nchw ? (i / hw) % c : i % c;
    y[i] = from_float<T>(to_float(y[i]) + bias[ch]);
  }
}

// Fixed-order sum over a block of kSumBlock threads; valid in thread 0.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kSumBlock / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kSumBlock / 32 ? warp_sums[lane] : 0.0f;
#pragma unroll
    for (int o = kSumBlock / 64; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  }
  return v;
}

// Grid (C, splits): block (ch, sp) sums elements [sp * per_split, ...) of channel ch's
// outer * inner elements into partial[sp * C + ch].
template <typename T>
__global__ void __launch_bounds__(kSumBlock)
    plane_sum_kernel(const T* x, float* partial, int64_t outer, int64_t channels, int64_t inner,
                     int64_t per_split) {
  const int64_t ch = blockIdx.x;
  const int64_t total = outer * inner;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * per_split;
  const int64_t end = min(total, begin + per_split);
  float acc = 0.0f;
  for (int64_t j = begin + threadIdx.x; j < end; j += kSumBlock) {
    const int64_t o = j / inner, s = j - o * inner;
    acc += to_float(x[(o * channels + ch) * inner + s]);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.y * channels + ch] = acc;
}

// Grid (ceil(C / 32), B, splits), block (32, 8): sums rows [sp * rows_per_split, ...) of column
// c of batch b of x [B, M, C] into partial[(sp * B + b) * C + c].
template <typename T>
__global__ void __launch_bounds__(256)
    column_sum_kernel(const T* x, float* partial, int64_t batches, int64_t rows, int64_t channels,
                      int64_t rows_per_split) {
  __shared__ float sums[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t b = blockIdx.y;
  const int64_t begin = static_cast<int64_t>(blockIdx.z) * rows_per_split;
  const int64_t end = min(rows, begin + rows_per_split);
  float acc = 0.0f;
  if (c < channels) {
    const T* base = x + b * rows * channels + c;
    for (int64_t m = begin + threadIdx.y; m < end; m += 8) acc += to_float(base[m * channels]);
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) total += sums[k][threadIdx.x];
    partial[(static_cast<int64_t>(blockIdx.z) * batches + b) * channels + c] = total;
  }
}

// out[i] = (accumulate ? out[i] : 0) + alpha * sum over pieces of partial[piece * count + i].
template <typename Out>
__global__ void fold_partials_kernel(Out* out, const float* partial, int64_t count, int64_t splits,
                                     float alpha, bool accumulate) {
  for (int64_t i = global_thread(); i < count; i += grid_threads()) {
    float sum = 0.0f;
    for (int64_t sp = 0; sp < splits; ++sp) sum += partial[sp * count + i];
    const float v = alpha * sum;
    out[i] = from_float<Out>(accumulate ? to_float(out[i]) + v : v);
  }
}

template <typename T>
__global__ void global_avgpool_backward_kernel(T* dx, const T* dy, int64_t total, int64_t c,
                                               int64_t hw, bool nchw, float inv) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t n = i / (c * hw);
    const int64_t ch = nchw ? (i / hw) % c : i % c;
    dx[i] = from_float<T>(to_float(dy[n * c + ch]) * inv);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// out[k] (+)= alpha * per-channel sums of x, shaped as in the file comment. `out` has
// count = (columns ? B * C : C) elements.
template <typename T, typename Out>
void channel_sums(Device d, const T* x, Out* out, bool columns, int64_t a, int64_t channels,
                  int64_t b, float alpha, bool accumulate) {
  const cudaStream_t stream = core::cuda_stream(d);
  int64_t splits = 1, count = 0;
  Tensor partial;
  if (!columns) {  // planes: outer a, inner b
    const int64_t per = a * b;
    splits = std::clamp<int64_t>(ceil_div(per, kPlaneSplitElems), 1, kMaxSplits);
    const int64_t per_split = ceil_div(per, splits);
    count = channels;
    partial = Tensor::empty({splits * count}, DType::f32, d);
    plane_sum_kernel<<<dim3(static_cast<unsigned>(channels), static_cast<unsigned>(splits)),
                       kSumBlock, 0, stream>>>(x, partial.data<float>(), a, channels, b, per_split);
  } else {  // columns: batches a, rows b
    splits = std::clamp<int64_t>(ceil_div(b, kColumnSplitRows), 1, kMaxSplits);
    const int64_t rows_per_split = ceil_div(b, splits);
    count = a * channels;
    STOKER_CHECK(a <= 65535, "internal: channel_sums over ", a, " batches exceeds the grid");
    partial = Tensor::empty({splits * count}, DType::f32, d);
    const dim3 grid(static_cast<unsigned>(ceil_div(channels, 32)), static_cast<unsigned>(a),
                    static_cast<unsigned>(splits));
    column_sum_kernel<<<grid, dim3(32, 8), 0, stream>>>(x, partial.data<float>(), a, b, channels,
                                                        rows_per_split);
  }
  STOKER_CUDA_CHECK(cudaGetLastError());
  fold_partials_kernel<<<grid_for(count, d.index), kBlockSize, 0, stream>>>(
      out, partial.data<float>(), count, splits, alpha, accumulate);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void convert_layout(const Tensor& dst, const Tensor& src, Layout from, Layout to) {
  const Device d = dst.device();
  const core::DeviceScope scope(d.index);
  const Dims4 e = dims4(src.shape(), from);
  const int64_t total = dst.numel();
  visit_float(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    visit_float(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      convert_layout_kernel<<<grid_for(total, d.index), kBlockSize, 0, core::cuda_stream(d)>>>(
          static_cast<D*>(dst.data()), static_cast<const S*>(src.data()), total, e.c, e.h, e.w,
          from == Layout::nchw, to == Layout::nchw);
    });
  });
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void add_channel_bias(const Tensor& y, const Tensor& bias, Layout layout) {
  const Device d = y.device();
  const core::DeviceScope scope(d.index);
  const Dims4 e = dims4(y.shape(), layout);
  const int64_t total = y.numel();
  visit_float(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_channel_bias_kernel<<<grid_for(total, d.index), kBlockSize, 0, core::cuda_stream(d)>>>(
        static_cast<T*>(y.data()), bias.data<float>(), total, e.c, e.h * e.w,
        layout == Layout::nchw);
  });
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void channel_bias_grad(const Tensor& dbias, const Tensor& dy, Layout layout) {
  const Device d = dy.device();
  const core::DeviceScope scope(d.index);
  const Dims4 e = dims4(dy.shape(), layout);
  visit_float(dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(dy.data());
    if (layout == Layout::nchw) {
      channel_sums(d, x, dbias.data<float>(), false, e.n, e.c, e.h * e.w, 1.0f, true);
    } else {
      channel_sums(d, x, dbias.data<float>(), true, 1, e.c, e.n * e.h * e.w, 1.0f, true);
    }
  });
}

void global_avgpool_forward(const Tensor& y, const Tensor& x, Layout layout) {
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  const Dims4 e = dims4(x.shape(), layout);
  const float inv = 1.0f / static_cast<float>(e.h * e.w);
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x.data());
    T* out = static_cast<T*>(y.data());
    if (layout == Layout::nchw) {
      channel_sums(d, in, out, false, 1, e.n * e.c, e.h * e.w, inv, false);
    } else {
      channel_sums(d, in, out, true, e.n, e.c, e.h * e.w, inv, false);
    }
  });
}

void global_avgpool_backward(const Tensor& dx, const Tensor& dy, Layout layout) {
  const Device d = dx.device();
  const core::DeviceScope scope(d.index);
  const Dims4 e = dims4(dx.shape(), layout);
  const int64_t total = dx.numel();
  const float inv = 1.0f / static_cast<float>(e.h * e.w);
  visit_float(dx.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    global_avgpool_backward_kernel<<<grid_for(total, d.index), kBlockSize, 0,
                                     core::cuda_stream(d)>>>(
        static_cast<T*>(dx.data()), static_cast<const T*>(dy.data()), total, e.c, e.h * e.w,
        layout == Layout::nchw, inv);
  });
  STOKER_CUDA_CHECK(cudaGetLastError());
}

STOKER_REGISTER_STUB(convert_layout, convert_layout);
STOKER_REGISTER_STUB(add_channel_bias, add_channel_bias);
STOKER_REGISTER_STUB(channel_bias_grad, channel_bias_grad);
STOKER_REGISTER_STUB(global_avgpool_forward, global_avgpool_forward);
STOKER_REGISTER_STUB(global_avgpool_backward, global_avgpool_backward);

}  // namespace stoker::ops::cuda
