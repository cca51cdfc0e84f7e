// examples/classifier's ResNet-18 on the GPU against the CPU reference: one training-mode
// forward + cross-entropy + backward from the same initialization, fp32 (TF32 off), in NCHW and
// NHWC: logits, loss and every parameter gradient agree; then bf16 NHWC Trainer steps on one
// batch lower the loss (the benchmark's configuration, at a small size).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "resnet.h"
#include "stoker/stoker.h"
#include "test_util.h"

namespace classifier {
namespace {

namespace nn = stoker::nn;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::ops::Layout;

struct Pass {
  double loss = 0;
  std::vector<float> logits;
  std::map<std::string, std::vector<float>> grads;
};

Pass run_pass(Layout layout, Device device, const Tensor& x_nchw, const Tensor& y) {
  nn::manual_seed(21);
  auto m = resnet18({.num_classes = 10, .layout = layout});
  m->to(device);
  Tensor x = x_nchw;
  if (layout == Layout::nhwc) {
    const auto d = stoker::ops::dims4(x_nchw.shape(), Layout::nchw);
    x = Tensor::empty(stoker::ops::shape4(d, Layout::nhwc), DType::f32);
    stoker::ops::convert_layout(x, x_nchw, Layout::nchw, Layout::nhwc);
  }
  nn::CrossEntropyLoss loss;
  const Tensor logits = m->forward(x.to(device));
  Pass r;
  r.loss = loss.forward(logits, y.to(device)).item();
  r.logits = logits.to_floats();
  m->backward(loss.backward());
  for (const auto& [n, p] : m->named_parameters()) r.grads[n] = p->grad().to_floats();
  return r;
}

class ClassifierGpuTest : public ::testing::TestWithParam<Layout> {};

TEST_P(ClassifierGpuTest, ResNet18ForwardBackwardMatchesTheCpu) {
  STOKER_REQUIRE_GPU();
  stoker::ops::set_allow_tf32(false);
  const Layout layout = GetParam();
  const Tensor x = stoker::test::random_tensor({4, 3, 64, 64}, DType::f32, 9, -2.0f, 2.0f);
  const Tensor y = Tensor::from_vector<int64_t>({1, 7, 3, 9}, {4});
  const Pass cpu = run_pass(layout, Device::cpu(), x, y);
  const Pass gpu = run_pass(layout, stoker::test::gpu(), x, y);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-4 * std::max(1.0, std::abs(cpu.loss)));
  ASSERT_EQ(gpu.logits.size(), cpu.logits.size());
  for (size_t i = 0; i < cpu.logits.size(); ++i)
    EXPECT_NEAR(gpu.logits[i], cpu.logits[i], 1e-3f) << "logit " << i;
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (const auto& [name, gc] : cpu.grads) {
    const std::vector<float>& gg = gpu.grads.at(name);
    ASSERT_EQ(gg.size(), gc.size()) << name;
    float scale = 0;
    for (float v : gc) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0.0f) << name;
    for (size_t i = 0; i < gc.size(); ++i)
      ASSERT_NEAR(gg[i], gc[i], 2e-3f * scale + 1e-6f) << name << "[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClassifierGpuTest, ::testing::Values(Layout::nchw, Layout::nhwc),
                         [](const auto& info) {
                           return std::string(info.param == Layout::nchw ? "nchw" : "nhwc");
                         });

TEST(ClassifierGpuTrainTest, ResNet18Bf16NhwcStepsLowerTheLoss) {
  STOKER_REQUIRE_GPU();
  const Device gpu = stoker::test::gpu();
  nn::manual_seed(22);
  auto m = resnet18({.num_classes = 10, .layout = Layout::nhwc, .zero_init_residual = true});
  m->to(gpu);
  stoker::optim::SGD opt(m->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  nn::CrossEntropyLoss loss;
  stoker::train::Trainer t(
      *m, loss, opt,
      {.precision = stoker::amp::Precision::bf16, .progress_bar = false, .quiet = true});
  stoker::data::Batch b;
  b.input = Tensor::empty({16, 64, 64, 3}, DType::bf16, gpu);
  stoker::ops::random_normal(b.input, 0.0f, 1.0f, 3, 0);
  std::vector<int64_t> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 10);
  b.target = Tensor::from_vector(labels, {16}, gpu);
  b.size = 16;
  // The loss on the batch in training mode (batch statistics, as the steps see it).
  const auto batch_loss = [&] {
    nn::NoSaveScope no_save;
    return loss.forward(m->forward(b.input), b.target).item();
  };
  const double before = batch_loss();
  const std::vector<stoker::data::Batch> micro{b};
  for (int i = 0; i < 8; ++i) t.train_step(micro);
  const double after = batch_loss();
  EXPECT_TRUE(std::isfinite(after));
  EXPECT_LT(after, before);
}

}  // namespace
}  // namespace classifier
