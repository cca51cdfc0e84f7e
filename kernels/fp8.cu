// FP8 ops (ops/fp8.h) on the GPU: grid-stride elementwise conversions through core/fp8.h (the
// CPU reference's functions: identical codes and values), the scale read from device memory;
// the delayed-scaling step by one thread (the history is a handful of floats).
#include "kernel_util.cuh"
#include "ops/fp8_backend.h"

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

template <core::Fp8Format F, typename T>
__global__ void __launch_bounds__(kBlockSize)
    fp8_dequantize_kernel(T* y, const uint8_t* codes, const float* scale, int64_t n) {
  const float s = __ldg(scale);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(__fdiv_rn(core::fp8_bits_to_float<F>(codes[i]), s));
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

void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& scale,
                    core::Fp8Format format) {
  const core::DeviceScope scope(y.device().index);
  const int64_t n = y.numel();
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      fp8_dequantize_kernel<F, T>
          <<<grid_for(n, y.device().index), kBlockSize, 0, core::cuda_stream(y.device())>>>(
              static_cast<T*>(y.data()), static_cast<const uint8_t*>(codes.data()),
              static_cast<const float*>(scale.data()), n);
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

}  // namespace stoker::ops::cuda
