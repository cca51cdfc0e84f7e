// The FP8 GEMM's CPU reference (ops/gemm_fp8.h) on inputs whose products are exact: small
// integers (exact in E4M3 and E5M2) with power-of-two scale_inv, so C equals a double-precision
// sum rounded once to C's dtype — with a bias, accumulation (beta), the GELU epilogue (aux = the
// rounded pre-activation, C = the GELU of the unrounded one) and the dgelu epilogue; and the
// errors for what the FP8 GEMM cannot take.
#include "stoker/ops/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "stoker/ops/activation.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

// Integers in [-6, 6] as FP8 codes (scale 1: exact), read back times `scale_inv`.
struct IntMatrix {
  std::vector<float> values;  // the integers
  Fp8Tensor fp8;
};

IntMatrix int_matrix(int64_t rows, int64_t cols, uint32_t seed, Fp8Format f, float scale_inv) {
  IntMatrix m;
  m.values.resize(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < m.values.size(); ++i)
    m.values[i] = static_cast<float>(static_cast<int>((i * 2654435761u + seed * 40503u) % 13) - 6);
  const Tensor x = Tensor::from_floats(m.values, {rows, cols});
  Tensor codes = Tensor::empty({rows, cols}, DType::u8);
  fp8_quantize(codes, x, Tensor::from_floats({1.0f}, {}), f);
  m.fp8 = {codes, Tensor::from_floats({scale_inv}, {}), f};
  return m;
}

// C = sa sb A B^T (+ bias) in double, A [m, k] and B [n, k].
std::vector<double> product(const IntMatrix& a, const IntMatrix& b, int64_t m, int64_t n, int64_t k,
                            double sab, const std::vector<float>& bias = {}) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += static_cast<double>(a.values[i * k + p]) * b.values[j * k + p];
      c[i * n + j] = sab * s + (bias.empty() ? 0.0 : bias[j]);
    }
  return c;
}

std::vector<float> rounded(const std::vector<double>& v, DType dt) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_floats(f, {static_cast<int64_t>(f.size())}, dt).to_floats();
}

TEST(GemmFp8Test, ExactProductsRoundOnceToCsDtype) {
  const int64_t m = 5, n = 7, k = 33;
  for (const auto& [fa, fb] :
       {std::pair{Fp8Format::e4m3, Fp8Format::e4m3}, std::pair{Fp8Format::e5m2, Fp8Format::e4m3},
        std::pair{Fp8Format::e4m3, Fp8Format::e5m2}}) {
    const IntMatrix a = int_matrix(m, k, 1, fa, 0.5f), b = int_matrix(n, k, 2, fb, 0.0625f);
    const std::vector<double> want = product(a, b, m, n, k, 0.5 * 0.0625);
    for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(dtype_name(dt));
      Tensor c = Tensor::empty({m, n}, dt);
      gemm_fp8(c, a.fp8, b.fp8, {.trans_b = true});
      EXPECT_EQ(c.to_floats(), rounded(want, dt));
    }
  }
}

TEST(GemmFp8Test, BiasAndAccumulation) {
  const int64_t m = 4, n = 6, k = 16;
  const IntMatrix a = int_matrix(m, k, 3, Fp8Format::e4m3, 0.25f),
                  b = int_matrix(n, k, 4, Fp8Format::e4m3, 0.5f);
  const std::vector<float> bias = {0.5f, -1.0f, 2.0f, 0.0f, 3.25f, -0.75f};
  const std::vector<double> want = product(a, b, m, n, k, 0.125, bias);
  for (const DType bias_dt : {DType::f32, DType::bf16}) {
    Tensor c = Tensor::empty({m, n}, DType::bf16);
    const Tensor bt = Tensor::from_floats(bias, {n}, bias_dt);
    gemm_fp8(c, a.fp8, b.fp8, {.trans_b = true, .bias = &bt});
    EXPECT_EQ(c.to_floats(), rounded(want, DType::bf16));
  }
  // beta = 1 into an f32 C (a weight gradient accumulating over micro-batches).
  Tensor acc = Tensor::from_floats(std::vector<float>(m * n, 1.5f), {m, n});
  gemm_fp8(acc, a.fp8, b.fp8, {.trans_b = true, .beta = 1.0f});
  const std::vector<double> plain = product(a, b, m, n, k, 0.125);
  std::vector<double> want_acc(plain);
  for (double& v : want_acc) v += 1.5;
  EXPECT_EQ(acc.to_floats(), rounded(want_acc, DType::f32));
}

