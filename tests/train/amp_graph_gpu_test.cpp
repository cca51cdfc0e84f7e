// A whole fp16 training step — forward, backward, loss scaling, unscale + overflow check,
// gradient clipping, AdamW, scale update — captured into a CUDA graph. Capture runs in global
// mode, where any host synchronization fails it: this is the proof that a step never waits for
// the host. The captured step, launched, must do what the same step does eagerly, including
// skipping an overflowed step on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/graph.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace nn = stoker::nn;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::amp::Precision;
using stoker::core::CudaGraph;
using stoker::train::Trainer;

namespace {

const Device kGpu = Device::cuda(0);

struct Setup {
  std::unique_ptr<nn::Sequential> model;
  nn::MSELoss loss;
  std::unique_ptr<stoker::optim::AdamW> opt;
  std::unique_ptr<Trainer> trainer;
  stoker::data::Batch batch;
};

std::unique_ptr<Setup> make_setup(float init_scale) {
  auto s = std::make_unique<Setup>();
  nn::manual_seed(7);
  s->model = std::make_unique<nn::Sequential>(nn::make<nn::Linear>(64, 256), nn::make<nn::GELU>(),
                                              nn::make<nn::Linear>(256, 256), nn::make<nn::ReLU>(),
                                              nn::make<nn::Linear>(256, 16));
  s->model->to(kGpu);
  s->opt = std::make_unique<stoker::optim::AdamW>(s->model->named_parameters(),
                                                  stoker::optim::AdamWOptions{.lr = 1e-3f});
  s->trainer = std::make_unique<Trainer>(
      *s->model, s->loss, *s->opt,
      stoker::train::TrainerOptions{.precision = Precision::fp16,
                                    .scaler = {.init_scale = init_scale, .growth_interval = 1},
                                    .clip_grad_norm = 0.5f,
                                    .progress_bar = false,
                                    .quiet = true});
  Tensor x = Tensor::empty({128, 64}, DType::f32, kGpu);
  Tensor y = Tensor::empty({128, 16}, DType::f32, kGpu);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 11, 0);
  stoker::ops::random_normal(y, 0.0f, 1.0f, 12, 0);
  s->batch = {.input = x, .target = y, .size = 128};
  return s;
}

std::vector<std::vector<float>> weights(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (nn::Parameter* p : m.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

// The largest |a - b| / max(1, |b|) over all weights.
double max_rel_diff(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b) {
  double worst = 0.0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(a[t][i]) - b[t][i]) /
                                  std::max(1.0, std::abs(static_cast<double>(b[t][i]))));
  return worst;
}

TEST(AmpGraphGpuTest, FullFp16StepCapturesAndMatchesTheEagerStep) {
  STOKER_REQUIRE_GPU();
  auto graphed = make_setup(65536.0f);
  auto eager = make_setup(65536.0f);
  const std::vector<stoker::data::Batch> batches{graphed->batch};
  // Warm-up step (eager) on both: optimizer state, half weight copies and GEMM plans exist.
  graphed->trainer->train_step(batches);
  eager->trainer->train_step(std::vector<stoker::data::Batch>{eager->batch});
  const auto before = weights(*graphed->model);

  const stoker::Stream stream = stoker::core::compute_stream(kGpu);
  const uint64_t syncs = stoker::core::host_sync_count();
  const CudaGraph graph =
      CudaGraph::capture(stream, [&] { graphed->trainer->train_step(batches); });
  EXPECT_EQ(stoker::core::host_sync_count(), syncs) << "the step synchronized with the host";
  EXPECT_GT(graph.node_count(), 10u);
  graph.launch(stream);
  eager->trainer->train_step(std::vector<stoker::data::Batch>{eager->batch});
  stoker::core::synchronize_device(kGpu);

  const auto g = weights(*graphed->model), e = weights(*eager->model);
  EXPECT_GT(max_rel_diff(g, before), 1e-5) << "the captured step did not update the weights";
  EXPECT_LE(max_rel_diff(g, e), 1e-6) << "captured and eager steps disagree";
  EXPECT_EQ(graphed->trainer->scaler()->scale_value(), eager->trainer->scaler()->scale_value());
  EXPECT_EQ(graphed->opt->applied_steps(), 2);
  EXPECT_EQ(eager->opt->applied_steps(), 2);
}

TEST(AmpGraphGpuTest, CapturedStepSkipsAnOverflowOnTheDevice) {
  STOKER_REQUIRE_GPU();
  // A scale of 2^40 overflows fp16 gradients: the step must be skipped by the device.
  auto s = make_setup(std::ldexp(1.0f, 40));
  const std::vector<stoker::data::Batch> batches{s->batch};
  s->trainer->train_step(batches);  // warm-up: overflows too, halves the scale
  ASSERT_EQ(s->trainer->scaler()->scale_value(), std::ldexp(1.0, 39));
  const auto before = weights(*s->model);
  const stoker::Stream stream = stoker::core::compute_stream(kGpu);
  const CudaGraph graph = CudaGraph::capture(stream, [&] { s->trainer->train_step(batches); });
  graph.launch(stream);
  stoker::core::synchronize_device(kGpu);
  EXPECT_EQ(max_rel_diff(weights(*s->model), before), 0.0) << "an overflowed step changed weights";
  EXPECT_EQ(s->trainer->scaler()->scale_value(), std::ldexp(1.0, 38));
  EXPECT_EQ(s->opt->applied_steps(), 0);
}

TEST(AmpGraphGpuTest, CaptureRejectsAHostSynchronization) {
  STOKER_REQUIRE_GPU();
  Tensor t = Tensor::zeros({4}, DType::f32, kGpu);
  const stoker::Stream stream = stoker::core::compute_stream(kGpu);
  EXPECT_THROW(CudaGraph::capture(stream, [&] { (void)t.item(); }), stoker::Error);
  // The stream is usable afterwards.
  stoker::ops::random_normal(t, 0.0f, 1.0f, 1, 0);
  EXPECT_TRUE(std::isfinite(t.to_vector<float>()[0]));
}

}  // namespace
