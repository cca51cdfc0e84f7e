// nn::Residual's fused block tail (set_tail_relu: y = relu(body(x) + shortcut(x)) with the add and
// the ReLU inside the body's last BatchNorm2d) against Sequential{Residual, ReLU} on the CPU: the
// same bits for the output, the input gradient, every parameter gradient and the running
// statistics, in training and evaluation mode, both layouts, f32 and bf16, with the identity and
// with a downsample shortcut; the same parameter and buffer names; checkpointing the whole block
// works and checkpointing the tail BatchNorm2d alone is refused; the refused bodies.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>

#include "nn/same_state_bits.h"
#include "ops/conv_test_util.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

std::unique_ptr<nn::BatchNorm2d> make_bn(int64_t c, Layout l, uint32_t seed) {
  auto bn = nn::make<nn::BatchNorm2d>(c, 1e-5f, 0.1f, l);
  bn->weight().set_value(random_tensor({c}, DType::f32, seed, 0.5f, 1.5f));
  bn->bias().set_value(random_tensor({c}, DType::f32, seed + 1));
  return bn;
}

std::unique_ptr<nn::Conv2d> make_conv(int64_t in, int64_t out, int64_t k, int64_t stride, Layout l,
                                      DType dtype, uint32_t seed) {
  auto c = nn::make<nn::Conv2d>(
      in, out, k,
      nn::Conv2dOptions{.stride = stride, .padding = k / 2, .bias = false, .layout = l});
  c->weight().set_value(random_tensor(c->weight().shape(), DType::f32, seed, -0.4f, 0.4f));
  return c;
}

// A torchvision BasicBlock with the same weights for equal arguments: conv - BN - ReLU - conv -
// BN, with a 1x1 conv + BN downsample when the shape changes. Fused: the Residual's tail ReLU;
// else Sequential{"" : Residual, "relu" : ReLU}.
std::unique_ptr<nn::Sequential> make_block(int64_t in, int64_t out, int64_t stride, Layout l,
                                           DType dtype, bool fused) {
  auto body = nn::make<nn::Sequential>();
  body->add("conv1", make_conv(in, out, 3, stride, l, dtype, 30));
  body->add("bn1", make_bn(out, l, 31));
  body->add("relu", nn::make<nn::ReLU>());
  body->add("conv2", make_conv(out, out, 3, 1, l, dtype, 33));
  body->add("bn2", make_bn(out, l, 34));
  std::unique_ptr<nn::Sequential> down;
  if (stride != 1 || in != out) {
    down = nn::make<nn::Sequential>();
    down->add(make_conv(in, out, 1, stride, l, dtype, 36));
    down->add(make_bn(out, l, 37));
  }
  auto block = nn::make<nn::Sequential>();
  auto& r = block->add(
      "", nn::make<nn::Residual>(std::move(body), std::move(down),
                                 nn::ResidualNames{.body = "", .shortcut = "downsample"}));
  if (fused) {
    r.set_tail_relu(true);
  } else {
    block->add("relu", nn::make<nn::ReLU>());
  }
  return block;
}

std::vector<std::string> names(nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, p] : m.named_parameters()) out.push_back(n);
  m.visit_buffers("", [&](const std::string& n, Tensor&) { out.push_back(n); });
  return out;
}

// `steps` forward / backward pairs through both blocks: identical bits everywhere.
void expect_same_bits(nn::Module& fused, nn::Module& unfused, const Shape& in_shape, DType dtype,
                      int steps, const std::string& what) {
  for (int step = 0; step < steps; ++step) {
    const Tensor x = random_tensor(in_shape, dtype, 10 + step, -2.0f, 3.0f);
    const Tensor y_f = fused.forward(x);
    const Tensor y_u = unfused.forward(x);
    ASSERT_TRUE(bit_identical(y_f, y_u)) << what << " step " << step << ": y";
    EXPECT_TRUE(partly_zero(y_f)) << what << ": the tail ReLU";
    const Tensor dy = random_tensor(y_f.shape(), dtype, 20 + step);
    const Tensor dx_f = fused.backward(dy);
    const Tensor dx_u = unfused.backward(dy);
    ASSERT_TRUE(bit_identical(dx_f, dx_u)) << what << " step " << step << ": dx";
  }
  expect_same_grads_and_buffers(fused, unfused, what, /*same_names=*/true);
}

