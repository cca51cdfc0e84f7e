// FP8 ops (ops/fp8.h) on the GPU: grid-stride elementwise conversions through core/fp8.h (the
// CPU reference's functions: identical codes and values), the scale read from device memory;
// the delayed-scaling step by one thread (the history is a handful of floats).
#include <algorithm>

#include "kernel_util.cuh"
#include "ops/fp8_math.h"
#include "ops/fp8_stubs.h"

namespace stoker::ops::cuda {

namespace {

template <core::Fp8Format F, typename T>
__global__ void __launch_bounds__(kBlockSize)
    fp8_quantize_kernel(uint8_t* codes, const T* x, const float* scale, int64_t n) {
  const float s = __ldg(scale);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    codes[i] = core::float_to_fp8_bits<F>(__fmul_rn(to_float(x[i]), s));
}

// y = value / factor (a scale), or value * factor (a scale_inv) with Inverse.
template <core::Fp8Format F, typename T, bool Inverse>
__global__ void __launch_bounds__(kBlockSize)
    fp8_dequantize_kernel(T* y, const uint8_t* codes, const float* factor, int64_t n) {
  const float s = __ldg(factor);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = core::fp8_bits_to_float<F>(codes[i]);
    y[i] = from_float<T>(Inverse ? __fmul_rn(v, s) : __fdiv_rn(v, s));
  }
}

// Cast + transpose: block (x, y) owns the kCtTile x kCtTile tile of x at rows x * kCtTile and
// columns y * kCtTile; thread (tx, ty) of a 32 x 8 block visits columns tx, tx + 32 of rows
// ty, ty + 8, ... (a warp reads a run of adjacent elements: coalesced), converts, writes the
// codes in place and parks them in shared memory, from which the transposed tile is written
// with the same pattern (a warp writes a run of one output row). The padding (+4 bytes: tile
// rows 17 words apart, an odd stride) keeps the column reads free of bank conflicts. amax: the
// largest bit pattern of |x| (NaN > Inf > finite for non-negative floats), reduced in the block and
// merged with one atomicMax per block.
constexpr int kCtTile = 64;
constexpr int kCtRows = 8;  // threadIdx.y extent

template <core::Fp8Format F, typename T>
__global__ void __launch_bounds__(32 * kCtRows)
    fp8_cast_transpose_kernel(uint8_t* codes, uint8_t* codes_t, unsigned* amax, float* scale_inv,
                              const T* x, const float* scale, int64_t rows, int64_t cols) {
  __shared__ uint8_t tile[kCtTile][kCtTile + 4];
  __shared__ unsigned warp_max[kCtRows];
  const float s = __ldg(scale);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kCtTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kCtTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) *scale_inv = __frcp_rn(s);
  unsigned local = 0;
  for (int i = ty; i < kCtTile; i += kCtRows) {
    const int64_t r = r0 + i;
    for (int j = tx; j < kCtTile; j += 32) {
      const int64_t c = c0 + j;
      uint8_t q = 0;
      if (r < rows && c < cols) {
        const float v = to_float(x[r * cols + c]);
        local = max(local, __float_as_uint(v) & 0x7fffffffu);
        q = core::float_to_fp8_bits<F>(__fmul_rn(v, s));
        if (codes) codes[r * cols + c] = q;
      }
      tile[i][j] = q;
    }
  }
  if (codes_t) {
    __syncthreads();
    for (int j = ty; j < kCtTile && c0 + j < cols; j += kCtRows) {  // output row c0 + j
      for (int i = tx; i < kCtTile && r0 + i < rows; i += 32)
        codes_t[(c0 + j) * rows + r0 + i] = tile[i][j];
    }
  }
  if (amax) {
    for (int offset = 16; offset > 0; offset /= 2)
      local = max(local, __shfl_xor_sync(0xffffffffu, local, offset));
    if (tx == 0) warp_max[ty] = local;
    __syncthreads();
    if (tx == 0 && ty == 0) {
      unsigned m = 0;
      for (int k = 0; k < kCtRows; ++k) m = max(m, warp_max[k]);
      atomicMax(amax, m);
    }
  }
}

