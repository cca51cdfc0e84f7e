// TrainerOptions::checkpoint_dir is checked when fit() starts, before the first step: a folder
// that cannot be written (below a regular file, or in procfs: places that refuse root too) ends
// the run at once with an error naming the option, instead of after the last step; a missing
// folder is created and the checkpoints land in it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
namespace nn = stoker::nn;
using stoker::DType;
using stoker::Tensor;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

class CheckpointDirCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_ckpt_dir_check_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Trains a linear model for one epoch of 4 steps with checkpoints in `ckpt`; returns the
  // steps that ran, and the error when fit() threw (empty message otherwise).
  std::pair<int, std::string> fit_with(const fs::path& ckpt, bool* weights_changed) {
    Tensor x = Tensor::empty({64, 4}, DType::f32);
    stoker::ops::random_normal(x, 0.0f, 1.0f, 1, 0);
    std::vector<int64_t> labels(64);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 2);
    stoker::data::TensorBatches batches(x, Tensor::from_vector(labels, {64}), {.batch_size = 16});
    nn::manual_seed(0);
    nn::Sequential model(nn::make<nn::Linear>(4, 2));
    const std::vector<float> before = model.named_parameters().front().second->value().to_floats();
    stoker::optim::SGD opt(model.named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.log_interval = 1, .progress_bar = false, .quiet = true};
    o.checkpoint_dir = ckpt;
    o.checkpoint_interval = 2;
    Trainer trainer(model, loss, opt, o);
    int steps = 0;
    trainer.add_log_callback([&](const stoker::train::StepStats&) { ++steps; });
    std::string error;
    try {
      trainer.fit(batches, 1);
    } catch (const stoker::Error& e) {
      error = e.message();
    }
    *weights_changed = model.named_parameters().front().second->value().to_floats() != before;
    return {steps, error};
  }

  fs::path dir_;
};

TEST_F(CheckpointDirCheckTest, AFolderBelowARegularFileFailsBeforeTheFirstStep) {
  std::ofstream(dir_ / "plain") << "not a folder";
  bool changed = true;
  const auto [steps, error] = fit_with(dir_ / "plain" / "ckpt", &changed);
  EXPECT_EQ(steps, 0);
  EXPECT_FALSE(changed);
  EXPECT_NE(error.find("TrainerOptions::checkpoint_dir " + (dir_ / "plain" / "ckpt").string()),
            std::string::npos)
      << error;
}

TEST_F(CheckpointDirCheckTest, AFolderThatTakesNoFilesFailsBeforeTheFirstStep) {
  if (!fs::is_directory("/proc/self")) GTEST_SKIP() << "no procfs";
  bool changed = true;
  const auto [steps, error] = fit_with("/proc/stoker-checkpoints", &changed);
  EXPECT_EQ(steps, 0);
  EXPECT_FALSE(changed);
  EXPECT_NE(error.find("TrainerOptions::checkpoint_dir /proc/stoker-checkpoints"),
            std::string::npos)
      << error;
}

TEST_F(CheckpointDirCheckTest, AMissingFolderIsCreatedAndHoldsTheCheckpoints) {
  bool changed = false;
  const fs::path ckpt = dir_ / "runs" / "a";
  const auto [steps, error] = fit_with(ckpt, &changed);
  EXPECT_EQ(error, "");
  EXPECT_EQ(steps, 4);
  EXPECT_TRUE(changed);
  EXPECT_TRUE(fs::is_regular_file(ckpt / "step_2.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(ckpt / "last.safetensors"));
}

}  // namespace
