#include "stoker/train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/dropout.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/random.h"
#include "test_util.h"

namespace fs = std::filesystem;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
namespace data = stoker::data;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

namespace {

// A learnable toy problem: 3 classes of Gaussian blobs in 8 dimensions.
struct Blobs {
  Tensor x, y;
};
Blobs make_blobs(int64_t n, uint64_t seed) {
  Tensor x = Tensor::empty({n, 8}, DType::f32);
  stoker::ops::random_normal(x, 0.0f, 0.5f, seed, 0);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  float* px = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = i % 3;
    px[i * 8 + labels[i]] += 2.0f;  // class c is shifted along axis c
  }
  return {x, Tensor::from_vector(labels, {n})};
}

std::unique_ptr<nn::Sequential> make_mlp(uint64_t seed, float dropout) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 32));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Dropout>(dropout));
  m->add(nn::make<nn::Linear>(32, 3));
  return m;
}

std::vector<std::vector<float>> weights(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_trainer_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TrainerTest, LearnsBlobsAndEvaluates) {
  const Blobs train = make_blobs(600, 1), test = make_blobs(300, 2);
  auto model = make_mlp(7, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  nn::CrossEntropyLoss loss;
  Trainer trainer(*model, loss, opt, {.log_interval = 5, .progress_bar = false, .quiet = true});
  data::TensorBatches batches(train.x, train.y, {.batch_size = 50, .seed = 3});
  data::TensorBatches eval(test.x, test.y, {.batch_size = 100, .shuffle = false});
  const double before = trainer.evaluate(eval).loss;
  const auto result = trainer.fit(batches, 5);
  EXPECT_EQ(result.steps, 60);
  // A line every 5 steps, plus one for each epoch tail (12 steps per epoch): 16 lines.
  EXPECT_EQ(result.log.size(), 16u);
  EXPECT_EQ(result.log.back().step, 60);
  const auto after = trainer.evaluate(eval);
  EXPECT_LT(after.loss, 0.5 * before);
  EXPECT_GT(after.accuracy, 0.9);
  EXPECT_EQ(after.samples, 300);
  EXPECT_GT(result.log.back().grad_norm, 0.0);
}

// k micro-batches of b give the same update as one batch of k*b.
TEST_F(TrainerTest, GradientAccumulationEqualsLargeBatch) {
  const Blobs d = make_blobs(64, 4);
  auto big = make_mlp(11, 0.0f), small = make_mlp(11, 0.0f);
  stoker::optim::SGD opt_big(big->named_parameters(), {.lr = 0.5f});
  stoker::optim::SGD opt_small(small->named_parameters(), {.lr = 0.5f});
  nn::CrossEntropyLoss l1, l2;
  Trainer t_big(*big, l1, opt_big, {.progress_bar = false, .quiet = true});
  Trainer t_small(*small, l2, opt_small,
                  {.grad_accum_steps = 4, .progress_bar = false, .quiet = true});
  data::TensorBatches b_big(d.x, d.y, {.batch_size = 64, .shuffle = false});
  data::TensorBatches b_small(d.x, d.y, {.batch_size = 16, .shuffle = false});
  t_big.fit(b_big, 1);
  t_small.fit(b_small, 1);
  EXPECT_EQ(t_big.step(), 1);
  EXPECT_EQ(t_small.step(), 1);
  const auto wb = weights(*big), ws = weights(*small);
  for (size_t t = 0; t < wb.size(); ++t)
    for (size_t i = 0; i < wb[t].size(); ++i)
      ASSERT_NEAR(wb[t][i], ws[t][i], 1e-6) << t << "/" << i;
}

// train_step() over k micro-batches is fit()'s step with grad_accum_steps = k, bit for bit, and
// fit() reports the host syncs made inside a step (none on the CPU).
TEST_F(TrainerTest, TrainStepEqualsFitStepAndReportsHostSyncs) {
  const Blobs d = make_blobs(64, 4);
  auto a = make_mlp(11, 0.0f), b = make_mlp(11, 0.0f);
  stoker::optim::AdamW opt_a(a->named_parameters()), opt_b(b->named_parameters());
  nn::CrossEntropyLoss la, lb;
  const TrainerOptions o{
      .grad_accum_steps = 2, .clip_grad_norm = 0.1f, .progress_bar = false, .quiet = true};
  Trainer ta(*a, la, opt_a, o), tb(*b, lb, opt_b, o);
  data::TensorBatches src(d.x, d.y, {.batch_size = 32, .shuffle = false});
  const auto fit = ta.fit(src, 1);
  ASSERT_EQ(fit.log.size(), 1u);
  EXPECT_EQ(fit.log[0].host_syncs_per_step, 0);
  src.start_epoch(0);
  std::vector<data::Batch> micro(2);
  ASSERT_TRUE(src.next(micro[0]) && src.next(micro[1]));
  tb.train_step(micro);
  EXPECT_EQ(tb.step(), 1);
  const auto wa = weights(*a), wb = weights(*b);
  for (size_t t = 0; t < wa.size(); ++t)
    for (size_t i = 0; i < wa[t].size(); ++i) ASSERT_EQ(wa[t][i], wb[t][i]) << t << "/" << i;
  EXPECT_THROW(tb.train_step({}), stoker::Error);
}

// 20 steps straight == 10 steps + checkpoint + resume in fresh objects + 10 steps, bit for bit
// (dropout masks, shuffling, optimizer state and step count all restored).
TEST_F(TrainerTest, ResumeReproducesTheRunBitForBit) {
  const Blobs d = make_blobs(200, 5);
  auto run = [&](int64_t stop_at, const fs::path& resume_from) {
    auto model = make_mlp(13, 0.2f);
    auto opt = std::make_unique<stoker::optim::AdamW>(model->named_parameters(),
                                                      stoker::optim::AdamWOptions{.lr = 1e-2f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.clip_grad_norm = 1.0f,
                     .schedule = stoker::optim::cosine_with_warmup(1e-2f, 3, 20),
                     .progress_bar = false,
                     .checkpoint_dir = dir_,
                     .max_steps = stop_at,
                     .quiet = true};
    Trainer t(*model, loss, *opt, o);
    if (!resume_from.empty()) t.resume(resume_from);
    data::TensorBatches b(d.x, d.y, {.batch_size = 16, .seed = 99});  // 13 batches per epoch
    t.fit(b, 100);
    return weights(*model);
  };
  const auto straight = run(20, {});
  run(10, {});
  ASSERT_TRUE(fs::exists(dir_ / "last.safetensors"));
  const auto resumed = run(20, dir_ / "last.safetensors");
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t t = 0; t < straight.size(); ++t)
    EXPECT_EQ(0, std::memcmp(straight[t].data(), resumed[t].data(), straight[t].size() * 4))
        << "parameter " << t;
}

TEST_F(TrainerTest, NanLossStopsWithStepAndLastFiniteLoss) {
  const Blobs d = make_blobs(100, 6);
  d.x.data<float>()[35 * 8 + 2] = NAN;  // sample 35: batch 3 of an unshuffled run
  auto model = make_mlp(17, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.log_interval = 1000, .progress_bar = false, .quiet = true});
  data::TensorBatches b(d.x, d.y, {.batch_size = 10, .shuffle = false});
  try {
    t.fit(b, 20);
    FAIL() << "a run with a NaN loss was not stopped";
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("NaN/Inf at step 3 "), std::string::npos) << msg;
    EXPECT_NE(msg.find("last finite loss"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at step 2)"), std::string::npos) << msg;
  }
  // Asked to continue, the run goes on (and reports only finite losses).
  auto model2 = make_mlp(17, 0.0f);
  stoker::optim::SGD opt2(model2->named_parameters(), {.lr = 0.1f});
  Trainer t2(*model2, loss, opt2,
             {.progress_bar = false, .continue_on_nan = true, .max_steps = 5, .quiet = true});
  EXPECT_EQ(t2.fit(b, 1).steps, 5);
}

TEST_F(TrainerTest, CheckpointErrorsNameFileAndTensor) {
  const Blobs d = make_blobs(50, 7);
  auto model = make_mlp(19, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  data::TensorBatches b(d.x, d.y, {.batch_size = 10});
  t.save_checkpoint(dir_ / "a.safetensors", &b);
  // A model with another hidden size cannot load it.
  nn::manual_seed(1);
  nn::Sequential other(nn::make<nn::Linear>(8, 16), nn::make<nn::ReLU>(),
                       nn::make<nn::Linear>(16, 3));
  stoker::optim::SGD opt2(other.named_parameters(), {.lr = 0.1f});
  Trainer t2(other, loss, opt2, {.progress_bar = false, .quiet = true});
  try {
    t2.resume(dir_ / "a.safetensors");
    FAIL();
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("a.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.0.weight"), std::string::npos) << msg;
  }
  EXPECT_THROW(t2.resume(dir_ / "missing.safetensors"), stoker::Error);
}

}  // namespace
