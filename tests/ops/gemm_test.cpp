// GEMM on the CPU backend (ops/gemm.h) against a double triple loop: every transpose combination,
// odd sizes, alpha/beta (beta = 1 accumulates, beta = 0 never reads a NaN-poisoned C), half inputs
// with f32 and half outputs, k = 0, and the errors bad input gets.
#include "stoker/ops/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::throws_error_with;

double eps_of(DType d) {
  switch (d) {
    case DType::f16:
      return std::ldexp(1.0, -10);
    case DType::bf16:
      return std::ldexp(1.0, -7);
    default:
      return std::ldexp(1.0, -23);
  }
}

struct Problem {
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
};

std::string describe(const Problem& p, DType in, DType out) {
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
         (p.ta ? " A^T" : " A") + (p.tb ? " B^T" : " B") + " alpha=" + std::to_string(p.alpha) +
         " beta=" + std::to_string(p.beta) + " " + std::string(dtype_name(in)) + "->" +
         std::string(dtype_name(out));
}

// Runs one gemm and compares with a double loop. The tolerance is relative to sqrt(k) * eps of
// fp32 accumulation times the magnitude sum, plus one ulp of the output dtype.
void run_and_check(const Problem& p, DType in, DType out, uint32_t seed) {
  const Tensor a = test::random_tensor(p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k}, in, seed);
  const Tensor b = test::random_tensor(p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n}, in, seed + 1);
  Tensor c;
  if (p.beta == 0.0f) {
    c = test::poisoned({p.m, p.n}, out);  // beta = 0 must not read C
  } else {
    c = test::random_tensor({p.m, p.n}, out, seed + 2);
  }
  const std::vector<float> fa = a.to_floats(), fb = b.to_floats(), fc = c.to_floats();
  gemm(c, a, b, {.trans_a = p.ta, .trans_b = p.tb, .alpha = p.alpha, .beta = p.beta});
  const std::vector<float> got = c.to_floats();
  const double acc_eps = 4.0 * std::sqrt(static_cast<double>(p.k)) * std::ldexp(1.0, -24);
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double dot = 0, mag = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double av = fa[static_cast<size_t>(p.ta ? l * p.m + i : i * p.k + l)];
        const double bv = fb[static_cast<size_t>(p.tb ? j * p.k + l : l * p.n + j)];
        dot += av * bv;
        mag += std::fabs(av * bv);
      }
      const double cin = p.beta == 0.0f ? 0.0 : fc[static_cast<size_t>(i * p.n + j)];
      const double want = p.alpha * dot + p.beta * cin;
      const double scale = std::fabs(p.alpha) * mag + std::fabs(p.beta * cin);
      const double tol = acc_eps * scale + eps_of(out) * std::fabs(want) + 1e-30;
      const double g = got[static_cast<size_t>(i * p.n + j)];
      if (!(std::fabs(g - want) <= tol) && bad++ == 0) {
        first = "C[" + std::to_string(i) + "," + std::to_string(j) + "] = " + std::to_string(g) +
                ", want " + std::to_string(want) + " (tol " + std::to_string(tol) + ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << describe(p, in, out) << ": " << bad << " wrong elements; first " << first;
}

TEST(GemmTest, F32EveryTransposeAndOddSize) {
  uint32_t seed = 1;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int64_t m : {1, 7, 33}) {
        for (int64_t n : {1, 7, 33}) {
          for (int64_t k : {1, 7, 33}) {
            run_and_check({m, n, k, ta, tb, 1.0f, 0.0f}, DType::f32, DType::f32, seed);
            seed += 3;
          }
        }
      }
    }
  }
}

TEST(GemmTest, AlphaAndBeta) {
  uint32_t seed = 1000;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (auto [alpha, beta] :
           {std::pair{0.5f, 0.0f}, {1.0f, 1.0f}, {-2.0f, 0.25f}, {0.0f, 1.0f}, {0.0f, 0.0f}}) {
        run_and_check({33, 7, 17, ta, tb, alpha, beta}, DType::f32, DType::f32, seed);
        seed += 3;
      }
    }
  }
}

