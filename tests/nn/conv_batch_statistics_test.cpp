// Conv2d::feed_batch_statistics: the convolution hands its output's sums to the BatchNorm2d after
// it, which normalizes from them. A ResNet-style block trained with it gives the plain block's
// outputs, gradients and running statistics to the one-pass form's rounding (f32 on the CPU),
// with the fused ReLU and tail too; the batch norm really takes the sums (an op listener sees
// batchnorm_forward_train_from_sums and conv2d_forward_stats, no plain batch-norm forward);
// evaluation runs the plain path; misuse is refused naming the module and the fix.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include "ops/conv_test_util.h"
#include "stoker/core/op_listener.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "test_util.h"

namespace stoker::test {
namespace {

// conv - BN(ReLU) - conv - BN + downsample conv - BN, fused tail; `feed`: every conv feeds its BN.
std::unique_ptr<nn::Sequential> block(bool feed, ops::Layout l) {
  nn::manual_seed(5);
  const auto opts = [&](int64_t stride, int64_t pad) {
    return nn::Conv2dOptions{.stride = stride, .padding = pad, .bias = false, .layout = l};
  };
  auto body = nn::make<nn::Sequential>();
  auto& c1 = body->add("conv1", nn::make<nn::Conv2d>(4, 6, 3, opts(2, 1)));
  auto& b1 = body->add("bn1", nn::make<nn::BatchNorm2d>(6, 1e-5f, 0.1f, l));
  b1.set_activation(nn::Activation::relu);
  auto& c2 = body->add("conv2", nn::make<nn::Conv2d>(6, 6, 3, opts(1, 1)));
  auto& b2 = body->add("bn2", nn::make<nn::BatchNorm2d>(6, 1e-5f, 0.1f, l));
  auto down = nn::make<nn::Sequential>();
  auto& c3 = down->add(nn::make<nn::Conv2d>(4, 6, 1, opts(2, 0)));
  auto& b3 = down->add(nn::make<nn::BatchNorm2d>(6, 1e-5f, 0.1f, l));
  if (feed) {
    c1.feed_batch_statistics(&b1);
    c2.feed_batch_statistics(&b2);
    c3.feed_batch_statistics(&b3);
  }
  auto b = nn::make<nn::Sequential>();
  b->add("", nn::make<nn::Residual>(std::move(body), std::move(down),
                                    nn::ResidualNames{.body = "", .shortcut = "downsample"}))
      .set_tail_relu(true);
  return b;
}

// How many times each op ran at the outermost level during `f`.
template <typename F>
std::map<std::string, int> ops_run(F&& f) {
  struct Counter : core::OpListener {
    std::map<std::string, int> seen;
    int depth = 0;
    void op_begin(const char* name, Device, const core::OpCost&) override {
      if (depth++ == 0) ++seen[name];
    }
    void op_end() override { --depth; }
  } counter;
  core::set_op_listener(&counter);
  f();
  core::set_op_listener(nullptr);
  return counter.seen;
}

TEST(ConvBatchStatistics, ABlockFedByItsConvolutionsTrainsLikeThePlainOne) {
  for (const ops::Layout l : {ops::Layout::nchw, ops::Layout::nhwc}) {
    const std::string what(ops::layout_name(l));
    auto plain = block(false, l), fed = block(true, l);
    for (int step = 0; step < 2; ++step) {
      const Tensor x = random_tensor(ops::shape4({.n = 3, .c = 4, .h = 8, .w = 8}, l), DType::f32,
                                     30 + static_cast<uint32_t>(step));
      const Tensor yp = plain->forward(x);
      Tensor yf;
      const auto seen = ops_run([&] { yf = fed->forward(x); });
      EXPECT_EQ(seen.count("batchnorm_forward_train"), 0u) << what;
      EXPECT_EQ(seen.at("batchnorm_forward_train_from_sums"), 3) << what;
      EXPECT_EQ(seen.at("conv2d_forward_stats"), 3) << what;
      EXPECT_TRUE(all_close(yf, yp, 1e-5, 1e-5)) << what << " step " << step;
      const Tensor dy = random_tensor(yp.shape(), DType::f32, 40 + static_cast<uint32_t>(step));
      EXPECT_TRUE(all_close(fed->backward(dy), plain->backward(dy), 1e-4, 1e-5)) << what;
    }
    const auto pp = plain->named_parameters(), pf = fed->named_parameters();
    ASSERT_EQ(pp.size(), pf.size());
    for (size_t i = 0; i < pp.size(); ++i)
      EXPECT_TRUE(all_close(pf[i].second->grad(), pp[i].second->grad(), 1e-4, 1e-5))
          << what << ": grad of " << pp[i].first;
    std::vector<Tensor> bp, bf;
    plain->visit_buffers("", [&](const std::string&, Tensor& t) { bp.push_back(t); });
    fed->visit_buffers("", [&](const std::string&, Tensor& t) { bf.push_back(t); });
    ASSERT_EQ(bp.size(), bf.size());
    for (size_t i = 0; i < bp.size(); ++i) EXPECT_TRUE(all_close(bf[i], bp[i], 1e-5, 1e-6)) << what;
    // Evaluation: the running statistics, no sums computed.
    fed->set_training(false);
    plain->set_training(false);
    const Tensor x =
        random_tensor(ops::shape4({.n = 2, .c = 4, .h = 8, .w = 8}, l), DType::f32, 50);
    Tensor ye;
    const auto seen = ops_run([&] { ye = fed->forward(x); });
    EXPECT_EQ(seen.count("conv2d_forward_stats"), 0u) << what;
    EXPECT_TRUE(all_close(ye, plain->forward(x), 1e-5, 1e-5)) << what;
  }
}

TEST(ConvBatchStatistics, MisuseIsRefusedNamingTheFix) {
  // A convolution with bias: its sums would miss the bias.
  nn::Conv2d with_bias(3, 4, 3);
  nn::BatchNorm2d bn(4);
  EXPECT_TRUE(throws_error_with([&] { with_bias.feed_batch_statistics(&bn); },
                                {"feed_batch_statistics", "bias = false"}));
  // Something between the convolution and its batch norm: the sums are not of bn's input.
  nn::Conv2d conv(3, 4, 3, nn::Conv2dOptions{.padding = 1, .bias = false});
  nn::ReLU relu;
  conv.feed_batch_statistics(&bn);
  const Tensor x = random_tensor({2, 3, 5, 5}, DType::f32, 60);
  const Tensor between = relu.forward(conv.forward(x));
  EXPECT_TRUE(throws_error_with(
      [&] { bn.forward(between); },
      {"not the tensor its batch sums were computed over", "feed_batch_statistics"}));
  // Turned off again: the plain path.
  conv.feed_batch_statistics(nullptr);
  EXPECT_NO_THROW(bn.forward(relu.forward(conv.forward(x))));
}

}  // namespace
}  // namespace stoker::test
