// nn::BatchNorm2d with the fused ReLU (set_activation(Activation::relu)) against BatchNorm2d
// followed by nn::ReLU on the CPU: the same bits for the output, the input gradient, the
// parameter gradients and the running statistics, in training and evaluation mode, both
// layouts, f32 and bf16; the same parameter names; the output handed back for selective
// recomputation; the refused activations.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "nn/same_state_bits.h"
#include "ops/conv_test_util.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

// A BatchNorm2d with random gamma / beta (the same for every seed-equal call).
std::unique_ptr<nn::BatchNorm2d> make_bn(int64_t c, Layout l, bool relu) {
  auto bn = nn::make<nn::BatchNorm2d>(c, 1e-5f, 0.1f, l);
  bn->weight().set_value(random_tensor({c}, DType::f32, 3, 0.5f, 1.5f));
  bn->bias().set_value(random_tensor({c}, DType::f32, 4));
  if (relu) bn->set_activation(nn::Activation::relu);
  return bn;
}

// Runs `steps` forward / backward pairs through both models and expects identical bits.
void expect_same_bits(nn::Module& fused, nn::Module& unfused, const Shape& shape, DType dtype,
                      int steps, const std::string& what) {
  for (int step = 0; step < steps; ++step) {
    const Tensor x = random_tensor(shape, dtype, 10 + step, -2.0f, 3.0f);
    const Tensor y_f = fused.forward(x);
    const Tensor y_u = unfused.forward(x);
    ASSERT_TRUE(bit_identical(y_f, y_u)) << what << " step " << step << ": y";
    EXPECT_TRUE(partly_zero(y_f)) << what;
    const Tensor dy = random_tensor(shape, dtype, 20 + step);
    const Tensor dx_f = fused.backward(dy);
    const Tensor dx_u = unfused.backward(dy);
    ASSERT_TRUE(bit_identical(dx_f, dx_u)) << what << " step " << step << ": dx";
  }
  expect_same_grads_and_buffers(fused, unfused, what, /*same_names=*/false);
}

TEST(BatchNorm2dRelu, SameBitsAsBatchNormThenReLU) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      for (const bool training : {true, false}) {
        const std::string what = fmt::format("{} {}{}", dtype_name(dtype), ops::layout_name(l),
                                             training ? " train" : " eval");
        auto fused = make_bn(6, l, true);
        nn::Sequential unfused(make_bn(6, l, false), nn::make<nn::ReLU>());
        fused->set_training(training);
        unfused.set_training(training);
        expect_same_bits(*fused, unfused, shape4({3, 6, 5, 7}, l), dtype, 2, what);
      }
    }
  }
}

TEST(BatchNorm2dRelu, NamesDescribeAndActivation) {
  auto fused = make_bn(4, Layout::nhwc, true);
  auto plain = make_bn(4, Layout::nhwc, false);
  const auto pf = fused->named_parameters(), pp = plain->named_parameters();
  ASSERT_EQ(pf.size(), 2u);
  ASSERT_EQ(pf.size(), pp.size());
  for (size_t i = 0; i < pf.size(); ++i) EXPECT_EQ(pf[i].first, pp[i].first);
  std::vector<std::string> buffers;
  fused->visit_buffers("", [&](const std::string& n, Tensor&) { buffers.push_back(n); });
  EXPECT_EQ(buffers, (std::vector<std::string>{"running_mean", "running_var"}));
  EXPECT_EQ(fused->describe(),
            plain->describe().substr(0, plain->describe().size() - 1) + ", relu)");
  EXPECT_NE(plain->describe().find("NHWC)"), std::string::npos) << plain->describe();
  EXPECT_EQ(fused->activation(), nn::Activation::relu);
  fused->set_activation(nn::Activation::none);
  EXPECT_EQ(fused->activation(), nn::Activation::none);
}

// Like nn::ReLU, the fused module hands back the output it keeps (the mask source), so the
// layer after it may release its own saved input (nn/checkpoint.h).
TEST(BatchNorm2dRelu, HandsBackItsOutputForRecomputation) {
  auto fused = make_bn(3, Layout::nchw, true);
  auto plain = make_bn(3, Layout::nchw, false);
  const Tensor x = random_tensor({2, 3, 4, 4}, DType::f32, 5);
  EXPECT_EQ(fused->output_recompute(), nn::Module::OutputRecompute::none);
  const Tensor y = fused->forward(x);
  plain->forward(x);
  EXPECT_EQ(fused->output_recompute(), nn::Module::OutputRecompute::from_own_state);
  EXPECT_EQ(plain->output_recompute(), nn::Module::OutputRecompute::none);
  EXPECT_EQ(fused->recompute_output(x).data(), y.data());
  fused->backward(random_tensor({2, 3, 4, 4}, DType::f32, 6));
  EXPECT_EQ(fused->output_recompute(), nn::Module::OutputRecompute::none);  // consumed
}

TEST(BatchNorm2dRelu, RefusedActivations) {
  nn::BatchNorm2d bn(3);
  EXPECT_TRUE(throws_error_with([&] { bn.set_activation(nn::Activation::gelu); },
                                {"BatchNorm2d(3", "Activation::none and Activation::relu"}));
  nn::Linear fc(4, 5);
  EXPECT_TRUE(throws_error_with([&] { fc.set_activation(nn::Activation::relu); },
                                {"Linear", "Activation::relu", "nn::ReLU"}));
}

}  // namespace
}  // namespace stoker::test