// y = x W^T + b with the bias fused: the reference adds b in double to the double product; a
// half output is rounded once (bias included). A bias of the wrong size or dtype is refused.
TEST(GemmTest, BiasIsAddedBeforeTheOneRounding) {
  for (DType out : {DType::f32, DType::bf16}) {
    const Tensor x = test::random_tensor({9, 5}, out, 71);  // half inputs give a half output
    const Tensor w = test::random_tensor({6, 5}, out, 72);
    const Tensor b = test::random_tensor({6}, DType::f32, 73);
    Tensor y = Tensor::empty({9, 6}, out);
    gemm(y, x, w, {.trans_b = true, .bias = &b});
    const std::vector<float> xs = x.to_floats(), ws = w.to_floats(), bs = b.to_floats();
    const std::vector<float> got = y.to_floats();
    for (int i = 0; i < 9; ++i)
      for (int j = 0; j < 6; ++j) {
        double want = bs[j];
        for (int k = 0; k < 5; ++k) want += static_cast<double>(xs[i * 5 + k]) * ws[j * 5 + k];
        ASSERT_NEAR(got[i * 6 + j], want, out == DType::f32 ? 1e-5 : 8e-3 * (1 + std::fabs(want)))
            << i << "," << j;
      }
  }
  Tensor y = Tensor::empty({9, 6}, DType::f32);
  const Tensor bad = Tensor::zeros({5}, DType::f32);
  EXPECT_THROW(gemm(y, test::random_tensor({9, 5}, DType::f32, 1),
                    test::random_tensor({6, 5}, DType::f32, 2), {.trans_b = true, .bias = &bad}),
               stoker::Error);
}

TEST(GemmTest, BetaOneAccumulatesMicroSteps) {
  // Two gemms with beta = 1 into one C equal the gemm of the concatenated inner dimension.
  const Tensor a = test::random_tensor({9, 20}, DType::f32, 1);
  const Tensor b = test::random_tensor({20, 11}, DType::f32, 2);
  const Tensor full = test::poisoned({9, 11}, DType::f32);
  gemm(full, a, b);
  // Split k: a = [a1 a2] (columns) = rows of a^T; b = [b1; b2] (rows).
  const Tensor at = test::poisoned({20, 9}, DType::f32);
  const std::vector<float> fa = a.to_floats();
  std::vector<float> fat(180);
  for (int i = 0; i < 9; ++i)
    for (int l = 0; l < 20; ++l)
      fat[static_cast<size_t>(l * 9 + i)] = fa[static_cast<size_t>(i * 20 + l)];
  const Tensor a_t = Tensor::from_floats(fat, {20, 9});
  const Tensor acc = Tensor::zeros({9, 11}, DType::f32);
  gemm(acc, a_t.slice(0, 12), b.slice(0, 12), {.trans_a = true, .beta = 1.0f});
  gemm(acc, a_t.slice(12, 20), b.slice(12, 20), {.trans_a = true, .beta = 1.0f});
  const std::vector<float> f = full.to_floats(), g = acc.to_floats();
  for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(g[i], f[i], 1e-5 * (1 + std::fabs(f[i]))) << i;
}

TEST(GemmTest, HalfInputsWithF32AndHalfOutputs) {
  uint32_t seed = 5000;
  for (DType in : {DType::f16, DType::bf16}) {
    for (DType out : {DType::f32, in}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.75f, 1.0f}}) {
            run_and_check({33, 7, 65, ta, tb, alpha, beta}, in, out, seed);
            run_and_check({1, 33, 7, ta, tb, alpha, beta}, in, out, seed + 3);
            seed += 6;
          }
        }
      }
    }
  }
}

TEST(GemmTest, HalfOutputWithBetaZeroIgnoresStaleMemory) {
  // The CPU path accumulates a half C in a temporary fp32 buffer; with beta = 0 that buffer is
  // never initialised. Leave NaN in freed memory of that size first so a read of it would show.
  for (DType d : {DType::f16, DType::bf16}) {
    { const Tensor junk = test::poisoned({64, 48}, DType::f32); }
    const Tensor a = test::random_tensor({64, 5}, d, 1);
    const Tensor b = test::random_tensor({5, 48}, d, 2);
    const Tensor c = test::poisoned({64, 48}, d);
    gemm(c, a, b);
    for (float v : c.to_floats()) ASSERT_TRUE(std::isfinite(v)) << dtype_name(d);
  }
}

TEST(GemmTest, LargerProblem) {
  run_and_check({128, 96, 257, false, true, 1.0f, 0.0f}, DType::f32, DType::f32, 77);
  run_and_check({96, 128, 257, true, false, 1.0f, 0.0f}, DType::bf16, DType::f32, 78);
}

