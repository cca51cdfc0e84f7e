// CPU reference of block-wise quantization (ops/quantize.h): one oneTBB task per run of blocks;
// per-element arithmetic from ops/quantize_math.h, shared with kernels/quantize.cu.
#include <algorithm>
#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/quantize_math.h"
#include "ops/quantize_stubs.h"
#include "stoker/ops/fp8.h"

namespace stoker::ops::cpu {

namespace {

void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x, bool is_signed,
                        int64_t block) {
  const float* xs = static_cast<const float*>(x.data());
  uint8_t* cs = static_cast<uint8_t*>(codes.data());
  float* am = static_cast<float*>(absmax.data());
  const int64_t n = x.numel();
  const detail::EncodeTable& enc = detail::encode_table(is_signed);
  parallel_range((n + block - 1) / block,
                 [&](int64_t b0, int64_t b1) {
                   for (int64_t b = b0; b < b1; ++b) {
                     const int64_t s = b * block, e = std::min(n, s + block);
                     float m = 0.0f;
                     for (int64_t i = s; i < e; ++i) m = std::fmax(m, std::fabs(xs[i]));
                     am[b] = m;
                     for (int64_t i = s; i < e; ++i)
                       cs[i] = detail::encode_nearest(enc, detail::normalize_by(xs[i], m));
                   }
                 },
                 std::max<int64_t>(1, kGrain / block));
}

void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                          bool is_signed, int64_t block) {
  const float* map = dynamic_map(is_signed).data();
  float* o = static_cast<float*>(out.data());
  const uint8_t* cs = static_cast<const uint8_t*>(codes.data());
  const float* am = static_cast<const float*>(absmax.data());
  parallel_range(out.numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) o[i] = map[cs[i]] * am[i / block];
  });
}

}  // namespace

STOKER_REGISTER_STUB(quantize_blockwise, quantize_blockwise);
STOKER_REGISTER_STUB(dequantize_blockwise, dequantize_blockwise);

}  // namespace stoker::ops::cpu
