// SwiGLU on the CPU (ops/activation.h: swiglu_forward / swiglu_backward):
// - against transformers' unfused composition written with plain loops in the test: the gate and
//   up halves split, act = silu(gate) (std::exp, rounded to the dtype), y = act * up (rounded);
//   the backward as autograd forms it (d_up = dy * act, d_gate = (dy * up) * silu'(gate));
// - the gradients against central finite differences of sum(y * r) in f32;
// - the backward in place (dx = x) with the same bits;
// - bad inputs refused with the op's name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "llama_reference.h"
#include "stoker/ops/activation.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::round_to;
using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

double ulp(DType d) {
  return d == DType::f16 ? std::ldexp(1.0, -10) : d == DType::bf16 ? std::ldexp(1.0, -7) : 1e-6;
}

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }
double silu_grad_ref(double g) {
  const double s = 1.0 / (1.0 + std::exp(-g));
  return s * (1.0 + g * (1.0 - s));
}

// |got - want| within `ulps` ulps of the dtype (relative) plus a small absolute floor.
::testing::AssertionResult near_ulps(float got, double want, DType d, double ulps) {
  const double tol = ulps * ulp(d) * std::fabs(want) + 1e-6;
  if (std::fabs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << got << ", want " << want << " (tol " << tol << ")";
}

TEST(SwiGluTest, MatchesTheUnfusedComposition) {
  uint32_t seed = 10;
  for (DType d : kFloatTypes) {
    for (const Shape& s : {Shape{1, 2}, Shape{3, 14}, Shape{2, 3, 64}, Shape{4, 2 * 1000}}) {
      const std::string what = std::string(dtype_name(d)) + " " + s.str();
      const int64_t f = s[s.rank() - 1] / 2, n = s.numel() / (2 * f);
      Shape ys = s;
      ys[ys.rank() - 1] = f;
      const Tensor x = test::random_tensor(s, d, seed++, -6.0f, 6.0f);
      const Tensor dy = test::random_tensor(ys, d, seed++);
      const Tensor y = test::poisoned(ys, d), dx = test::poisoned(s, d);
      swiglu_forward(y, x);
      swiglu_backward(dx, dy, x);
      const std::vector<float> xv = x.to_floats(), gv = dy.to_floats(), yv = y.to_floats(),
                               dxv = dx.to_floats();
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < f; ++j) {
          const float gate = xv[r * 2 * f + j], up = xv[r * 2 * f + f + j], g = gv[r * f + j];
          // The reference rounds where transformers' tensors are rounded; the op's exp (about
          // 2 ulp of fp32) may move a rounded value to its neighbour: one ulp per rounding.
          const float act = round_to(d, static_cast<float>(silu_ref(gate)));
          ASSERT_TRUE(near_ulps(yv[r * f + j], static_cast<double>(act) * up, d, 2.0))
              << what << " y[" << r << ", " << j << "]";
          const double dup = static_cast<double>(g) * act;
          const double dgate = round_to(d, g * up) * silu_grad_ref(gate);
          ASSERT_TRUE(near_ulps(dxv[r * 2 * f + f + j], dup, d, 2.0))
              << what << " d(up)[" << r << ", " << j << "]";
          ASSERT_TRUE(near_ulps(dxv[r * 2 * f + j], dgate, d, 2.0))
              << what << " d(gate)[" << r << ", " << j << "]";
        }
      }
      // In place: dx written over x, the same bits.
      const Tensor x2 = x.clone();
      swiglu_backward(x2, dy, x2);
      EXPECT_TRUE(bit_identical(x2, dx)) << what << " in place";
    }
  }
}