TEST(ResidualTail, SameBitsAsResidualThenReLU) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      for (const bool training : {true, false}) {
        for (const bool downsample : {false, true}) {
          const std::string what =
              fmt::format("{} {}{}{}", dtype_name(dtype), ops::layout_name(l),
                          training ? " train" : " eval", downsample ? " downsample" : "");
          const int64_t in = downsample ? 4 : 6, stride = downsample ? 2 : 1;
          auto fused = make_block(in, 6, stride, l, dtype, true);
          auto unfused = make_block(in, 6, stride, l, dtype, false);
          EXPECT_EQ(names(*fused), names(*unfused)) << what;
          fused->set_training(training);
          unfused->set_training(training);
          expect_same_bits(*fused, *unfused, shape4({3, in, 6, 6}, l), dtype, 2, what);
        }
      }
    }
  }
}

TEST(ResidualTail, NamesAndDescribe) {
  auto fused = make_block(4, 6, 2, Layout::nhwc, DType::f32, true);
  auto unfused = make_block(4, 6, 2, Layout::nhwc, DType::f32, false);
  const std::vector<std::string> n = names(*fused);
  EXPECT_EQ(n, names(*unfused));
  EXPECT_NE(std::find(n.begin(), n.end(), "bn2.running_var"), n.end());
  EXPECT_NE(std::find(n.begin(), n.end(), "downsample.1.weight"), n.end());
  const std::string d = fused->describe();
  EXPECT_NE(d.find("+residual, relu)"), std::string::npos) << d;
  EXPECT_EQ(d.find("ReLU, ReLU"), std::string::npos) << d;
  auto& r = dynamic_cast<nn::Residual&>((*fused)[0]);
  EXPECT_TRUE(r.tail_relu());
  r.set_tail_relu(false);  // back to a plain Residual (the caller re-adds the ReLU)
  EXPECT_FALSE(r.tail_relu());
  EXPECT_EQ(fused->describe().find("+residual"), std::string::npos);
}

// A Checkpoint around the whole fused block recomputes it (shortcut, residual and all): the same
// bits as the plain unfused block. Around the tail BatchNorm2d alone, the recomputation would run
// without the residual: refused.
TEST(ResidualTail, CheckpointTheWholeBlockButNotTheTailAlone) {
  const Layout l = Layout::nhwc;
  nn::Checkpoint fused(make_block(4, 6, 2, l, DType::f32, true));
  auto unfused = make_block(4, 6, 2, l, DType::f32, false);
  expect_same_bits(fused, *unfused, shape4({3, 4, 6, 6}, l), DType::f32, 2, "checkpointed");

  auto body = nn::make<nn::Sequential>();
  body->add("conv1", make_conv(6, 6, 3, 1, l, DType::f32, 30));
  body->add("bn1", make_bn(6, l, 31));
  nn::Sequential* const body_ptr = body.get();
  nn::Residual block(std::move(body));
  block.set_tail_relu(true);
  body_ptr->wrap_child(body_ptr->size() - 1, [](std::unique_ptr<nn::Module> m) {
    return std::make_unique<nn::Checkpoint>(std::move(m));
  });
  const Tensor x = random_tensor(shape4({2, 6, 5, 5}, l), DType::f32, 5);
  const Tensor y = block.forward(x);
  EXPECT_TRUE(throws_error_with(
      [&] { block.backward(y); },
      {"residual tail mode without a residual", "checkpoint the whole residual block"}));
}

TEST(ResidualTail, RefusedBodies) {
  nn::Residual linear_body(nn::make<nn::Linear>(4, 4));
  EXPECT_TRUE(throws_error_with([&] { linear_body.set_tail_relu(true); },
                                {"set_tail_relu", "ending in an nn::BatchNorm2d"}));
  auto body = nn::make<nn::Sequential>();
  auto& bn = body->add(make_bn(4, Layout::nchw, 1));
  bn.set_activation(nn::Activation::relu);
  nn::Residual relu_tail(std::move(body));
  EXPECT_TRUE(throws_error_with([&] { relu_tail.set_tail_relu(true); },
                                {"set_tail_relu", "already has a fused activation"}));
}

}  // namespace
}  // namespace stoker::test
