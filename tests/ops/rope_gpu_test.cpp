// Rotary embeddings on the GPU (ops/attention.h: rope_qkv_forward / rope_qkv_backward):
// - against the CPU reference for Llama's shapes (H 32, KV 8, D 64: 3.2-1B; H 24, KV 8, D 128:
//   3.2-3B) in f32, f16 and bf16, with packed-document positions up to 131071. The GPU's cos and
//   sin are CUDA's sincosf (PyTorch's CUDA cos/sin), the CPU's come from double: f32 outputs
//   within a few fp32 ulps of the magnitudes involved, half outputs equal or one ulp of the
//   dtype apart where that moved a rounding of cos, sin, a product or the sum;
// - the Pack path (aligned) and the scalar path (misaligned by one element) give the same bits,
//   and i32 and i64 positions too; the value heads are untouched; backward(forward(x)) ~ x.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "stoker/ops/attention.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::gpu;

struct Config {
  int64_t heads, kv_heads, head_dim;
};

TEST(RopeGpuTest, MatchesTheCpuReference) {
  STOKER_REQUIRE_GPU();
  uint32_t seed = 400;
  for (const Config& c : {Config{32, 8, 64}, Config{24, 8, 128}, Config{2, 1, 6}}) {
    const int64_t tokens = 64, width = (c.heads + 2 * c.kv_heads) * c.head_dim;
    const std::vector<float> inv =
        rope_inverse_frequencies({.head_dim = c.head_dim, .llama3_scaling = true, .factor = 32.0});
    const Tensor inv_cpu = Tensor::from_floats(inv, {c.head_dim / 2}, DType::f32);
    const Tensor inv_gpu = inv_cpu.to(gpu());
    std::vector<int64_t> pos(tokens);
    for (int64_t t = 0; t < tokens; ++t)
      pos[t] = t < 40 ? t % 17 : 131071 - 977 * t;  // packed, long
    const Tensor pos64 = Tensor::from_vector(pos, {tokens});
    const Tensor pos32 =
        Tensor::from_vector(std::vector<int32_t>(pos.begin(), pos.end()), {tokens});
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      const std::string what = std::string(dtype_name(d)) + " D " + std::to_string(c.head_dim);
      const Tensor x = test::random_tensor({tokens, width}, d, seed++, -3.0f, 3.0f);
      const Tensor cpu = x.clone();
      rope_qkv_forward(cpu, pos64, inv_cpu, c.heads, c.kv_heads);

      const Tensor aligned = x.to(gpu());
      rope_qkv_forward(aligned, pos64.to(gpu()), inv_gpu, c.heads, c.kv_heads);
      const Tensor misaligned = test::copy_at_offset(x, gpu(), 1);
      rope_qkv_forward(misaligned, pos32.to(gpu()), inv_gpu, c.heads, c.kv_heads);
      EXPECT_TRUE(bit_identical(misaligned, aligned)) << what;

      const std::vector<float> g = aligned.to_floats(), w = cpu.to_floats(), xv = x.to_floats();
      const double ulp = d == DType::f32   ? 0.0
                         : d == DType::f16 ? std::ldexp(1.0, -10)
                                           : std::ldexp(1.0, -7);
      for (size_t i = 0; i < g.size(); ++i) {
        if (static_cast<int64_t>(i % width) >= (c.heads + c.kv_heads) * c.head_dim) {
          ASSERT_EQ(core::float_bits(g[i]), core::float_bits(xv[i])) << what << " value head " << i;
          continue;
        }
        const double tol = 1e-6 * 3.0 * 2.0 + 2.0 * ulp * (std::fabs(w[i]) + 3.0);
        ASSERT_NEAR(g[i], w[i], tol) << what << " element " << i;
      }
      // Each pass rounds cos, sin, two products and the sum: at most 3 half-ulps of |a| + |b|
      // (<= 6) per element, twice.
      rope_qkv_backward(aligned, pos64.to(gpu()), inv_gpu, c.heads, c.kv_heads);
      const std::vector<float> back = aligned.to_floats();
      for (size_t i = 0; i < back.size(); ++i)
        ASSERT_NEAR(back[i], xv[i], 1e-5 + 3.0 * ulp * 6.0) << what << " backward(forward) " << i;
    }
  }
}

}  // namespace
}  // namespace stoker::ops
