// ops::gemm's gelu and dgelu epilogues and its bias gradient on the CPU backend: bit for bit the
// unfused composition (gemm with bias, then gelu_forward; gemm, then gelu_backward; gemm and
// ops::bias_grad) for f32 and half inputs and outputs, every transpose, with and without a bias,
// alpha != 1, beta 1, k = 0; and the errors bad epilogue arguments get, each naming the argument.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stoker/ops/activation.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::throws_error_with;

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  DType in, out;
  bool bias;
  float alpha = 1.0f;
};

std::string describe(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         (c.ta ? " A^T" : " A") + (c.tb ? " B^T" : " B") + " " + std::string(dtype_name(c.in)) +
         "->" + std::string(dtype_name(c.out)) + (c.bias ? " bias" : "") +
         " alpha=" + std::to_string(c.alpha);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const DType pairs[][2] = {{DType::f32, DType::f32},
                            {DType::bf16, DType::bf16},
                            {DType::f16, DType::f16},
                            {DType::bf16, DType::f32}};
  for (const auto& p : pairs)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const bool bias : {false, true})
          out.push_back({7 + ta, 24 + 8 * tb, 13, ta, tb, p[0], p[1], bias});
  out.push_back({33, 40, 65, false, true, DType::bf16, DType::bf16, true, 0.5f});
  out.push_back({5, 9, 3, true, false, DType::f32, DType::f32, true, -2.0f});
  return out;
}

TEST(GemmEpilogueTest, GeluIsTheUnfusedGemmBiasAndGeluBitForBit) {
  uint32_t seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    // Inputs in [-2, 2]: pre-activations of a few units, where the GELU bends.
    const Tensor a =
        test::random_tensor(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, c.in, seed++, -1.0f, 1.0f);
    const Tensor b =
        test::random_tensor(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.in, seed++, -1.0f, 1.0f);
    const Tensor bias = test::random_tensor({c.n}, c.out, seed++, -1.0f, 1.0f);
    const GemmOptions plain{
        .trans_a = c.ta, .trans_b = c.tb, .alpha = c.alpha, .bias = c.bias ? &bias : nullptr};
    // Unfused: pre = gemm + bias; y = gelu(pre).
    const Tensor pre_ref = Tensor::empty({c.m, c.n}, c.out);
    const Tensor y_ref = Tensor::empty({c.m, c.n}, c.out);
    gemm(pre_ref, a, b, plain);
    gelu_forward(y_ref, pre_ref);
    // Fused, into NaN-poisoned outputs (beta = 0 must not read them).
    const Tensor pre = test::poisoned({c.m, c.n}, c.out);
    const Tensor y = test::poisoned({c.m, c.n}, c.out);
    GemmOptions fused = plain;
    fused.epilogue = GemmEpilogue::gelu;
    fused.aux = &pre;
    gemm(y, a, b, fused);
    EXPECT_TRUE(bit_identical(pre, pre_ref)) << "aux (pre-activation)";
    EXPECT_TRUE(bit_identical(y, y_ref)) << "c (gelu output)";
  }
}

TEST(GemmEpilogueTest, DgeluIsTheUnfusedGemmAndGeluBackwardBitForBit) {
  uint32_t seed = 100;
  for (const Case& c : cases()) {
    if (c.bias) continue;  // dgelu takes no bias (its own test below)
    SCOPED_TRACE(describe(c));
    const Tensor a = test::random_tensor(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, c.in, seed++);
    const Tensor b = test::random_tensor(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.in, seed++);
    const Tensor pre = test::random_tensor({c.m, c.n}, c.out, seed++, -4.0f, 4.0f);
    const GemmOptions plain{.trans_a = c.ta, .trans_b = c.tb, .alpha = c.alpha};
    const Tensor g_ref = Tensor::empty({c.m, c.n}, c.out);
    const Tensor d_ref = Tensor::empty({c.m, c.n}, c.out);
    gemm(g_ref, a, b, plain);
    gelu_backward(d_ref, g_ref, pre);
    const Tensor d = test::poisoned({c.m, c.n}, c.out);
    GemmOptions fused = plain;
    fused.epilogue = GemmEpilogue::dgelu;
    fused.aux = &pre;
    const std::vector<float> pre_before = pre.to_floats();
    gemm(d, a, b, fused);
    EXPECT_TRUE(bit_identical(d, d_ref));
    EXPECT_EQ(pre.to_floats(), pre_before) << "aux is only read";
  }
}