TEST(GemmTest, InnerDimensionZero) {
  for (DType out : {DType::f32, DType::f16}) {
    const DType in = out;
    const Tensor a = Tensor::empty({5, 0}, in);
    const Tensor b = Tensor::empty({0, 3}, in);
    // beta = 0: C becomes zeros, even when it held NaN.
    const Tensor c = test::poisoned({5, 3}, out);
    gemm(c, a, b);
    EXPECT_TRUE(test::matches_rounded(c, std::vector<float>(15, 0.0f))) << dtype_name(out);
    // beta != 0: C = beta * C.
    const Tensor c2 = test::random_tensor({5, 3}, out, 3);
    const std::vector<float> before = c2.to_floats();
    gemm(c2, a, b, {.alpha = 2.0f, .beta = 0.5f});
    std::vector<float> want(before.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = before[i] * 0.5f;
    EXPECT_TRUE(test::matches_rounded(c2, want)) << dtype_name(out);
    // Transposed zero-size inputs too.
    const Tensor c3 = test::poisoned({5, 3}, out);
    gemm(c3, Tensor::empty({0, 5}, in), Tensor::empty({3, 0}, in),
         {.trans_a = true, .trans_b = true});
    EXPECT_TRUE(test::matches_rounded(c3, std::vector<float>(15, 0.0f))) << dtype_name(out);
  }
  // m = 0 or n = 0: nothing to do, nothing thrown.
  const Tensor empty_c = Tensor::empty({0, 3}, DType::f32);
  EXPECT_NO_THROW(
      gemm(empty_c, Tensor::empty({0, 4}, DType::f32), Tensor::empty({4, 3}, DType::f32)));
}

TEST(GemmTest, BadInputThrows) {
  const Tensor a = Tensor::empty({2, 3}, DType::f32);
  const Tensor b = Tensor::empty({3, 5}, DType::f32);
  const Tensor c = Tensor::empty({2, 5}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        gemm(c, Tensor::empty({2, 3, 1}, DType::f32), b);
      },
      {"ops::gemm", "rank-2", "a f32[2, 3, 1] on cpu", "b f32[3, 5] on cpu",
       "c f32[2, 5] on cpu"}));
  EXPECT_TRUE(throws_error_with([&] { gemm(Tensor::empty({10}, DType::f32), a, b); },
                                {"ops::gemm", "rank-2", "c f32[10] on cpu"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        gemm(c, a, Tensor::empty({4, 5}, DType::f32));
      },
      {"ops::gemm", "inner dimensions differ", "op(a) is [2, 3]", "op(b) is [4, 5]",
       "a f32[2, 3] on cpu", "b f32[4, 5] on cpu"}));
  EXPECT_TRUE(
      throws_error_with([&] { gemm(c, a, b, {.trans_a = true}); },
                        {"ops::gemm", "inner dimensions differ", "op(a) is [3, 2]", "transposed"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        gemm(Tensor::empty({2, 4}, DType::f32), a, b);
      },
      {"ops::gemm", "c is f32[2, 4] on cpu", "expected [2, 5]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        gemm(c, a, Tensor::empty({3, 5}, DType::f16));
      },
      {"ops::gemm", "a is f32[2, 3] on cpu", "b is f16[3, 5] on cpu", "expected equal dtypes"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        gemm(Tensor::empty({2, 5}, DType::f16), Tensor::empty({2, 3}, DType::bf16),
             Tensor::empty({3, 5}, DType::bf16));
      },
      {"ops::gemm", "c is f16[2, 5] on cpu", "a/b are bf16", "expected c in f32 or bf16"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        gemm(c, Tensor::empty({2, 3}, DType::i32), Tensor::empty({3, 5}, DType::i32));
      },
      {"ops::gemm", "a is i32[2, 3] on cpu", "expected a float dtype"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        gemm(Tensor::empty({2, 5}, DType::u8), a, b);
      },
      {"ops::gemm", "c is u8[2, 5] on cpu", "expected a float dtype"}));
}

TEST(GemmTest, FlopsAndTf32Switch) {
  EXPECT_EQ(gemm_flops(2, 3, 4), 48.0);
  EXPECT_EQ(gemm_flops(1 << 20, 1 << 20, 1 << 20), 2.0 * std::ldexp(1.0, 60));
  EXPECT_FALSE(allow_tf32()) << "TF32 is off by default";
  set_allow_tf32(true);
  EXPECT_TRUE(allow_tf32());
  // The CPU backend computes exact fp32 whatever the switch says.
  run_and_check({7, 33, 65, false, false, 1.0f, 0.0f}, DType::f32, DType::f32, 9);
  set_allow_tf32(false);
  EXPECT_FALSE(allow_tf32());
}

}  // namespace
}  // namespace stoker::ops