TEST(GemmFp8Test, GeluEpiloguesComputeInFp32AndRoundOnce) {
  const int64_t m = 6, n = 8, k = 16;
  const IntMatrix a = int_matrix(m, k, 5, Fp8Format::e4m3, 0.125f),
                  b = int_matrix(n, k, 6, Fp8Format::e4m3, 0.125f);
  const std::vector<float> bias = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -0.6f, 0.7f, -0.8f};
  const std::vector<double> pre = product(a, b, m, n, k, 1.0 / 64, bias);
  const Tensor pre32 = Tensor::from_floats(std::vector<float>(pre.begin(), pre.end()), {m, n});
  // gelu: aux = the pre-activation rounded to bf16; C = gelu(pre) from fp32, rounded.
  Tensor gelu32 = Tensor::empty({m, n}, DType::f32);
  gelu_forward(gelu32, pre32);
  const Tensor bt = Tensor::from_floats(bias, {n});
  Tensor c = Tensor::empty({m, n}, DType::bf16), aux = Tensor::empty({m, n}, DType::bf16);
  gemm_fp8(c, a.fp8, b.fp8,
           {.trans_b = true, .bias = &bt, .epilogue = GemmEpilogue::gelu, .aux = &aux});
  EXPECT_EQ(aux.to_floats(), rounded(pre, DType::bf16));
  EXPECT_EQ(c.to_floats(),
            Tensor::from_floats(gelu32.to_floats(), {m, n}, DType::bf16).to_floats());
  // dgelu: C = product * gelu'(aux), aux read as given (bf16), all in fp32, rounded once.
  const std::vector<double> prod = product(a, b, m, n, k, 1.0 / 64);
  const Tensor prod32 = Tensor::from_floats(std::vector<float>(prod.begin(), prod.end()), {m, n});
  Tensor aux32 = Tensor::empty({m, n}, DType::f32), d32 = Tensor::empty({m, n}, DType::f32);
  cast(aux32, aux);
  gelu_backward(d32, prod32, aux32);
  Tensor dc = Tensor::empty({m, n}, DType::bf16);
  gemm_fp8(dc, a.fp8, b.fp8, {.trans_b = true, .epilogue = GemmEpilogue::dgelu, .aux = &aux});
  EXPECT_EQ(dc.to_floats(), Tensor::from_floats(d32.to_floats(), {m, n}, DType::bf16).to_floats());
}

TEST(GemmFp8Test, WhatItCannotTakeIsNamed) {
  const IntMatrix a = int_matrix(4, 16, 1, Fp8Format::e4m3, 1.0f),
                  b = int_matrix(8, 16, 2, Fp8Format::e4m3, 1.0f),
                  g = int_matrix(8, 16, 3, Fp8Format::e5m2, 1.0f),
                  h = int_matrix(4, 16, 3, Fp8Format::e5m2, 1.0f);
  Tensor c = Tensor::empty({4, 8}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { gemm_fp8(c, a.fp8, b.fp8, {}); },
                                      {"trans_b = true", "K-major"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { gemm_fp8(c, a.fp8, b.fp8, {.trans_a = true, .trans_b = true}); }, {"trans_a = false"}));
  EXPECT_TRUE(test::throws_error_with([&] { gemm_fp8(c, h.fp8, g.fp8, {.trans_b = true}); },
                                      {"both operands are e5m2"}));
  const IntMatrix k8 = int_matrix(8, 8, 4, Fp8Format::e4m3, 1.0f);
  EXPECT_TRUE(
      test::throws_error_with([&] { gemm_fp8(c, a.fp8, k8.fp8, {.trans_b = true}); }, {"same K"}));
  Tensor wrong = Tensor::empty({8, 4}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { gemm_fp8(wrong, a.fp8, b.fp8, {.trans_b = true}); },
                                      {"expected [4, 8]"}));
  const Tensor bias = Tensor::zeros({5}, DType::f32);
  EXPECT_TRUE(test::throws_error_with(
      [&] { gemm_fp8(c, a.fp8, b.fp8, {.trans_b = true, .bias = &bias}); }, {"bias", "[8]"}));
  Fp8Tensor no_scale = a.fp8;
  no_scale.scale_inv = Tensor::zeros({2}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { gemm_fp8(c, no_scale, b.fp8, {.trans_b = true}); },
                                      {"a.scale_inv", "rank-0 f32"}));
  Fp8Tensor floats = a.fp8;
  floats.codes = Tensor::zeros({4, 16}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { gemm_fp8(c, floats, b.fp8, {.trans_b = true}); },
                                      {"a.codes", "u8"}));
  EXPECT_TRUE(fp8_gemm_supported(Device::cpu()));
}

}  // namespace
}  // namespace stoker::ops