// The vector path of the same cast (every dimension a multiple of 8, x 16-byte and the codes
// 8-byte aligned: the GEMM-sized tensors of training): thread t of a 256-thread block converts
// 8 adjacent elements of rows t / 8, t / 8 + 32 (one 16-byte load for bf16, two for f32) and
// stores their 8 codes as one 8-byte word, in place and into the shared tile; the transposed
// tile goes out the same way, 8 codes of 8 source rows per 8-byte store. Same codes, amax and
// scale_inv as the scalar kernel. Tile rows are 68 bytes apart (17 words: the column reads of
// the transposed pass hit each bank at most twice).
constexpr int kCtVec = 8;
constexpr int kCtStride = kCtTile + 4;

template <core::Fp8Format F, typename T>
__global__ void __launch_bounds__(256)
    fp8_cast_transpose_vec_kernel(uint8_t* codes, uint8_t* codes_t, unsigned* amax,
                                  float* scale_inv, const T* x, const float* scale, int64_t rows,
                                  int64_t cols) {
  __shared__ __align__(8) uint8_t tile[kCtTile * kCtStride];
  __shared__ unsigned warp_max[8];
  const float s = __ldg(scale);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kCtTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kCtTile;
  const int t = threadIdx.x, seg = t % kCtVec, lane_row = t / kCtVec;  // lane_row 0..31
  if (blockIdx.x == 0 && blockIdx.y == 0 && t == 0) *scale_inv = __frcp_rn(s);
  unsigned local = 0;
  for (int i = lane_row; i < kCtTile; i += 32) {
    const int64_t r = r0 + i, c = c0 + seg * kCtVec;
    uint32_t lo = 0, hi = 0;
    if (r < rows && c < cols) {
      const Pack<T, kCtVec> p = load_pack<kCtVec>(x + r * cols + c);
#pragma unroll
      for (int k = 0; k < kCtVec; ++k) {
        const float v = to_float(p.v[k]);
        local = max(local, __float_as_uint(v) & 0x7fffffffu);
        const uint32_t q = core::float_to_fp8_bits<F>(__fmul_rn(v, s));
        if (k < 4)
          lo |= q << (8 * k);
        else
          hi |= q << (8 * (k - 4));
      }
      if (codes) *reinterpret_cast<uint2*>(codes + r * cols + c) = make_uint2(lo, hi);
    }
    uint32_t* cell = reinterpret_cast<uint32_t*>(tile + i * kCtStride + seg * kCtVec);
    cell[0] = lo;
    cell[1] = hi;
  }
  if (codes_t) {
    __syncthreads();
    for (int j = lane_row; j < kCtTile; j += 32) {  // output row c0 + j, source rows r0 + 8 seg..
      const int64_t c = c0 + j, r = r0 + seg * kCtVec;
      if (c < cols && r < rows) {
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < kCtVec; ++k) {
          const uint32_t q = tile[(seg * kCtVec + k) * kCtStride + j];
          if (k < 4)
            lo |= q << (8 * k);
          else
            hi |= q << (8 * (k - 4));
        }
        *reinterpret_cast<uint2*>(codes_t + c * rows + r) = make_uint2(lo, hi);
      }
    }
  }
  if (amax) {
    for (int offset = 16; offset > 0; offset /= 2)
      local = max(local, __shfl_xor_sync(0xffffffffu, local, offset));
    if (t % 32 == 0) warp_max[t / 32] = local;
    __syncthreads();
    if (t == 0) {
      unsigned m = 0;
      for (int k = 0; k < 8; ++k) m = max(m, warp_max[k]);
      atomicMax(amax, m);
    }
  }
}

