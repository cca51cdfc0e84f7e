// CPU reference of block-wise quantization (ops/quantize.h): one oneTBB task per run of blocks;
// per-element arithmetic from ops/quant_math.h, shared with kernels/quantize.cu.
#include <algorithm>
#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/quant_math.h"
#include "ops/quantize_backend.h"

namespace stoker::ops::cpu {

void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x,
                        const float* map, int map_codes, int64_t block) {
  const float* xs = static_cast<const float*>(x.data());
  uint8_t* cs = static_cast<uint8_t*>(codes.data());
  float* am = static_cast<float*>(absmax.data());
  const int64_t n = x.numel();
  parallel_range((n + block - 1) / block,
                 [&](int64_t b0, int64_t b1) {
                   for (int64_t b = b0; b < b1; ++b) {
                     const int64_t s = b * block, e = std::min(n, s + block);
                     float m = 0.0f;
                     for (int64_t i = s; i < e; ++i) m = std::fmax(m, std::fabs(xs[i]));
                     am[b] = m;
                     for (int64_t i = s; i < e; ++i)
                       cs[i] =
                           detail::quantize_nearest(map, map_codes, detail::normalize_by(xs[i], m));
                   }
                 },
                 std::max<int64_t>(1, kGrain / block));
}

void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                          const float* map, int64_t block) {
  float* o = static_cast<float*>(out.data());
  const uint8_t* cs = static_cast<const uint8_t*>(codes.data());
  const float* am = static_cast<const float*>(absmax.data());
  parallel_range(out.numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) o[i] = map[cs[i]] * am[i / block];
  });
}

}  // namespace stoker::ops::cpu
