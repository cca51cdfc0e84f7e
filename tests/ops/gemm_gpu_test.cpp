// GEMM on the GPU (cuBLASLt) against the CPU reference (BLAS): every transpose combination, odd
// and larger shapes, f32 (exact fp32, and TF32 when allowed), f16/bf16 inputs with f32 and half
// outputs, alpha/beta with a NaN-poisoned C when beta = 0. The tolerance of element (i, j) is
// relative to alpha * (|A| |B|)(i, j) + |beta C(i, j)|, plus one ulp of a half output.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::gpu;

struct Mnk {
  int64_t m, n, k;
};
constexpr Mnk kShapes[] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {128, 256, 64}, {1023, 257, 129}};

double ulp_of(DType d) {
  switch (d) {
    case DType::f16:
      return std::ldexp(1.0, -10);
    case DType::bf16:
      return std::ldexp(1.0, -7);
    default:
      return 0.0;
  }
}

Tensor abs_f32(const Tensor& t) {
  std::vector<float> v = t.to_floats();
  for (float& x : v) x = std::fabs(x);
  return Tensor::from_floats(v, t.shape());
}

struct Case {
  Mnk s;
  bool ta, tb;
  DType in, out;
  float alpha, beta;
  bool tf32;
  double rel_tol;
};

std::string describe(const Case& c) {
  return "m=" + std::to_string(c.s.m) + " n=" + std::to_string(c.s.n) +
         " k=" + std::to_string(c.s.k) + (c.ta ? " A^T" : " A") + (c.tb ? " B^T" : " B") + " " +
         std::string(dtype_name(c.in)) + "->" + std::string(dtype_name(c.out)) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         (c.tf32 ? " tf32" : "");
}

void run_case(const Case& c, uint64_t seed) {
  const auto [m, n, k] = c.s;
  const Shape sa = c.ta ? Shape{k, m} : Shape{m, k};
  const Shape sb = c.tb ? Shape{n, k} : Shape{k, n};
  const Tensor a = test::random_normal_tensor(sa, c.in, seed);
  const Tensor b = test::random_normal_tensor(sb, c.in, seed + 1);
  const Tensor c_in = c.beta == 0.0f ? test::poisoned({m, n}, c.out)
                                     : test::random_normal_tensor({m, n}, c.out, seed + 2);
  const GemmOptions o{.trans_a = c.ta, .trans_b = c.tb, .alpha = c.alpha, .beta = c.beta};

  const Tensor host = c_in.clone();
  gemm(host, a, b, o);
  const Tensor dev = c_in.to(gpu());
  set_allow_tf32(c.tf32);
  gemm(dev, a.to(gpu()), b.to(gpu()), o);
  set_allow_tf32(false);

  // Per-element scale: |alpha| |op(A)| |op(B)| + |beta C|.
  const Tensor mag = Tensor::empty({m, n}, DType::f32);
  gemm(mag, abs_f32(a), abs_f32(b), {.trans_a = c.ta, .trans_b = c.tb});
  const std::vector<float> got = dev.to_floats(), want = host.to_floats(), scale = mag.to_floats(),
                           cin = c_in.to_floats();
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double s =
        std::fabs(c.alpha) * scale[i] + (c.beta == 0.0f ? 0.0 : std::fabs(c.beta * cin[i]));
    const double tol = c.rel_tol * s + ulp_of(c.out) * std::fabs(want[i]) + 1e-30;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol) && bad++ == 0) {
      first = "element " + std::to_string(i) + ": gpu " + std::to_string(got[i]) + ", cpu " +
              std::to_string(want[i]) + ", tol " + std::to_string(tol);
    }
  }
  EXPECT_EQ(bad, 0) << describe(c) << ": " << bad << " of " << got.size()
                    << " elements out of tolerance; first " << first;
}

TEST(GemmGpuTest, EveryShapeTransposeAndDtype) {
  STOKER_REQUIRE_GPU();
  struct Types {
    DType in, out;
    bool tf32;
    double tol;
  };
  const Types types[] = {
      {DType::f32, DType::f32, false, 1e-5},  {DType::f32, DType::f32, true, 1e-2},
      {DType::f16, DType::f32, false, 1e-4},  {DType::f16, DType::f16, false, 1e-4},
      {DType::bf16, DType::f32, false, 1e-4}, {DType::bf16, DType::bf16, false, 1e-4}};
  uint64_t seed = 1;
  for (const Types& t : types) {
    for (const Mnk& s : kShapes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          run_case({s, ta, tb, t.in, t.out, 1.0f, 0.0f, t.tf32, t.tol}, seed);
          seed += 3;
        }
      }
    }
  }
}

TEST(GemmGpuTest, AlphaAndBetaAccumulate) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 1000;
  for (DType in : {DType::f32, DType::f16, DType::bf16}) {
    for (DType out : {DType::f32, in}) {
      for (auto [alpha, beta] :
           {std::pair{1.0f, 1.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}, {0.75f, 0.0f}}) {
        for (bool ta : {false, true}) {
          run_case(
              {{33, 65, 17}, ta, !ta, in, out, alpha, beta, false, in == DType::f32 ? 1e-5 : 1e-4},
              seed);
          seed += 3;
        }
      }
    }
  }
}