__global__ void fp8_scale_kernel(float* scale, float* history, int64_t length, const float* amax,
                                 float fp8_max, int margin) {
  detail::fp8_scale_step(scale, history, length, *amax, fp8_max, margin);
}

}  // namespace

void fp8_quantize(const Tensor& codes, const Tensor& x, const Tensor& scale,
                  core::Fp8Format format) {
  const core::DeviceScope scope(x.device().index);
  const int64_t n = x.numel();
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      fp8_quantize_kernel<F, T>
          <<<grid_for(n, x.device().index), kBlockSize, 0, core::cuda_stream(x.device())>>>(
              static_cast<uint8_t*>(codes.data()), static_cast<const T*>(x.data()),
              static_cast<const float*>(scale.data()), n);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& factor,
                    core::Fp8Format format, bool factor_is_inverse) {
  const core::DeviceScope scope(y.device().index);
  const int64_t n = y.numel();
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto* kernel = factor_is_inverse ? fp8_dequantize_kernel<F, T, true>
                                       : fp8_dequantize_kernel<F, T, false>;
      kernel<<<grid_for(n, y.device().index), kBlockSize, 0, core::cuda_stream(y.device())>>>(
          static_cast<T*>(y.data()), static_cast<const uint8_t*>(codes.data()),
          static_cast<const float*>(factor.data()), n);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void fp8_cast_transpose(const Fp8CastOutputs& out, const Tensor& x, const Tensor& scale,
                        core::Fp8Format format) {
  const core::DeviceScope scope(x.device().index);
  const cudaStream_t stream = core::cuda_stream(x.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  auto* amax = out.amax ? static_cast<unsigned*>(out.amax->data()) : nullptr;
  if (amax) STOKER_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(unsigned), stream));
  auto* codes = out.codes ? static_cast<uint8_t*>(out.codes->data()) : nullptr;
  auto* codes_t = out.codes_t ? static_cast<uint8_t*>(out.codes_t->data()) : nullptr;
  // An empty x still writes scale_inv (and amax 0): one block that converts nothing.
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, (rows + kCtTile - 1) / kCtTile)),
                  static_cast<unsigned>(std::max<int64_t>(1, (cols + kCtTile - 1) / kCtTile)));
  STOKER_CHECK(grid.y <= 65535u, "ops::fp8_cast_transpose: x ", x.str(),
               " has too many columns for one launch (at most ", 65535 * kCtTile, ")");
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const bool vec = rows % kCtVec == 0 && cols % kCtVec == 0 && aligned(x.data(), 16) &&
                   aligned(codes, 8) && aligned(codes_t, 8);
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      float* const si = static_cast<float*>(out.scale_inv->data());
      const T* const xp = static_cast<const T*>(x.data());
      const float* const sp = static_cast<const float*>(scale.data());
      if (vec) {
        fp8_cast_transpose_vec_kernel<F, T>
            <<<grid, 256, 0, stream>>>(codes, codes_t, amax, si, xp, sp, rows, cols);
      } else {
        fp8_cast_transpose_kernel<F, T>
            <<<grid, dim3(32, kCtRows), 0, stream>>>(codes, codes_t, amax, si, xp, sp, rows, cols);
      }
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void fp8_update_scale(const Tensor& scale, const Tensor& history, const Tensor& amax,
                      core::Fp8Format format, int margin) {
  const core::DeviceScope scope(history.device().index);
  fp8_scale_kernel<<<1, 1, 0, core::cuda_stream(history.device())>>>(
      static_cast<float*>(scale.data()), static_cast<float*>(history.data()), history.numel(),
      static_cast<const float*>(amax.data()), core::fp8_max(format), margin);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

STOKER_REGISTER_STUB(fp8_quantize, fp8_quantize);
STOKER_REGISTER_STUB(fp8_dequantize, fp8_dequantize);
STOKER_REGISTER_STUB(fp8_cast_transpose, fp8_cast_transpose);
STOKER_REGISTER_STUB(fp8_update_scale, fp8_update_scale);

}  // namespace stoker::ops::cuda
