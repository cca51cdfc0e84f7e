// nn::GroupedQueryAttention (nn/attention.h) on the GPU, bf16 activations, Llama shapes
// (H 32 KV 8 D 64: Llama-3.2-1B; H 8 KV 2 D 128), T 128, with and without document positions:
// - the fused core (ops/flash_attention.h, checked to support the shape) against the math core
//   with the same weights: output, input gradient and every parameter gradient within a relative
//   L2 error of 3e-2 (the two round S, P, dP and dS differently in bf16; the same bound the ops'
//   GPU tests use), and not bit-identical (the fused kernels did run);
// - the math core on the GPU against the same module on the CPU, f32 (RoPE, grouped heads and
//   the mask on both backends): per element within 1e-4 of the largest value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ops/flash_attention.h"
#include "stoker/nn/attention.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

using test::gpu;

struct Shape4 {
  int64_t c, h, kv, d;
};

GroupedQueryAttentionOptions options(const Shape4& s, AttentionKernel kernel) {
  return {.heads = s.h,
          .kv_heads = s.kv,
          .head_dim = s.d,
          .rope = {.theta = 500000.0},
          .kernel = kernel};
}

// Each row: documents of lengths 1, 7, 30, 2, 50, ... then 8 padding tokens (position 0).
Tensor document_positions(int64_t b, int64_t t) {
  const int64_t lengths[] = {1, 7, 30, 2, 50, 1, 19};
  std::vector<int64_t> pos(static_cast<size_t>(b * t), 0);
  for (int64_t r = 0; r < b; ++r) {
    int64_t p = 0, k = r;
    for (int64_t i = 0; i < t - 8; ++i) {
      pos[static_cast<size_t>(r * t + i)] = p;
      if (++p == lengths[k % 7]) {
        p = 0;
        ++k;
      }
    }
  }
  return Tensor::from_vector(pos, {b, t});
}

::testing::AssertionResult close_l2(const Tensor& got_t, const Tensor& want_t, double tol) {
  const std::vector<float> got = got_t.to_floats(), want = want_t.to_floats();
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return ::testing::AssertionFailure() << "[" << i << "] not finite";
    err += (got[i] - want[i]) * double(got[i] - want[i]);
    norm += double(want[i]) * want[i];
  }
  const double rel = std::sqrt(err / std::max(norm, 1e-30));
  if (rel <= tol && norm > 0.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "relative L2 error " << rel << " > " << tol << " (|want|^2 = " << norm << ")";
}

struct Outcome {
  Tensor y, dx;
  std::vector<std::pair<std::string, Tensor>> grads;
};

Outcome run(GroupedQueryAttention& m, const Tensor& x, const Tensor& dy, const Tensor& positions) {
  for (Parameter* p : m.parameters()) p->zero_grad();
  m.set_positions(positions, positions.defined());
  Outcome r;
  r.y = m.forward(x);
  r.dx = m.backward(dy);
  for (const auto& [name, p] : m.named_parameters()) r.grads.emplace_back(name, p->grad().clone());
  return r;
}

TEST(GroupedQueryAttentionGpu, FusedMatchesMathInBf16) {
  STOKER_REQUIRE_GPU();
  const int64_t b = 2, t = 128;
  for (const Shape4& s : {Shape4{2048, 32, 8, 64}, Shape4{1024, 8, 2, 128}}) {
    const Tensor probe = Tensor::empty({b, t, (s.h + 2 * s.kv) * s.d}, DType::bf16, gpu());
    ASSERT_TRUE(ops::flash_attention_supported(probe, s.h, s.kv))
        << "H " << s.h << " KV " << s.kv << " D " << s.d;
    for (bool masked : {false, true}) {
      SCOPED_TRACE(testing::Message() << "C=" << s.c << " H=" << s.h << " KV=" << s.kv
                                      << " D=" << s.d << " masked=" << masked);
      manual_seed(11);
      GroupedQueryAttention fused(s.c, options(s, AttentionKernel::fused));
      manual_seed(11);
      GroupedQueryAttention math(s.c, options(s, AttentionKernel::math));
      fused.to(gpu());
      math.to(gpu());
      const Tensor x = test::random_tensor({b, t, s.c}, DType::bf16, 12, -2.0f, 2.0f).to(gpu());
      const Tensor dy = test::random_tensor({b, t, s.c}, DType::bf16, 13).to(gpu());
      const Tensor pos = masked ? document_positions(b, t).to(gpu()) : Tensor();
      const Outcome f = run(fused, x, dy, pos), m = run(math, x, dy, pos);
      EXPECT_TRUE(close_l2(f.y, m.y, 3e-2)) << "y";
      EXPECT_FALSE(test::bit_identical(f.y, m.y)) << "the fused kernels should have run";
      EXPECT_TRUE(close_l2(f.dx, m.dx, 3e-2)) << "dx";
      ASSERT_EQ(f.grads.size(), m.grads.size());
      for (size_t i = 0; i < f.grads.size(); ++i)
        EXPECT_TRUE(close_l2(f.grads[i].second, m.grads[i].second, 3e-2))
            << "d" << f.grads[i].first;
    }
  }
}

TEST(GroupedQueryAttentionGpu, MathMatchesTheCpuInF32) {
  STOKER_REQUIRE_GPU();
  const Shape4 s{256, 8, 2, 32};
  const int64_t b = 2, t = 96;
  const Tensor x = test::random_tensor({b, t, s.c}, DType::f32, 21, -2.0f, 2.0f);
  const Tensor dy = test::random_tensor({b, t, s.c}, DType::f32, 22);
  const Tensor pos = document_positions(b, t);
  manual_seed(23);
  GroupedQueryAttention cpu(s.c, options(s, AttentionKernel::math));
  manual_seed(23);
  GroupedQueryAttention dev(s.c, options(s, AttentionKernel::math));
  dev.to(gpu());
  const Outcome c = run(cpu, x, dy, pos), g = run(dev, x.to(gpu()), dy.to(gpu()), pos.to(gpu()));
  test::expect_max_abs_close(g.y.to_floats(), c.y.to_floats(), 1e-4, "y");
  test::expect_max_abs_close(g.dx.to_floats(), c.dx.to_floats(), 1e-4, "dx");
  for (size_t i = 0; i < c.grads.size(); ++i)
    test::expect_max_abs_close(g.grads[i].second.to_floats(), c.grads[i].second.to_floats(), 1e-4,
                               "d" + c.grads[i].first);
}

}  // namespace
}  // namespace stoker::nn
