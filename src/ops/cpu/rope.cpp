// CPU reference for the rotary embeddings of a qkv (ops/attention.h). Per token, cos and sin of
// float(position) * inv_freq[i] are computed once (in double from the fp32 angle, then rounded
// to float and to the dtype, as transformers' cos.to(dtype)) and applied to every query and key
// head; each product and the sum are rounded to the dtype as apply_rotary_pos_emb's tensors
// are. Parallel over tokens.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/rope_stubs.h"

namespace stoker::ops::cpu {

namespace {
template <typename T>
float rounded(float v) {
  return load(store<T>(v));
}

// Rows of `row_width` elements; the first `rotated` heads of D = 2 * half elements of each are
// rotated.
template <typename T, typename P>
void rotate(T* x, const P* pos, const float* inv, int64_t n, int64_t row_width, int64_t rotated,
            int64_t half, float sign) {
  parallel_range(
      n,
      [&](int64_t r0, int64_t r1) {
        std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
        for (int64_t r = r0; r < r1; ++r) {
          const float p = static_cast<float>(pos[r]);
          for (int64_t i = 0; i < half; ++i) {
            const float angle = p * inv[i];  // one fp32 product, as torch's
            c[static_cast<size_t>(i)] = rounded<T>(static_cast<float>(std::cos(double{angle})));
            s[static_cast<size_t>(i)] =
                sign * rounded<T>(static_cast<float>(std::sin(double{angle})));
          }
          for (int64_t h = 0; h < rotated; ++h) {
            T* head = x + r * row_width + h * 2 * half;
            for (int64_t i = 0; i < half; ++i) {
              const float a = load(head[i]), b = load(head[i + half]);
              const float ci = c[static_cast<size_t>(i)], si = s[static_cast<size_t>(i)];
              head[i] = store<T>(rounded<T>(a * ci) - rounded<T>(b * si));
              head[i + half] = store<T>(rounded<T>(b * ci) + rounded<T>(a * si));
            }
          }
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, row_width)));
}
}  // namespace

void rope_qkv(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_heads,
              int64_t num_kv_heads, float sign) {
  const int64_t width = qkv.size(-1), n = qkv.numel() / width;
  const int64_t half = inv_freq.numel();
  const float* inv = static_cast<const float*>(inv_freq.data());
  visit_float(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* x = static_cast<T*>(qkv.data());
    if (positions.dtype() == DType::i32) {
      rotate(x, static_cast<const int32_t*>(positions.data()), inv, n, width,
             num_heads + num_kv_heads, half, sign);
    } else {
      rotate(x, static_cast<const int64_t*>(positions.data()), inv, n, width,
             num_heads + num_kv_heads, half, sign);
    }
  });
}

STOKER_REGISTER_STUB(rope_qkv, rope_qkv);

}  // namespace stoker::ops::cpu
