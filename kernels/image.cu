// normalize_images on the GPU: one thread per pixel reads its 3 bytes and writes 3 values
// (NCHW: three planes, coalesced within each plane; NHWC: interleaved). Same constants and fmaf
// as the CPU reference, so results are bit-identical.
#include "kernel_util.cuh"
#include "ops/image_stubs.h"

namespace stoker::ops::cuda {

namespace {

struct Affine {
  float a[3], b[3];
};

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    normalize_kernel(T* dst, const uint8_t* src, int64_t pixels, int64_t hw, Affine k, bool nchw) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pixels;
       p += stride) {
    const int64_t img = p / hw, pix = p - img * hw;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const float v = fmaf(static_cast<float>(src[p * 3 + c]), k.a[c], k.b[c]);
      dst[nchw ? (img * 3 + c) * hw + pix : p * 3 + c] = from_float<T>(v);
    }
  }
}

}  // namespace

void normalize_images(const Tensor& out, const Tensor& in, const std::array<float, 3>& mean,
                      const std::array<float, 3>& std, Layout layout) {
  const core::DeviceScope scope(out.device().index);
  Affine k;
  for (int c = 0; c < 3; ++c) {
    k.a[c] = 1.0f / (255.0f * std[c]);
    k.b[c] = -mean[c] / std[c];
  }
  const int64_t hw = in.size(1) * in.size(2), pixels = in.size(0) * hw;
  visit_float(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    normalize_kernel<<<grid_for(pixels, out.device().index), kBlockSize, 0,
                       core::cuda_stream(out.device())>>>(static_cast<T*>(out.data()),
                                                          static_cast<const uint8_t*>(in.data()),
                                                          pixels, hw, k, layout == Layout::nchw);
  });
  STOKER_CUDA_CHECK(cudaGetLastError());
}

STOKER_REGISTER_STUB(normalize_images, normalize_images);

}  // namespace stoker::ops::cuda