TEST(GemmEpilogueTest, InnerDimensionZero) {
  // op(a) op(b) is all zeros: gelu gives aux = bias and c = gelu(bias); dgelu gives zeros.
  const Tensor a = Tensor::empty({3, 0}, DType::f32);
  const Tensor b = Tensor::empty({0, 8}, DType::f32);
  const Tensor bias = test::random_tensor({8}, DType::f32, 7, -2.0f, 2.0f);
  const Tensor pre = test::poisoned({3, 8}, DType::f32);
  const Tensor y = test::poisoned({3, 8}, DType::f32);
  gemm(y, a, b, {.bias = &bias, .epilogue = GemmEpilogue::gelu, .aux = &pre});
  const Tensor pre_ref = Tensor::zeros({3, 8}, DType::f32);
  add_bias(pre_ref, bias);
  const Tensor y_ref = Tensor::empty({3, 8}, DType::f32);
  gelu_forward(y_ref, pre_ref);
  EXPECT_TRUE(bit_identical(pre, pre_ref));
  EXPECT_TRUE(bit_identical(y, y_ref));
  const Tensor d = test::poisoned({3, 8}, DType::f32);
  gemm(d, a, b, {.epilogue = GemmEpilogue::dgelu, .aux = &pre});
  EXPECT_EQ(d.to_floats(), std::vector<float>(24, 0.0f));
}

TEST(GemmEpilogueTest, BadEpilogueArgumentsThrowNamingThem) {
  const Tensor a = Tensor::empty({4, 3}, DType::f32);
  const Tensor b = Tensor::empty({3, 8}, DType::f32);
  const Tensor c = Tensor::empty({4, 8}, DType::f32);
  const Tensor aux = Tensor::empty({4, 8}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { gemm(c, a, b, {.epilogue = GemmEpilogue::gelu}); },
                                {"ops::gemm", "gelu epilogue needs options.aux", "f32[4, 8]"}));
  EXPECT_TRUE(throws_error_with(
      [&] { gemm(c, a, b, {.epilogue = GemmEpilogue::dgelu}); },
      {"ops::gemm", "dgelu epilogue needs options.aux", "forward's pre-activation"}));
  const Tensor wrong_shape = Tensor::empty({8, 4}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { gemm(c, a, b, {.epilogue = GemmEpilogue::gelu, .aux = &wrong_shape}); },
      {"ops::gemm", "options.aux is f32[8, 4] on cpu", "c's dtype, shape and device",
       "f32[4, 8] on cpu"}));
  const Tensor wrong_dtype = Tensor::empty({4, 8}, DType::bf16);
  EXPECT_TRUE(throws_error_with(
      [&] { gemm(c, a, b, {.epilogue = GemmEpilogue::dgelu, .aux = &wrong_dtype}); },
      {"ops::gemm", "options.aux is bf16[4, 8] on cpu", "dgelu epilogue"}));
  const Tensor undefined;
  EXPECT_TRUE(
      throws_error_with([&] { gemm(c, a, b, {.epilogue = GemmEpilogue::gelu, .aux = &undefined}); },
                        {"ops::gemm", "options.aux is undefined"}));
  EXPECT_TRUE(throws_error_with([&] { gemm(c, a, b, {.epilogue = GemmEpilogue::gelu, .aux = &c}); },
                                {"ops::gemm", "options.aux is c itself"}));
  EXPECT_TRUE(throws_error_with(
      [&] { gemm(c, a, b, {.beta = 1.0f, .epilogue = GemmEpilogue::gelu, .aux = &aux}); },
      {"ops::gemm", "gelu epilogue needs beta = 0"}));
  const Tensor bias = Tensor::empty({8}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { gemm(c, a, b, {.bias = &bias, .epilogue = GemmEpilogue::dgelu, .aux = &aux}); },
      {"ops::gemm", "options.bias", "dgelu epilogue", "ops::bias_grad"}));
  EXPECT_TRUE(throws_error_with([&] { gemm(c, a, b, {.aux = &aux}); },
                                {"ops::gemm", "options.aux is set", "epilogue is none"}));
  const Tensor a3 = Tensor::empty({2, 4, 3}, DType::f32);
  const Tensor b3 = Tensor::empty({2, 3, 8}, DType::f32);
  const Tensor c3 = Tensor::empty({2, 4, 8}, DType::f32);
  const Tensor aux3 = Tensor::empty({2, 4, 8}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { gemm_batched(c3, a3, b3, {.epilogue = GemmEpilogue::gelu, .aux = &aux3}); },
      {"ops::gemm_batched", "options.epilogue/options.aux are not supported"}));
}

