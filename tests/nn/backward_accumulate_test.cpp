// Module::backward_accumulate: the input gradient added into a tensor the caller hands over late.
// Conv2d adds it in its backward-data pass (the bits of backward + ops::add on the CPU), other
// modules through the default (backward, then add), Sequential through its first child; a
// wrong target is refused naming it. nn::Residual uses it so that a block's input gradient
// needs no separate add: with the fused tail and with a downsample shortcut no `add` op runs in
// the block's backward, and the shortcut's ops keep their own module path.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <string>
#include <utility>
#include <vector>

#include "ops/conv_test_util.h"
#include "stoker/core/op_listener.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

// backward_accumulate(dy, target) against backward(dy) + ops::add on a twin module: the same
// bits, in the target's own storage, with `target` called once.
template <typename Make>
void expect_accumulate_is_backward_plus_add(Make make, const Shape& x_shape, DType dtype,
                                            const std::string& what) {
  auto a = make();
  auto b = make();
  const Tensor x = random_tensor(x_shape, dtype, 3);
  const Tensor ya = a->forward(x);
  (void)b->forward(x);
  const Tensor dy = random_tensor(ya.shape(), dtype, 4);
  const Tensor acc0 = random_tensor(x_shape, dtype, 5);
  const Tensor want = Tensor::empty(x_shape, dtype);
  ops::add(want, acc0, b->backward(dy));
  const Tensor acc = acc0.clone();
  int calls = 0;
  const Tensor got = a->backward_accumulate(dy, [&] {
    ++calls;
    return acc;
  });
  EXPECT_EQ(calls, 1) << what;
  EXPECT_TRUE(got.same_storage(acc)) << what << ": the sum is not in the target";
  EXPECT_TRUE(bit_identical(got, want)) << what;
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(bit_identical(pa[i].second->grad(), pb[i].second->grad()))
        << what << ": grad of " << pa[i].first;
}

TEST(BackwardAccumulate, ConvLinearAndSequentialGiveBackwardPlusAdd) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      const std::string what = fmt::format("{} {}", dtype_name(dtype), ops::layout_name(l));
      const auto conv = [&] {
        nn::manual_seed(7);
        return nn::make<nn::Conv2d>(
            4, 6, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .bias = true, .layout = l});
      };
      expect_accumulate_is_backward_plus_add(conv, shape4({2, 4, 9, 9}, l), dtype,
                                             "Conv2d " + what);
      const auto seq = [&] {
        nn::manual_seed(8);
        auto s = nn::make<nn::Sequential>();
        s->add("conv",
               nn::make<nn::Conv2d>(4, 5, 1, nn::Conv2dOptions{.bias = false, .layout = l}));
        s->add("bn", nn::make<nn::BatchNorm2d>(5, 1e-5f, 0.1f, l));
        s->add("relu", nn::make<nn::ReLU>());
        return s;
      };
      expect_accumulate_is_backward_plus_add(seq, shape4({2, 4, 5, 5}, l), dtype,
                                             "Sequential " + what);
    }
  }
  const auto linear = [] {
    nn::manual_seed(9);
    return nn::make<nn::Linear>(8, 3);
  };
  expect_accumulate_is_backward_plus_add(linear, Shape{5, 8}, DType::f32, "Linear (default)");
}

TEST(BackwardAccumulate, AWrongTargetIsRefusedNamingIt) {
  auto conv = nn::make<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.padding = 1});
  const Tensor x = random_tensor({2, 3, 5, 5}, DType::f32, 1);
  const Tensor dy = random_tensor(conv->forward(x).shape(), DType::f32, 2);
  EXPECT_TRUE(throws_error_with(
      [&] {
        conv->backward_accumulate(dy, [] { return Tensor::zeros({2, 3, 5, 4}, DType::f32); });
      },
      {"backward_accumulate's target is f32[2, 3, 5, 4]", "expected f32[2, 3, 5, 5]"}));
  auto lin = nn::make<nn::Linear>(4, 2);
  (void)lin->forward(random_tensor({3, 4}, DType::f32, 3));
  EXPECT_TRUE(throws_error_with(
      [&] {
        lin->backward_accumulate(random_tensor({3, 2}, DType::f32, 4), [] {
          return Tensor::zeros({3, 4}, DType::bf16);
        });
      },
      {"backward_accumulate's target is bf16[3, 4]"}));
}

