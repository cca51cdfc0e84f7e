// The fused residual add + layer norm on the CPU (ops/layernorm.h: add_layernorm_forward,
// add_layernorm_backward) against the unfused path it replaces — ops::add then
// layernorm_forward; layernorm_backward then ops::add — which the CPU reproduces to the bit in
// every dtype (same row code, same roundings); in place (sum = x or residual, dsum = dsum_in
// and/or dy); and bad inputs, refused with the op's name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stoker/ops/elementwise.h"
#include "stoker/ops/layernorm.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
// Odd widths, GPT-2's 768, 1024 and 1600, and a row wider than the GPU's warp-per-row limit.
const std::vector<Shape> kShapes = {{1, 1},    {3, 7},    {5, 33},   {4, 768}, {3, 1024},
                                    {2, 1600}, {2, 3, 5}, {2, 4099}, {0, 8}};

struct Inputs {
  Tensor x, residual, dy, dsum_in, gamma, beta, dgamma0, dbeta0;
};

Inputs make_inputs(const Shape& s, DType d, uint32_t& seed) {
  const int64_t c = s[s.rank() - 1];
  Inputs in;
  in.x = test::random_tensor(s, d, seed++, -2.0f, 3.0f);
  in.residual = test::random_tensor(s, d, seed++, -3.0f, 2.0f);
  in.dy = test::random_tensor(s, d, seed++, -1.0f, 1.0f);
  in.dsum_in = test::random_tensor(s, d, seed++, -1.0f, 1.0f);
  in.gamma = test::random_tensor({c}, DType::f32, seed++, 0.5f, 1.5f);
  in.beta = test::random_tensor({c}, DType::f32, seed++, -0.5f, 0.5f);
  in.dgamma0 = test::random_tensor({c}, DType::f32, seed++);
  in.dbeta0 = test::random_tensor({c}, DType::f32, seed++);
  return in;
}

struct Outputs {
  Tensor sum, y, mean, rstd, dsum, dgamma, dbeta;
};

Outputs poisoned_outputs(const Shape& s, DType d, const Inputs& in) {
  const int64_t c = s[s.rank() - 1], n = s.numel() / c;
  return {test::poisoned(s, d),
          test::poisoned(s, d),
          test::poisoned({n}, DType::f32),
          test::poisoned({n}, DType::f32),
          test::poisoned(s, d),
          in.dgamma0.clone(),
          in.dbeta0.clone()};
}

// ops::add + layernorm_forward, layernorm_backward + ops::add.
Outputs unfused(const Shape& s, DType d, const Inputs& in) {
  Outputs o = poisoned_outputs(s, d, in);
  add(o.sum, in.x, in.residual);
  layernorm_forward(o.y, o.mean, o.rstd, o.sum, in.gamma, in.beta, 1e-5f);
  const Tensor dx = test::poisoned(s, d);
  layernorm_backward(dx, o.dgamma, o.dbeta, in.dy, o.sum, o.mean, o.rstd, in.gamma);
  add(o.dsum, dx, in.dsum_in);
  return o;
}