TEST(GemmEpilogueTest, BiasGradIsTheUnfusedBiasGradBitForBit) {
  // The weight-gradient layout: C f32 [m, n] (+)= dy^T x with dy [k, m]; bias_grad = dy's column
  // sums, written over whatever the vector held, whatever beta does to C.
  struct BiasGradCase {
    int64_t m, n, k;
    bool tb;
    DType in;
    float beta;
  };
  const BiasGradCase bias_grad_cases[] = {
      {24, 16, 64, false, DType::bf16, 0.0f}, {24, 16, 64, false, DType::bf16, 1.0f},
      {7, 5, 300, true, DType::f16, 0.0f},    {3072, 8, 33, false, DType::f32, 1.0f},
      {1, 1, 1, false, DType::bf16, 0.0f},    {40, 9, 1030, true, DType::bf16, 1.0f}};
  uint32_t seed = 200;
  for (const BiasGradCase& c : bias_grad_cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k) + (c.tb ? " B^T " : " B ") +
                 std::string(dtype_name(c.in)) + " beta=" + std::to_string(c.beta));
    const Tensor dy = test::random_tensor({c.k, c.m}, c.in, seed++);
    const Tensor x = test::random_tensor(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.in, seed++);
    const Tensor c0 = test::random_tensor({c.m, c.n}, DType::f32, seed++);
    const GemmOptions plain{.trans_a = true, .trans_b = c.tb, .beta = c.beta};
    const Tensor c_ref = c0.to(Device::cpu());
    gemm(c_ref, dy, x, plain);
    const Tensor db_ref = Tensor::zeros({c.m}, DType::f32);
    bias_grad(db_ref, dy);

    const Tensor c_fused = c0.to(Device::cpu());
    const Tensor db = test::poisoned({c.m}, DType::f32);
    GemmOptions fused = plain;
    fused.bias_grad = &db;
    gemm(c_fused, dy, x, fused);
    EXPECT_TRUE(bit_identical(c_fused, c_ref)) << "c (the weight gradient)";
    EXPECT_TRUE(bit_identical(db, db_ref)) << "bias_grad";
  }
}

