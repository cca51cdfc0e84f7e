// CPU reference of normalize_images: (u8 / 255 - mean) / std, computed as u8 * a + b with
// a = 1 / (255 std) and b = -mean / std, the same two constants and fmaf as the CUDA kernel.
#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/image_backend.h"

namespace stoker::ops::cpu {

void normalize_images(const Tensor& out, const Tensor& in, const std::array<float, 3>& mean,
                      const std::array<float, 3>& std, Layout layout) {
  const int64_t n = in.size(0), hw = in.size(1) * in.size(2);
  float a[3], b[3];
  for (int c = 0; c < 3; ++c) {
    a[c] = 1.0f / (255.0f * std[c]);
    b[c] = -mean[c] / std[c];
  }
  const uint8_t* src = static_cast<const uint8_t*>(in.data());
  visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = static_cast<T*>(out.data());
    parallel_range(n * hw, [&](int64_t s, int64_t e) {
      for (int64_t p = s; p < e; ++p) {
        const int64_t img = p / hw, pix = p % hw;
        for (int c = 0; c < 3; ++c) {
          const float v = std::fmaf(static_cast<float>(src[p * 3 + c]), a[c], b[c]);
          const int64_t o = layout == Layout::nchw ? (img * 3 + c) * hw + pix : p * 3 + c;
          dst[o] = store<T>(v);
        }
      }
    });
  });
}

}  // namespace stoker::ops::cpu
