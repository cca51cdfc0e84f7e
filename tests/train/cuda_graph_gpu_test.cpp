// TrainerOptions::cuda_graph on the GPU: the step captured once and replayed must train exactly
// as the eager Trainer does — with a learning-rate schedule (read on the device), clipping,
// mixed precision and gradient accumulation, through fit() with a last partial batch (run
// eagerly) and an evaluation between epochs. (The GPT example's fused model replayed:
// tests/examples/gpt_model_gpu_test.cpp.)
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace stoker::train {
namespace {

const Device kGpu = Device::cuda(0);

std::unique_ptr<nn::Sequential> mlp() {
  nn::manual_seed(5);
  auto m = std::make_unique<nn::Sequential>(nn::make<nn::Linear>(32, 128), nn::make<nn::GELU>(),
                                            nn::make<nn::Linear>(128, 10));
  m->to(kGpu);
  return m;
}

std::vector<std::vector<float>> weights(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (nn::Parameter* p : m.parameters()) out.push_back(p->value().to_floats());
  return out;
}

struct FitRun {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses;
  double eval_loss = 0;
  size_t nodes = 0;
};

// fit() over 2 epochs of 100 samples in batches of 16 (the last one of 4: eager), accumulation
// 2, bf16, cosine schedule, clipping, an evaluation per epoch.
FitRun fit_mlp(bool graph) {
  auto model = mlp();
  Tensor x = Tensor::empty({100, 32}, DType::f32), y = Tensor::empty({100}, DType::i64);
  ops::random_normal(x, 0.0f, 1.0f, 1, 0);
  std::vector<int64_t> labels;
  for (int i = 0; i < 100; ++i) labels.push_back(i * 7 % 10);
  y = Tensor::from_vector(labels, {100});
  data::TensorBatches train(x, y, {.batch_size = 16, .shuffle = true, .seed = 3, .device = kGpu});
  data::TensorBatches val(x, y, {.batch_size = 50, .shuffle = false, .device = kGpu});
  optim::AdamW opt(model->named_parameters(), {.lr = 3e-3f, .weight_decay = 0.05f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.precision = amp::Precision::bf16,
                   .grad_accum_steps = 2,
                   .clip_grad_norm = 0.5f,
                   .schedule = optim::cosine_with_warmup(3e-3f, 2, 8),
                   .log_interval = 1,
                   .progress_bar = false,
                   .quiet = true};
  o.cuda_graph = graph;
  Trainer trainer(*model, loss, opt, o);
  FitRun r;
  trainer.add_log_callback([&](const StepStats& s) { r.losses.push_back(s.loss); });
  const FitResult f = trainer.fit(train, 2, &val);
  r.weights = weights(*model);
  r.eval_loss = f.evaluations.empty() ? -1 : f.evaluations.back().loss;
  r.nodes = trainer.cuda_graph_nodes();
  return r;
}

TEST(CudaGraphGpu, FitReplaysTheStepWithTheEagerResults) {
  STOKER_REQUIRE_GPU();
  const FitRun eager = fit_mlp(false);
  const FitRun graph = fit_mlp(true);
  EXPECT_EQ(eager.nodes, 0u);
  EXPECT_GT(graph.nodes, 10u) << "no step was captured";
  ASSERT_EQ(graph.losses.size(), eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_EQ(graph.losses[i], eager.losses[i]) << "step " << i + 1;
  EXPECT_EQ(graph.weights, eager.weights);
  EXPECT_EQ(graph.eval_loss, eager.eval_loss);
}

// A module that keeps a tensor it allocated in the step (here: a copy of its output, held until
// the next forward) would make the graph's second launch fail with CUDA's bare "invalid
// argument". The Trainer runs the captured step once, says why the graph cannot replay, and goes
// on eagerly: the run trains exactly as the eager one, and nothing is lost.
class KeepsItsOutput : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    kept_ = x.clone();
    return x;
  }
  Tensor backward(const Tensor& dy) override { return dy; }
  std::string describe() const override { return "KeepsItsOutput"; }

 private:
  Tensor kept_;
};

struct KeptRun {
  std::vector<std::vector<float>> weights;
  size_t nodes = 0;
  std::string err;
};

KeptRun train_keeping(bool graph) {
  nn::manual_seed(5);
  nn::Sequential model(nn::make<nn::Linear>(8, 4), nn::make<KeepsItsOutput>());
  model.to(kGpu);
  optim::SGD opt(model.named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.progress_bar = false, .quiet = true};
  o.cuda_graph = graph;
  Trainer trainer(model, loss, opt, o);
  data::Batch b;
  b.input = Tensor::empty({6, 8}, DType::f32, kGpu);
  ops::random_normal(b.input, 0.0f, 1.0f, 2, 0);
  b.target = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1}, {6}, kGpu);
  b.size = 6;
  const std::vector<data::Batch> micro{b};
  KeptRun r;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 8; ++i) trainer.train_step(micro);  // warm-up, capture, then eager
  r.err = ::testing::internal::GetCapturedStderr();
  r.weights = weights(model);
  r.nodes = trainer.cuda_graph_nodes();
  return r;
}

TEST(CudaGraphGpu, AStepThatKeepsWhatItAllocatedRunsOnceThenEagerly) {
  STOKER_REQUIRE_GPU();
  const KeptRun eager = train_keeping(false);
  const KeptRun graph = train_keeping(true);
  EXPECT_EQ(graph.weights, eager.weights) << "the graph-then-eager run trained differently";
  EXPECT_NE(eager.weights, KeptRun{}.weights);
  EXPECT_EQ(graph.nodes, 0u) << "the graph was kept although it cannot replay";
  for (const char* part : {"TrainerOptions::cuda_graph", "1 tensor (", "alive after it ends",
                           "cannot be replayed", "goes on without the graph"})
    EXPECT_NE(graph.err.find(part), std::string::npos) << part << " not in: " << graph.err;
  EXPECT_EQ(graph.err.find("freeing device memory failed"), std::string::npos) << graph.err;
  EXPECT_EQ(eager.err, "");
}

}  // namespace
}  // namespace stoker::train