TEST(GemmEpilogueTest, BiasGradBesideItsWeightGradientInOneBuffer) {
  // A gradient bucket holds dW and the bias gradient side by side in one storage: allowed, as
  // long as the ranges do not overlap.
  const Tensor flat = test::poisoned({4 * 8 + 4}, DType::f32);
  const Tensor dw = flat.slice(0, 32).reshape({4, 8});
  const Tensor db = flat.slice(32, 36);
  const Tensor dy = test::random_tensor({6, 4}, DType::bf16, 301);
  const Tensor x = test::random_tensor({6, 8}, DType::bf16, 302);
  gemm(dw, dy, x, {.trans_a = true, .bias_grad = &db});
  const Tensor dw_ref = Tensor::empty({4, 8}, DType::f32);
  gemm(dw_ref, dy, x, {.trans_a = true});
  const Tensor db_ref = Tensor::zeros({4}, DType::f32);
  bias_grad(db_ref, dy);
  EXPECT_TRUE(bit_identical(dw, dw_ref));
  EXPECT_TRUE(bit_identical(db, db_ref));
  // n = 0: no product, but the sums of dy still come out.
  const Tensor no_features = Tensor::empty({6, 0}, DType::bf16);
  const Tensor dw_empty = Tensor::empty({4, 0}, DType::f32);
  test::poison(db);
  gemm(dw_empty, dy, no_features, {.trans_a = true, .bias_grad = &db});
  EXPECT_TRUE(bit_identical(db, db_ref)) << "n = 0";
  // k = 0: a sum over no rows is zero.
  const Tensor empty_dy = Tensor::empty({0, 4}, DType::f32);
  const Tensor empty_x = Tensor::empty({0, 8}, DType::f32);
  gemm(dw, empty_dy, empty_x, {.trans_a = true, .bias_grad = &db});
  EXPECT_EQ(db.to_floats(), std::vector<float>(4, 0.0f));
}

TEST(GemmEpilogueTest, BadBiasGradArgumentsThrowNamingThem) {
  const Tensor dy = Tensor::empty({6, 4}, DType::bf16);
  const Tensor x = Tensor::empty({6, 8}, DType::bf16);
  const Tensor dw = Tensor::empty({4, 8}, DType::f32);
  const Tensor wrong_size = Tensor::empty({8}, DType::f32);
  EXPECT_TRUE(
      throws_error_with([&] { gemm(dw, dy, x, {.trans_a = true, .bias_grad = &wrong_size}); },
                        {"ops::gemm", "options.bias_grad is f32[8] on cpu", "expected f32 [4]"}));
  const Tensor wrong_dtype = Tensor::empty({4}, DType::bf16);
  EXPECT_TRUE(
      throws_error_with([&] { gemm(dw, dy, x, {.trans_a = true, .bias_grad = &wrong_dtype}); },
                        {"ops::gemm", "options.bias_grad is bf16[4]", "expected f32 [4]"}));
  const Tensor db = Tensor::empty({4}, DType::f32);
  const Tensor a = Tensor::empty({4, 6}, DType::bf16);
  EXPECT_TRUE(throws_error_with([&] { gemm(dw, a, x, {.bias_grad = &db}); },
                                {"ops::gemm", "options.bias_grad needs trans_a", "dy^T x"}));
  const Tensor bias = Tensor::empty({8}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { gemm(dw, dy, x, {.trans_a = true, .bias = &bias, .bias_grad = &db}); },
      {"ops::gemm", "options.bias_grad", "drop options.bias"}));
  const Tensor dw_as_vector = dw.reshape({32}).slice(0, 4);
  EXPECT_TRUE(
      throws_error_with([&] { gemm(dw, dy, x, {.trans_a = true, .bias_grad = &dw_as_vector}); },
                        {"ops::gemm", "options.bias_grad shares memory with c, a or b"}));
  const Tensor a3 = Tensor::empty({2, 6, 4}, DType::f32);
  const Tensor b3 = Tensor::empty({2, 6, 8}, DType::f32);
  const Tensor c3 = Tensor::empty({2, 4, 8}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { gemm_batched(c3, a3, b3, {.trans_a = true, .bias_grad = &db}); },
      {"ops::gemm_batched", "options.bias_grad is not supported", "ops::bias_grad"}));
}

}  // namespace
}  // namespace stoker::ops
