// TrainingCheckpoint (train/training_checkpoint.h): the record a Trainer writes is the one read
// back; what an older checkpoint did not record is derived from this job; the resume checks
// refuse another run's data or settings, naming them.
#include "stoker/train/training_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/trainer.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
namespace nn = stoker::nn;
namespace data = stoker::data;
using stoker::train::ChangedRunError;
using stoker::train::SafetensorsReader;
using stoker::train::SettingChange;
using stoker::train::TrainingCheckpoint;

namespace {

class TrainingCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_training_checkpoint_" +
            std::to_string(::testing::UnitTest::GetInstance()->current_test_info()->line()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::unique_ptr<nn::Sequential> make_mlp() {
  nn::manual_seed(5);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(16, 3));
  return m;
}

TEST_F(TrainingCheckpointTest, TheTrainersRecordReadsBack) {
  const auto blobs = stoker::train_test::make_blobs(40, 3);
  data::TensorBatches train(blobs.x, blobs.y, {.batch_size = 10, .seed = 7});
  auto model = make_mlp();
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
  nn::CrossEntropyLoss loss;
  stoker::train::Trainer trainer(
      *model, loss, opt,
      {.grad_accum_steps = 2,
       .progress_bar = false,
       .max_steps = 3,
       .quiet = true,
       .run_settings = {{"--lr", "0.05", SettingChange::note}, {"--width", "16"}}});
  trainer.fit(train, 5);  // 2 steps an epoch: step 3 is half-way through epoch 1
  const fs::path path = dir_ / "ck.safetensors";
  trainer.save_checkpoint(path, &train);

  const SafetensorsReader reader(path);
  const TrainingCheckpoint c = TrainingCheckpoint::read(reader, path);
  EXPECT_EQ(c.path, path);
  EXPECT_EQ(c.version, 2);
  EXPECT_EQ(c.step, 3);
  EXPECT_EQ(c.position.epoch, 1);
  EXPECT_EQ(c.position.batch, 2);
  EXPECT_EQ(c.optimizer_steps, 3);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.grad_accum_steps, 2);
  EXPECT_EQ(c.identity.batch_size, 10);
  ASSERT_TRUE(c.identity.seed.has_value());
  EXPECT_EQ(*c.identity.seed, 7u);
  EXPECT_EQ(c.identity.samples, 40);
  EXPECT_EQ(c.samples_seen, 60);  // 3 steps of 2 batches of 10
  EXPECT_EQ(c.global_batch, 20);
  EXPECT_FALSE(c.schedule_rebased);
  EXPECT_EQ(c.schedule_position, 3.0);
  EXPECT_EQ(c.settings.size(), 2u);
  EXPECT_EQ(c.settings.at("--lr"), "0.05");
  EXPECT_EQ(c.settings.at("--width"), "16");
}

TEST_F(TrainingCheckpointTest, AFileWithoutTheRecordIsNotACheckpoint) {
  const fs::path path = dir_ / "weights.safetensors";
  const std::vector<stoker::train::NamedTensor> tensors = {
      {"w", stoker::Tensor::zeros({2}, stoker::DType::f32)}};
  stoker::train::save_safetensors(path, tensors, {});
  const SafetensorsReader reader(path);
  try {
    TrainingCheckpoint::read(reader, path);
    FAIL() << "read a file without stoker.step";
  } catch (const stoker::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + " is not a stoker training checkpoint"),
              std::string::npos)
        << e.what();
  }
}

// An older checkpoint recorded neither the samples seen nor the global batch: derived from its
// step and batch, with this job's accumulation and world size where it recorded none.
TEST_F(TrainingCheckpointTest, CompleteDerivesWhatAnOlderCheckpointDidNotRecord) {
  TrainingCheckpoint old;
  old.step = 5;
  old.identity.batch_size = 10;
  old.complete(/*grad_accum_now=*/2, /*world_now=*/4);
  EXPECT_EQ(old.samples_seen, 5 * 10 * 2 * 4);
  EXPECT_EQ(old.global_batch, 10 * 2 * 4);

  TrainingCheckpoint recorded = TrainingCheckpoint{};
  recorded.step = 5;
  recorded.identity.batch_size = 10;
  recorded.world_size = 2;
  recorded.grad_accum_steps = 1;
  recorded.complete(2, 4);
  EXPECT_EQ(recorded.samples_seen, 5 * 10 * 1 * 2);
  EXPECT_EQ(recorded.global_batch, 10 * 1 * 2);

  recorded.samples_seen = 77;  // recorded values are kept
  recorded.global_batch = 11;
  recorded.complete(2, 4);
  EXPECT_EQ(recorded.samples_seen, 77);
  EXPECT_EQ(recorded.global_batch, 11);
}

TEST_F(TrainingCheckpointTest, CheckRunRefusesAnotherRunsData) {
  const auto blobs = stoker::train_test::make_blobs(40, 3);
  TrainingCheckpoint c;
  c.path = dir_ / "ck.safetensors";
  c.world_size = 1;
  c.identity = {.batch_size = 10, .seed = 7, .samples = 40};
  data::TensorBatches same(blobs.x, blobs.y, {.batch_size = 10, .seed = 7});
  EXPECT_NO_THROW(c.check_run(same, 1));

  data::TensorBatches other_batch(blobs.x, blobs.y, {.batch_size = 8, .seed = 7});
  try {
    c.check_run(other_batch, 1);
    FAIL() << "another batch size resumed";
  } catch (const stoker::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the batch size differs"), std::string::npos) << e.what();
  }
  data::TensorBatches other_seed(blobs.x, blobs.y, {.batch_size = 10, .seed = 8});
  EXPECT_THROW(c.check_run(other_seed, 1), stoker::Error);

  // Inside an epoch without its progress, another world size cannot continue it.
  c.world_size = 2;
  c.position = {.epoch = 0, .batch = 1, .progress = -1};
  try {
    c.check_run(same, 1);
    FAIL() << "another world size continued an epoch without its progress";
  } catch (const stoker::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot continue it"), std::string::npos) << e.what();
  }
  c.position.batch = 0;  // at an epoch's start it can
  EXPECT_NO_THROW(c.check_run(same, 1));
}

TEST_F(TrainingCheckpointTest, CheckSettingsNotesAllowedChangesAndRefusesTheOthers) {
  TrainingCheckpoint c;
  c.path = dir_ / "ck.safetensors";
  c.settings = {{"--lr", "0.1"}, {"--width", "64"}};
  const auto notes = c.check_settings(
      {{"--lr", "0.2", SettingChange::note}, {"--width", "64", SettingChange::model_shape}}, 1, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("--lr"), std::string::npos) << notes[0];
  EXPECT_THROW(c.check_settings({{"--lr", "0.1", SettingChange::note},
                                 {"--width", "128", SettingChange::model_shape}},
                                1, 1),
               ChangedRunError);
}

}  // namespace
