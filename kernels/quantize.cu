// Block-wise 8-bit quantization (ops/quantize.h) on the GPU: one CUDA block of 256 threads per
// quantization block (256..4096 values, at most 16 per thread, kept in registers between the
// absmax reduction and the encoding). The encode table (quantize_math.h) and the map travel in the
// kernel parameters and are copied to shared memory (lookups read scattered entries; constant
// memory would serialize them). Arithmetic from ops/quantize_math.h, the CPU reference's:
// identical codes.
#include "kernel_util.cuh"
#include "ops/quantize_math.h"
#include "ops/quantize_stubs.h"
#include "stoker/ops/fp8.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxPerThread = 4096 / kThreads;

struct Map {
  float v[256];
};

// Copies the encode table into shared memory, 4 bytes per thread and step.
__device__ void load_encode_table(detail::EncodeTable* dst, const detail::EncodeTable& src) {
  static_assert(sizeof(detail::EncodeTable) % 4 == 0, "the table is copied in 4-byte words");
  const auto* s = reinterpret_cast<const uint32_t*>(&src);
  auto* d = reinterpret_cast<uint32_t*>(dst);
  for (int i = threadIdx.x; i < static_cast<int>(sizeof(detail::EncodeTable) / 4); i += blockDim.x)
    d[i] = s[i];
}

// The absolute maximum over the CUDA block (every thread gets it). max is exact and order-free.
__device__ float block_absmax(float m, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) r = fmaxf(r, scratch[w]);
  __syncthreads();  // scratch is reused by the next block
  return r;
}

__global__ void __launch_bounds__(kThreads)
    quantize_kernel(uint8_t* codes, float* absmax, const float* x, int64_t n, int64_t block,
                    const __grid_constant__ detail::EncodeTable table) {
  __shared__ detail::EncodeTable enc;
  __shared__ float scratch[kThreads / 32];
  load_encode_table(&enc, table);
  __syncthreads();
  const int64_t blocks = (n + block - 1) / block;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t s = b * block;
    float v[kMaxPerThread];
    float local = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
      const int64_t i = s + threadIdx.x + static_cast<int64_t>(k) * kThreads;
      v[k] = (k * kThreads < block && i < n) ? x[i] : 0.0f;
      local = fmaxf(local, fabsf(v[k]));
    }
    const float scale = block_absmax(local, scratch);
    if (threadIdx.x == 0) absmax[b] = scale;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
      const int64_t i = s + threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (k * kThreads < block && i < n)
        codes[i] = detail::encode_nearest(enc, detail::normalize_by(v[k], scale));
    }
  }
}

__global__ void dequantize_kernel(float* out, const uint8_t* codes, const float* absmax, int64_t n,
                                  int64_t block, const __grid_constant__ Map map) {
  __shared__ float m[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) m[i] = map.v[i];
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = m[codes[i]] * absmax[i / block];
}

Map to_map(const float* map) {
  Map m;
  for (int i = 0; i < 256; ++i) m.v[i] = map[i];
  return m;
}

void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x, bool is_signed,
                        int64_t block) {
  const Device d = x.device();
  core::DeviceScope scope(d.index);
  const int64_t blocks = (x.numel() + block - 1) / block;
  const unsigned grid = static_cast<unsigned>(
      std::min<int64_t>(blocks, static_cast<int64_t>(sm_count(d.index)) * kBlocksPerSm));
  quantize_kernel<<<grid, kThreads, 0, core::cuda_stream(d)>>>(
      static_cast<uint8_t*>(codes.data()), static_cast<float*>(absmax.data()),
      static_cast<const float*>(x.data()), x.numel(), block, detail::encode_table(is_signed));
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                          bool is_signed, int64_t block) {
  const Device d = out.device();
  core::DeviceScope scope(d.index);
  dequantize_kernel<<<grid_for(out.numel(), d.index), kBlockSize, 0, core::cuda_stream(d)>>>(
      static_cast<float*>(out.data()), static_cast<const uint8_t*>(codes.data()),
      static_cast<const float*>(absmax.data()), out.numel(), block,
      to_map(dynamic_map(is_signed).data()));
  STOKER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

STOKER_REGISTER_STUB(quantize_blockwise, quantize_blockwise);
STOKER_REGISTER_STUB(dequantize_blockwise, dequantize_blockwise);

}  // namespace stoker::ops::cuda