TEST(GemmGpuTest, BetaOneAddsMicroStepsInPlace) {
  STOKER_REQUIRE_GPU();
  // Three accumulating calls into one device C equal the CPU doing the same.
  const Tensor host = test::random_normal_tensor({64, 48}, DType::f32, 7);
  const Tensor dev = host.to(gpu());
  for (uint64_t step = 0; step < 3; ++step) {
    const Tensor a = test::random_normal_tensor({32, 64}, DType::bf16, 10 + step);
    const Tensor b = test::random_normal_tensor({48, 32}, DType::bf16, 20 + step);
    const GemmOptions o{.trans_a = true, .trans_b = true, .beta = 1.0f};
    gemm(host, a, b, o);
    gemm(dev, a.to(gpu()), b.to(gpu()), o);
  }
  const std::vector<float> h = host.to_floats(), d = dev.to_floats();
  for (size_t i = 0; i < h.size(); ++i) EXPECT_NEAR(d[i], h[i], 1e-4 * (20 + std::fabs(h[i])));
}

// The bias epilogue (a Linear's forward): GPU y = x W^T + b equals the CPU's, for f32 and half
// outputs, with beta 0 and 1; the bias is added in fp32 before y is rounded.
TEST(GemmGpuTest, BiasEpilogueMatchesCpu) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 2000;
  for (DType in : {DType::f32, DType::bf16, DType::f16}) {
    for (DType out : {DType::f32, in}) {
      for (float beta : {0.0f, 1.0f}) {
        const Tensor x = test::random_normal_tensor({257, 96}, in, seed++);
        const Tensor w = test::random_normal_tensor({130, 96}, in, seed++);
        // An f32 bias (fused for f32 C; a separate pass for a half C) and a bias in C's dtype.
        const Tensor b = test::random_normal_tensor({130}, seed % 2 ? out : DType::f32, seed++);
        const Tensor c0 = test::random_normal_tensor({257, 130}, out, seed++);
        Tensor host = Tensor::empty({257, 130}, out);
        copy(host, c0);
        const Tensor dev = c0.to(gpu());
        const Tensor bg = b.to(gpu());
        gemm(host, x, w, {.trans_b = true, .beta = beta, .bias = &b});
        gemm(dev, x.to(gpu()), w.to(gpu()), {.trans_b = true, .beta = beta, .bias = &bg});
        const std::vector<float> h = host.to_floats(), d = dev.to_floats();
        const double tol = in == DType::f32 ? 1e-4 : 4.0 * ulp_of(out == DType::f32 ? in : out);
        for (size_t i = 0; i < h.size(); ++i)
          ASSERT_NEAR(d[i], h[i], tol * (10 + std::fabs(h[i])))
              << dtype_name(in) << "->" << dtype_name(out) << " beta " << beta << " at " << i;
      }
    }
  }
}

TEST(GemmGpuTest, InnerDimensionZeroOnGpu) {
  STOKER_REQUIRE_GPU();
  for (DType out : {DType::f32, DType::bf16}) {
    const Tensor c = test::poisoned({5, 3}, out, gpu());
    gemm(c, Tensor::empty({5, 0}, out, gpu()), Tensor::empty({0, 3}, out, gpu()));
    EXPECT_TRUE(test::matches_rounded(c, std::vector<float>(15, 0.0f))) << dtype_name(out);
  }
}

TEST(GemmGpuTest, MisalignedOperands) {
  STOKER_REQUIRE_GPU();
  // Views that start one element into their block: cuBLASLt must get the true alignment.
  for (DType in : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor a = test::random_normal_tensor({7, 5}, in, 1);
    const Tensor b = test::random_normal_tensor({5, 9}, in, 2);
    const Tensor host = test::poisoned({7, 9}, DType::f32);
    gemm(host, a, b);
    const Tensor da = Tensor::empty({36}, in, gpu()).slice(1, 36).reshape({7, 5});
    const Tensor db = Tensor::empty({46}, in, gpu()).slice(1, 46).reshape({5, 9});
    copy(da, a);
    copy(db, b);
    const Tensor dc = Tensor::empty({64}, DType::f32, gpu()).slice(1, 64).reshape({7, 9});
    test::poison(dc);
    gemm(dc, da, db);
    const std::vector<float> g = dc.to_floats(), h = host.to_floats();
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], h[i], 1e-4 * (1 + std::fabs(h[i]))) << dtype_name(in) << " " << i;
  }
}

TEST(GemmGpuTest, MixedDevicesThrowNamingBoth) {
  STOKER_REQUIRE_GPU();
  const Tensor c = Tensor::empty({2, 5}, DType::f32, gpu());
  const Tensor a = Tensor::empty({2, 3}, DType::f32);
  const Tensor b = Tensor::empty({3, 5}, DType::f32, gpu());
  EXPECT_TRUE(test::throws_error_with(
      [&] { gemm(c, a, b); }, {"ops::gemm", "c is f32[2, 5] on cuda:0", "a is f32[2, 3] on cpu",
                               "expected both on one device"}));
}

}  // namespace
}  // namespace stoker::ops
