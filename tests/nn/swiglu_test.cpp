// nn::SwiGLU (stoker/nn/linear.h), Llama's MLP block, on the CPU: its parameters (names, shapes,
// no bias), its output against the unfused block of transformers' LlamaMLP — separate gate and
// up Linears holding the two halves of gate_up_proj's weight, silu and the product in plain
// loops, then down_proj — and its gradients against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "stoker/nn/linear.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

TEST(SwiGLUModuleTest, ParametersAreGateUpAndDown) {
  SwiGLU mlp(8, 20);
  const auto named = mlp.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "gate_up_proj.weight");
  EXPECT_EQ(named[0].second->shape(), Shape({40, 8}));
  EXPECT_EQ(named[1].first, "down_proj.weight");
  EXPECT_EQ(named[1].second->shape(), Shape({8, 20}));
  EXPECT_FALSE(mlp.gate_up_proj().has_bias());
  EXPECT_FALSE(mlp.down_proj().has_bias());
}

TEST(SwiGLUModuleTest, EqualsTheUnfusedLlamaMlp) {
  const int64_t d = 16, f = 24, n = 6;
  SwiGLU mlp(d, f);
  const std::vector<float> w = mlp.gate_up_proj().weight().value().to_floats();
  Linear gate(d, f, false), up(d, f, false);  // HF's gate_proj and up_proj: rows 0..F-1, F..2F-1
  gate.weight().set_value(Tensor::from_floats({w.begin(), w.begin() + f * d}, {f, d}));
  up.weight().set_value(Tensor::from_floats({w.begin() + f * d, w.end()}, {f, d}));
  const Tensor x = test::random_tensor({2, 3, d}, DType::f32, 7, -2.0f, 2.0f);
  const std::vector<float> g = gate.forward(x).to_floats(), u = up.forward(x).to_floats();
  std::vector<float> act(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    act[i] = static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i]);
  const std::vector<float> want =
      mlp.down_proj().forward(Tensor::from_floats(act, {2, 3, f})).to_floats();
  const Tensor y = mlp.forward(x);
  EXPECT_EQ(y.shape(), x.shape());
  const std::vector<float> got = y.to_floats();
  ASSERT_EQ(got.size(), static_cast<size_t>(n * d));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(SwiGLUModuleTest, GradientsMatchFiniteDifferences) {
  SwiGLU mlp(6, 5);
  test::check_gradients(mlp, test::random_tensor({4, 6}, DType::f32, 9, -2.0f, 2.0f), 10);
}

TEST(SwiGLUModuleTest, BadInputsAreClearErrors) {
  SwiGLU mlp(6, 5);
  EXPECT_THROW(mlp.forward(Tensor::zeros({2, 7}, DType::f32)), Error);
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        mlp.backward(Tensor::zeros({2, 6}, DType::f32));
      },
      {"SwiGLU", "before forward"}));
  EXPECT_TRUE(test::throws_error_with([] { SwiGLU bad(4, 0); }, {"SwiGLU(4, 0)", "positive"}));
}

}  // namespace
}  // namespace stoker::nn