::testing::AssertionResult same_outputs(const Outputs& a, const Outputs& b) {
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> pairs[] = {
      {"sum", {&a.sum, &b.sum}},      {"y", {&a.y, &b.y}},
      {"mean", {&a.mean, &b.mean}},   {"rstd", {&a.rstd, &b.rstd}},
      {"dsum", {&a.dsum, &b.dsum}},   {"dgamma", {&a.dgamma, &b.dgamma}},
      {"dbeta", {&a.dbeta, &b.dbeta}}};
  for (const auto& [name, p] : pairs) {
    ::testing::AssertionResult r = bit_identical(*p.first, *p.second);
    if (!r) return r << " (" << name << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(AddLayerNormTest, FusedEqualsUnfusedToTheBit) {
  uint32_t seed = 700;
  for (DType d : kFloatTypes) {
    for (const Shape& s : kShapes) {
      const Inputs in = make_inputs(s, d, seed);
      const Outputs want = unfused(s, d, in);
      Outputs got = poisoned_outputs(s, d, in);
      add_layernorm_forward(got.y, got.sum, got.mean, got.rstd, in.x, in.residual, in.gamma,
                            in.beta, 1e-5f);
      add_layernorm_backward(got.dsum, got.dgamma, got.dbeta, in.dy, in.dsum_in, got.sum, got.mean,
                             got.rstd, in.gamma);
      EXPECT_TRUE(same_outputs(got, want)) << dtype_name(d) << " " << s.str();
    }
  }
}

TEST(AddLayerNormTest, BackwardAccumulatesParameterGradients) {
  // Two backwards after one forward: dgamma and dbeta grow by the same amount twice, as with
  // layernorm_backward (+=), and dsum is overwritten (the same both times).
  uint32_t seed = 800;
  const Shape s{6, 40};
  const Inputs in = make_inputs(s, DType::f32, seed);
  const Tensor sum = test::poisoned(s, DType::f32), y = test::poisoned(s, DType::f32);
  const Tensor mean = test::poisoned({6}, DType::f32), rstd = test::poisoned({6}, DType::f32);
  add_layernorm_forward(y, sum, mean, rstd, in.x, in.residual, in.gamma, in.beta, 1e-5f);
  const Tensor dg = Tensor::zeros({40}, DType::f32), db = Tensor::zeros({40}, DType::f32);
  const Tensor dsum1 = test::poisoned(s, DType::f32), dsum2 = test::poisoned(s, DType::f32);
  add_layernorm_backward(dsum1, dg, db, in.dy, in.dsum_in, sum, mean, rstd, in.gamma);
  const Tensor dg1 = dg.clone(), db1 = db.clone();
  add_layernorm_backward(dsum2, dg, db, in.dy, in.dsum_in, sum, mean, rstd, in.gamma);
  EXPECT_TRUE(bit_identical(dsum1, dsum2));
  const std::vector<float> g1 = dg1.to_floats(), g2 = dg.to_floats(), b1 = db1.to_floats(),
                           b2 = db.to_floats();
  for (size_t j = 0; j < g1.size(); ++j) {
    EXPECT_EQ(g2[j], g1[j] + g1[j]) << j;
    EXPECT_EQ(b2[j], b1[j] + b1[j]) << j;
  }
}

TEST(AddLayerNormTest, InPlaceGivesTheSameBits) {
  uint32_t seed = 900;
  for (DType d : kFloatTypes) {
    for (const Shape& s : {Shape{3, 7}, Shape{4, 768}, Shape{2, 4099}}) {
      const std::string what = std::string(dtype_name(d)) + " " + s.str();
      const Inputs in = make_inputs(s, d, seed);
      const Outputs want = unfused(s, d, in);
      const int64_t n = s.numel() / s[s.rank() - 1];
      for (const bool into_x : {true, false}) {  // sum written over x, or over residual
        const Tensor x = in.x.clone(), r = in.residual.clone();
        const Tensor& sum = into_x ? x : r;
        const Tensor y = test::poisoned(s, d), mean = test::poisoned({n}, DType::f32),
                     rstd = test::poisoned({n}, DType::f32);
        add_layernorm_forward(y, sum, mean, rstd, x, r, in.gamma, in.beta, 1e-5f);
        EXPECT_TRUE(bit_identical(sum, want.sum)) << what << (into_x ? " sum = x" : " sum = r");
        EXPECT_TRUE(bit_identical(y, want.y)) << what;
      }
      // dsum over dsum_in, over dy, and over both (dy and dsum_in one tensor).
      for (int mode = 0; mode < 3; ++mode) {
        const Tensor dg = in.dgamma0.clone(), db = in.dbeta0.clone();
        const Tensor dy = in.dy.clone(), din = mode == 2 ? dy : in.dsum_in.clone();
        const Tensor& dsum = mode == 1 ? dy : din;
        add_layernorm_backward(dsum, dg, db, dy, din, want.sum, want.mean, want.rstd, in.gamma);
        if (mode == 2) {
          // The reference for dy == dsum_in: the unfused pair on those inputs.
          const Tensor dx = test::poisoned(s, d), ref = test::poisoned(s, d);
          const Tensor dg2 = in.dgamma0.clone(), db2 = in.dbeta0.clone();
          layernorm_backward(dx, dg2, db2, in.dy, want.sum, want.mean, want.rstd, in.gamma);
          add(ref, dx, in.dy);
          EXPECT_TRUE(bit_identical(dsum, ref)) << what << " dsum = dy = dsum_in";
          EXPECT_TRUE(bit_identical(dg, dg2)) << what;
        } else {
          EXPECT_TRUE(bit_identical(dsum, want.dsum))
              << what << (mode == 0 ? " dsum = dsum_in" : " dsum = dy");
          EXPECT_TRUE(bit_identical(dg, want.dgamma)) << what;
          EXPECT_TRUE(bit_identical(db, want.dbeta)) << what;
        }
      }
    }
  }
}

TEST(AddLayerNormTest, BadInputsAreRefusedNamingTheOp) {
  const Tensor x = Tensor::zeros({4, 3}, DType::f32), r = Tensor::zeros({4, 3}, DType::f32);
  const Tensor s = Tensor::zeros({4, 3}, DType::f32), y = Tensor::zeros({4, 3}, DType::f32);
  const Tensor h = Tensor::zeros({4, 3}, DType::f16), r5 = Tensor::zeros({5, 3}, DType::f32);
  const Tensor mean = Tensor::zeros({4}, DType::f32), rstd = Tensor::zeros({4}, DType::f32);
  const Tensor g3 = Tensor::zeros({3}, DType::f32), g5 = Tensor::zeros({5}, DType::f32);
  const char* fwd = "add_layernorm_forward";
  EXPECT_TRUE(
      throws_error_with([&] { add_layernorm_forward(y, s, mean, rstd, x, r5, g3, g3, 1e-5f); },
                        {fwd, "residual", "f32[5, 3]"}));
  EXPECT_TRUE(
      throws_error_with([&] { add_layernorm_forward(y, h, mean, rstd, x, r, g3, g3, 1e-5f); },
                        {fwd, "sum", "f16[4, 3]", "equal dtypes"}));
  EXPECT_TRUE(throws_error_with(
      [&] { add_layernorm_forward(h, s, mean, rstd, x, r, g3, g3, 1e-5f); }, {fwd, "y"}));
  EXPECT_TRUE(
      throws_error_with([&] { add_layernorm_forward(y, s, mean, rstd, x, r, g5, g3, 1e-5f); },
                        {fwd, "gamma", "f32[5]", "expected f32[3]"}));
  EXPECT_TRUE(throws_error_with([&] { add_layernorm_forward(y, s, g5, rstd, x, r, g3, g3, 1e-5f); },
                                {fwd, "mean", "f32[5]", "expected f32[4]"}));
  EXPECT_TRUE(throws_error_with(
      [&] { add_layernorm_forward(y, s, mean, rstd, x, r, g3, g3, -1.0f); }, {fwd, "eps"}));
  EXPECT_TRUE(
      throws_error_with([&] { add_layernorm_forward(x, s, mean, rstd, x, r, g3, g3, 1e-5f); },
                        {fwd, "y", "overlaps x", "separate buffer"}));
  EXPECT_TRUE(
      throws_error_with([&] { add_layernorm_forward(s, s, mean, rstd, x, r, g3, g3, 1e-5f); },
                        {fwd, "y", "overlaps sum"}));
  // A partial overlap of sum and x (shifted by one row) is neither in place nor disjoint.
  const Tensor big = Tensor::zeros({5, 3}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        add_layernorm_forward(y, big.slice(1, 5), mean, rstd, big.slice(0, 4), r, g3, g3, 1e-5f);
      },
      {fwd, "sum", "overlaps x", "in place"}));

  const char* bwd = "add_layernorm_backward";
  const Tensor d = Tensor::zeros({4, 3}, DType::f32), din = Tensor::zeros({4, 3}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { add_layernorm_backward(d, g3, g3, x, h, s, mean, rstd, g3); },
                                {bwd, "dsum_in", "f16[4, 3]", "equal dtypes"}));
  EXPECT_TRUE(throws_error_with(
      [&] { add_layernorm_backward(d, g3, g3, r5, din, s, mean, rstd, g3); }, {bwd, "dy"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        add_layernorm_backward(d, g3, Tensor::zeros({3}, DType::f16), x, din, s, mean, rstd, g3);
      },
      {bwd, "dbeta", "f16[3]", "expected f32[3]"}));
  EXPECT_TRUE(throws_error_with([&] { add_layernorm_backward(d, g3, g3, x, din, s, g5, rstd, g3); },
                                {bwd, "mean", "for sum", "expected f32[4]"}));
  EXPECT_TRUE(
      throws_error_with([&] { add_layernorm_backward(s, g3, g3, x, din, s, mean, rstd, g3); },
                        {bwd, "dsum", "overlaps sum"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        add_layernorm_backward(big.slice(1, 5), g3, g3, big.slice(0, 4), din, s, mean, rstd, g3);
      },
      {bwd, "dsum", "overlaps dy"}));
}

}  // namespace
}  // namespace stoker::ops
