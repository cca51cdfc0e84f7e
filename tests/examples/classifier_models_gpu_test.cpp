// examples/classifier's ResNet-18 on the GPU against the CPU reference: one training-mode
// forward + cross-entropy + backward from the same initialization, fp32 (TF32 off), in NCHW and
// NHWC: logits, loss and every parameter gradient agree; then bf16 NHWC Trainer steps on one
// batch lower the loss (the benchmark's configuration, at a small size), and the same steps
// captured as a CUDA graph (TrainerOptions::cuda_graph) give the eager steps' bits with SGD and
// LARS under a schedule, with and without the fused batch-norm tails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
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

struct GraphRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;
  size_t nodes = 0;
};

// Six bf16 NHWC steps of ResNet-18 (10 classes, 64 px, batch 8) on two alternating batches, with
// the schedule's rate read on the device when `graph` (2 eager warm-up steps, then replays).
GraphRun train_resnet18(bool graph, bool lars, bool fused) {
  const Device gpu = stoker::test::gpu();
  nn::manual_seed(23);
  auto m = resnet18(
      {.num_classes = 10, .layout = Layout::nhwc, .fuse_bn_relu = fused, .fuse_block_tail = fused});
  m->to(gpu);
  std::unique_ptr<stoker::optim::Optimizer> opt;
  if (lars)
    opt = std::make_unique<stoker::optim::LARS>(m->named_parameters(),
                                                stoker::optim::LarsOptions{.eta = 0.02f});
  else
    opt = std::make_unique<stoker::optim::SGD>(
        m->named_parameters(),
        stoker::optim::SgdOptions{.momentum = 0.9f, .weight_decay = 5e-5f, .nesterov = true});
  nn::CrossEntropyLoss loss;
  stoker::train::TrainerOptions o{.precision = stoker::amp::Precision::bf16,
                                  .schedule = stoker::optim::polynomial_with_warmup(0.2f, 2, 6),
                                  .progress_bar = false,
                                  .quiet = true};
  o.cuda_graph = graph;
  stoker::train::Trainer t(*m, loss, *opt, o);
  std::vector<stoker::data::Batch> batches(2);
  for (int k = 0; k < 2; ++k) {
    stoker::data::Batch& b = batches[static_cast<size_t>(k)];
    b.input = Tensor::empty({8, 64, 64, 3}, DType::bf16, gpu);
    stoker::ops::random_normal(b.input, 0.0f, 1.0f, 30 + k, 0);
    std::vector<int64_t> labels;
    for (int i = 0; i < 8; ++i) labels.push_back((i * 3 + k) % 10);
    b.target = Tensor::from_vector(labels, {8}, gpu);
    b.size = 8;
  }
  GraphRun r;
  for (int step = 0; step < 6; ++step) {
    const std::vector<stoker::data::Batch> micro{batches[static_cast<size_t>(step % 2)]};
    t.train_step(micro);
    nn::NoSaveScope no_save;
    r.losses.push_back(loss.forward(m->forward(micro[0].input), micro[0].target).item());
  }
  for (nn::Parameter* p : m->parameters()) r.weights.push_back(p->value().to_floats());
  r.nodes = t.cuda_graph_nodes();
  return r;
}

TEST(ClassifierGpuTrainTest, ResNet18StepsAsACudaGraphGiveTheEagerBits) {
  STOKER_REQUIRE_GPU();
  for (const bool lars : {false, true})
    for (const bool fused : {false, true}) {
      SCOPED_TRACE(std::string(lars ? "LARS" : "SGD") + (fused ? ", fused BN" : ""));
      const GraphRun eager = train_resnet18(false, lars, fused);
      const GraphRun graph = train_resnet18(true, lars, fused);
      EXPECT_EQ(eager.nodes, 0u);
      EXPECT_GT(graph.nodes, 100u) << "no step was captured";
      EXPECT_EQ(graph.losses, eager.losses);
      EXPECT_TRUE(graph.weights == eager.weights) << "the weights differ";
      EXPECT_NE(eager.losses[2], eager.losses[0]) << "the steps changed nothing";  // one batch
    }
}

}  // namespace
}  // namespace classifier