TEST(SwiGluTest, EqualsTransformersLlamaMlpActivationInBf16) {
  // act_fn(gate) * up of transformers' LlamaMLP and its autograd gradient, in bfloat16
  // (tests/ops/llama_reference.py). The roundings are the same; only exp differs (SLEEF's expf
  // there, portable_exp here, both about an fp32 ulp), which can move a bf16 rounding of
  // silu(gate) by one ulp; on this fixture no element moved.
  const auto ref = test::load_llama_reference();
  ASSERT_FALSE(ref.empty()) << "tests/ops/llama_reference.txt missing";
  const Tensor x = Tensor::from_floats(ref.at("swiglu.x"), {6, 80}, DType::bf16);
  const Tensor dy = Tensor::from_floats(ref.at("swiglu.dy"), {6, 40}, DType::bf16);
  const Tensor y = test::poisoned({6, 40}, DType::bf16), dx = test::poisoned({6, 80}, DType::bf16);
  swiglu_forward(y, x);
  swiglu_backward(dx, dy, x);
  for (const auto& [got, name] : {std::pair{y, "swiglu.y"}, std::pair{dx, "swiglu.dx"}}) {
    const std::vector<float> g = got.to_floats(), w = ref.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    int64_t same = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      same += g[i] == w[i];
      EXPECT_NEAR(g[i], w[i], std::ldexp(std::fabs(w[i]), -6) + 1e-6) << name << " " << i;
    }
    EXPECT_EQ(same, static_cast<int64_t>(g.size())) << name;  // measured: every element
  }
}

TEST(SwiGluTest, GradientMatchesFiniteDifferences) {
  const Shape s{3, 10}, ys{3, 5};
  const Tensor x = test::random_tensor(s, DType::f32, 20, -4.0f, 4.0f);
  const std::vector<float> r = test::random_floats(15, 21);
  auto loss = [&](const std::vector<float>& xv) {
    const Tensor y = Tensor::empty(ys, DType::f32);
    swiglu_forward(y, Tensor::from_floats(xv, s, DType::f32));
    double l = 0.0;
    const std::vector<float> yv = y.to_floats();
    for (size_t i = 0; i < yv.size(); ++i) l += static_cast<double>(yv[i]) * r[i];
    return l;
  };
  const Tensor dx = test::poisoned(s, DType::f32);
  swiglu_backward(dx, Tensor::from_floats(r, ys, DType::f32), x);
  const std::vector<float> dxv = dx.to_floats();
  for (size_t i = 0; i < 30; ++i) {
    std::vector<float> xp = x.to_floats(), xm = xp;
    xp[i] += 1e-2f;
    xm[i] -= 1e-2f;
    const double fd = (loss(xp) - loss(xm)) / 2e-2;
    EXPECT_NEAR(dxv[i], fd, 1e-3 * (1.0 + std::fabs(fd))) << i;
  }
}

TEST(SwiGluTest, LargeAndNanInputs) {
  // silu(g) = g for large g, about 0 for very negative g; NaN stays NaN.
  const Tensor x =
      Tensor::from_floats({100.0f, -100.0f, test::kNaN, 2.0f, 3.0f, 3.0f}, {1, 6}, DType::f32);
  const Tensor y = test::poisoned({1, 3}, DType::f32);
  swiglu_forward(y, x);
  const std::vector<float> yv = y.to_floats();
  EXPECT_EQ(yv[0], 200.0f);
  EXPECT_LE(std::fabs(yv[1]), 1e-30f);
  EXPECT_TRUE(std::isnan(yv[2]));
}

TEST(SwiGluTest, BadInputsAreClearErrors) {
  const Tensor x = Tensor::zeros({4, 16}, DType::bf16), y = Tensor::zeros({4, 8}, DType::bf16);
  EXPECT_TRUE(throws_error_with(
      [&] {
        swiglu_forward(Tensor::zeros({4, 7}, DType::bf16), Tensor::zeros({4, 15}, DType::bf16));
      },
      {"swiglu_forward", "x", "even"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        swiglu_forward(Tensor::zeros({4, 16}, DType::bf16), x);
      },
      {"swiglu_forward", "y", "[4, 8]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        swiglu_forward(Tensor::zeros({4, 8}, DType::f32), x);
      },
      {"swiglu_forward", "y"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        swiglu_forward(x.reshape({8, 8}).slice(0, 4), x);
      },
      {"swiglu_forward", "overlaps"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        swiglu_backward(Tensor::zeros({4, 16}, DType::bf16), Tensor::zeros({4, 16}, DType::bf16),
                        x);
      },
      {"swiglu_backward", "dy", "[4, 8]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        swiglu_backward(Tensor::zeros({4, 16}, DType::bf16), y, Tensor::zeros({4, 16}, DType::i32));
      },
      {"swiglu_backward", "x"}));
}

}  // namespace
}  // namespace stoker::ops
