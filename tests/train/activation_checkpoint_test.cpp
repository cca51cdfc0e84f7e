// The Trainer's activation-memory options (TrainerOptions::activation_checkpoint_every,
// selective_recompute): training with them ends in bit-identical weights (bf16, dropout,
// gradient accumulation, AdamW), keeps parameter names, lowers the peak memory the log
// reports per epoch, and rejects a model that is not a Sequential.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/layernorm.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace stoker::train {
namespace {

constexpr int64_t kDim = 16, kHidden = 128, kSamples = 256, kBatch = 64;

std::unique_ptr<nn::Sequential> mlp_blocks(int blocks) {
  nn::manual_seed(21);
  auto net = nn::make<nn::Sequential>();
  for (int i = 0; i < blocks; ++i) {
    net->add(nn::make<nn::Residual>(nn::make<nn::Sequential>(
        nn::make<nn::LayerNorm>(kDim), nn::make<nn::Linear>(kDim, kHidden), nn::make<nn::GELU>(),
        nn::make<nn::Dropout>(0.1f), nn::make<nn::Linear>(kHidden, kDim))));
  }
  return net;
}

// Host copies (std::vector, outside stoker's allocator): a run's results must not count in the
// next run's memory.
struct TrainRun {
  std::vector<std::vector<uint8_t>> weights;
  std::vector<double> peak_mib;  // per log line, above the memory in use before the run
  std::vector<std::string> names;
  std::vector<StepStats> log;
  std::string model;
};

TrainRun train(TrainerOptions options) {
  const double base_mib =
      static_cast<double>(core::memory_stats(Device::cpu()).current_bytes) / (1 << 20);
  auto model = mlp_blocks(4);
  optim::AdamW opt(model->named_parameters(), {.lr = 1e-3f, .weight_decay = 0.01f});
  nn::MSELoss loss;
  options.precision = amp::Precision::bf16;
  options.grad_accum_steps = 2;
  options.log_interval = 1;
  options.progress_bar = false;
  options.quiet = true;
  Trainer trainer(*model, loss, opt, options);
  const Tensor x = test::random_tensor({kSamples, kDim}, DType::f32, 1);
  const Tensor y = test::random_tensor({kSamples, kDim}, DType::f32, 2);
  data::TensorBatches batches(x, y, {.batch_size = kBatch, .seed = 3});
  TrainRun r;
  r.log = trainer.fit(batches, 2).log;
  for (auto& [n, p] : model->named_parameters()) {
    r.names.push_back(n);
    r.weights.push_back(test::raw_bytes(p->value()));
  }
  r.model = model->describe();
  for (const StepStats& st : r.log) r.peak_mib.push_back(st.peak_memory_mib - base_mib);
  data::TensorBatches eval(x, y, {.batch_size = kBatch, .shuffle = false});
  EXPECT_GT(trainer.evaluate(eval).loss, 0.0);  // evaluation runs without saving
  return r;
}

TEST(TrainerActivationCheckpointTest, SameWeightsLowerPeak) {
  const TrainRun plain = train({});
  const TrainRun ckpt = train({.activation_checkpoint_every = 1});
  const TrainRun half = train({.activation_checkpoint_every = 2, .selective_recompute = true});
  const TrainRun selective = train({.selective_recompute = true});
  EXPECT_EQ(plain.model.find("Checkpoint"), std::string::npos);
  EXPECT_EQ(ckpt.model.rfind("Sequential(Checkpoint(Residual(", 0), 0u) << ckpt.model;
  ASSERT_EQ(plain.log.size(), 4u);  // 2 epochs x 2 steps of 2 micro-batches
  for (const TrainRun* r : {&ckpt, &half, &selective}) {
    EXPECT_EQ(r->names, plain.names);
    ASSERT_EQ(r->weights.size(), plain.weights.size());
    for (size_t i = 0; i < plain.weights.size(); ++i)
      EXPECT_TRUE(r->weights[i] == plain.weights[i]) << r->model << ": " << plain.names[i];
    ASSERT_EQ(r->log.size(), plain.log.size());
    for (size_t i = 0; i < plain.log.size(); ++i) EXPECT_EQ(r->log[i].loss, plain.log[i].loss);
  }
  // The peak memory of each epoch, from the log (reset at each epoch start, so both epochs
  // report about the same), above the memory in use before the run. Checkpointing keeps each
  // block's input only (not LayerNorm's statistics and the inputs of Linear, GELU and the second
  // Linear); selective recomputation drops the hidden dropout output the second Linear keeps.
  for (size_t i = 0; i < plain.log.size(); ++i) {
    EXPECT_GT(plain.peak_mib[i], 0.0);
    EXPECT_LT(ckpt.peak_mib[i], plain.peak_mib[i]) << i;
    EXPECT_LT(selective.peak_mib[i], plain.peak_mib[i]) << i;
    EXPECT_LT(half.peak_mib[i], selective.peak_mib[i]) << i;
  }
  std::printf(
      "peak MiB per epoch: plain %.3f, selective %.3f, every 2nd + selective %.3f, "
      "every block %.3f\n",
      plain.peak_mib.back(), selective.peak_mib.back(), half.peak_mib.back(), ckpt.peak_mib.back());
}

TEST(TrainerActivationCheckpointTest, NeedsASequential) {
  auto net = nn::make<nn::Residual>(nn::make<nn::Linear>(4, 4));
  optim::SGD opt(net->named_parameters(), {.lr = 0.1f});
  nn::MSELoss loss;
  EXPECT_TRUE(test::throws_error_with(
      [&] { Trainer t(*net, loss, opt, {.activation_checkpoint_every = 1}); },
      {"activation_checkpoint_every needs a Sequential", "Residual(Linear"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { Trainer t(*net, loss, opt, {.activation_checkpoint_every = -1}); }, {">= 0"}));
}

}  // namespace
}  // namespace stoker::train