// A BasicBlock (conv - BN - ReLU - conv - BN, 1x1 conv + BN downsample), fused tail or not.
std::unique_ptr<nn::Sequential> block(bool downsample, bool fused) {
  nn::manual_seed(11);
  const int64_t in = downsample ? 4 : 6, stride = downsample ? 2 : 1;
  auto body = nn::make<nn::Sequential>();
  body->add("conv1",
            nn::make<nn::Conv2d>(in, 6, 3,
                                 nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false}));
  body->add("bn1", nn::make<nn::BatchNorm2d>(6));
  body->add("relu", nn::make<nn::ReLU>());
  body->add("conv2", nn::make<nn::Conv2d>(6, 6, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  body->add("bn2", nn::make<nn::BatchNorm2d>(6));
  std::unique_ptr<nn::Sequential> down;
  if (downsample) {
    down = nn::make<nn::Sequential>();
    down->add(nn::make<nn::Conv2d>(in, 6, 1, nn::Conv2dOptions{.stride = 2, .bias = false}));
    down->add(nn::make<nn::BatchNorm2d>(6));
  }
  auto b = nn::make<nn::Sequential>();
  auto& r =
      b->add("", nn::make<nn::Residual>(std::move(body), std::move(down),
                                        nn::ResidualNames{.body = "", .shortcut = "downsample"}));
  if (fused)
    r.set_tail_relu(true);
  else
    b->add("relu", nn::make<nn::ReLU>());
  return b;
}

// The outermost ops of one backward (an op called inside another, as the CPU's accumulating
// convolution calls add, is part of it), with their module paths.
std::vector<std::pair<std::string, std::string>> backward_ops(nn::Module& m, const Tensor& x) {
  struct Recorder : core::OpListener {
    std::vector<std::pair<std::string, std::string>> seen;
    int depth = 0;
    void op_begin(const char* name, Device, const core::OpCost&) override {
      if (depth++ == 0) seen.emplace_back(name, core::module_path());
    }
    void op_end() override { --depth; }
  } rec;
  const Tensor y = m.forward(x);
  const Tensor dy = random_tensor(y.shape(), DType::f32, 21);
  core::set_op_listener(&rec);
  (void)m.backward(dy);
  core::set_op_listener(nullptr);
  return rec.seen;
}

TEST(BackwardAccumulate, ResidualBlocksAddTheirInputGradientInTheConvolution) {
  for (const bool downsample : {false, true}) {
    for (const bool fused : {false, true}) {
      const std::string what =
          std::string(downsample ? "downsample" : "identity") + (fused ? ", fused tail" : "");
      auto m = block(downsample, fused);
      const Tensor x = random_tensor({2, downsample ? 4 : 6, 6, 6}, DType::f32, 20);
      const auto ops = backward_ops(*m, x);
      int adds = 0, shortcut_convs = 0;
      for (const auto& [name, path] : ops) {
        if (name == "add") ++adds;
        EXPECT_EQ(path.rfind("conv1.downsample", 0), std::string::npos)
            << what << ": " << name << " ran under " << path;
        if (name == "conv2d_backward_data" && path == "downsample.0") ++shortcut_convs;
      }
      // Only the unfused identity block keeps its add (the shortcut's gradient is the caller's).
      EXPECT_EQ(adds, !downsample && !fused ? 1 : 0) << what;
      EXPECT_EQ(shortcut_convs, downsample ? 1 : 0) << what;
    }
  }
}

}  // namespace
}  // namespace stoker::test
