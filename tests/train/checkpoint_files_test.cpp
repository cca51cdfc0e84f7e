// The checkpoints of a run's folder (train/checkpoint_files.h): their names, the listing by
// recorded step (unreadable files skipped), retention and setting aside an abandoned branch —
// over real checkpoints written by a Trainer.
#include "stoker/train/checkpoint_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/trainer.h"
#include "test_util.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
namespace data = stoker::data;
namespace train = stoker::train;

namespace {

using stoker::train_test::Blobs;
using stoker::train_test::byte_of_tensor;
using stoker::train_test::flip_byte;
using stoker::train_test::make_blobs;

std::unique_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(16, 3));
  return m;
}

// The file names of `dir` (regular files), sorted.
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out.insert(e.path().filename().string());
  return out;
}

std::vector<std::string> listed_names(const std::vector<train::CheckpointFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(f.path.filename().string());
  return out;
}

class CheckpointFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_ckpt_files_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A run of `steps` steps (one epoch of 10-sample batches) writing checkpoints into `dir`.
  void run(const fs::path& dir, int64_t steps, int64_t interval, int keep_last) {
    const Blobs d = make_blobs(steps * 10, 3);
    auto model = make_mlp(5);
    stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    train::Trainer t(*model, loss, opt,
                     {.progress_bar = false,
                      .checkpoint_dir = dir,
                      .checkpoint_interval = interval,
                      .keep_last = keep_last,
                      .quiet = true});
    data::TensorBatches b(d.x, d.y, {.batch_size = 10, .seed = 1});
    ASSERT_EQ(t.fit(b, 1).steps, steps);
  }
  fs::path dir_;
};

TEST_F(CheckpointFilesTest, NamesOfPeriodicAndFinalCheckpoints) {
  EXPECT_EQ(train::periodic_checkpoint_path(dir_, 7), dir_ / "step_7.safetensors");
  EXPECT_EQ(train::periodic_checkpoint_path(dir_, 0), dir_ / "step_0.safetensors");
  EXPECT_EQ(train::periodic_checkpoint_path(dir_, 1234567890123),
            dir_ / "step_1234567890123.safetensors");
  EXPECT_EQ(train::final_checkpoint_path(dir_), dir_ / "last.safetensors");
}

// Interval 2 and keep_last 2 over 10 steps: step_8, step_10 and last remain, listed by step with
// the final one after the periodic one of the same step.
TEST_F(CheckpointFilesTest, RetentionKeepsTheNewestAndTheFinalOne) {
  run(dir_, 10, 2, 2);
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"step_8.safetensors", "step_10.safetensors",
                                                   "last.safetensors"}));
  std::vector<std::string> skipped;
  const auto files = train::list_checkpoints(dir_, &skipped);
  EXPECT_TRUE(skipped.empty());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(
      listed_names(files),
      (std::vector<std::string>{"step_8.safetensors", "step_10.safetensors", "last.safetensors"}));
  EXPECT_EQ(files[0].step, 8);
  EXPECT_FALSE(files[0].final);
  EXPECT_EQ(files[1].step, 10);
  EXPECT_FALSE(files[1].final);
  EXPECT_EQ(files[2].step, 10);
  EXPECT_TRUE(files[2].final);
  // What the headers record is what the listing says.
  for (const auto& f : files)
    EXPECT_EQ(train::SafetensorsReader(f.path).metadata().at("stoker.step"), std::to_string(f.step))
        << f.path;
}

TEST_F(CheckpointFilesTest, KeepLastZeroKeepsEveryOne) {
  run(dir_, 10, 2, 0);
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"step_2.safetensors", "step_4.safetensors",
                                                   "step_6.safetensors", "step_8.safetensors",
                                                   "step_10.safetensors", "last.safetensors"}));
  const auto files = train::list_checkpoints(dir_);
  ASSERT_EQ(files.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(files[i].step, static_cast<int64_t>(2 * (i + 1)));
    EXPECT_FALSE(files[i].final);
  }
  EXPECT_TRUE(files[5].final);
  // prune_checkpoints by hand: keep_last 0 removes nothing, 1 all periodic ones but step_10.
  EXPECT_TRUE(train::prune_checkpoints(dir_, 0).empty());
  EXPECT_EQ(names_in(dir_).size(), 6u);
  const auto removed = train::prune_checkpoints(dir_, 1);
  std::set<std::string> removed_names;
  for (const auto& p : removed) removed_names.insert(p.filename().string());
  EXPECT_EQ(removed_names, (std::set<std::string>{"step_2.safetensors", "step_4.safetensors",
                                                  "step_6.safetensors", "step_8.safetensors"}));
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"step_10.safetensors", "last.safetensors"}));
  EXPECT_THROW(train::prune_checkpoints(dir_, -1), stoker::Error);
}

// Retention goes by the step number: step_10 is newer than step_9 (not by name order).
TEST_F(CheckpointFilesTest, RetentionOrdersByStepNumberNotByName) {
  run(dir_, 10, 1, 2);
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"step_9.safetensors", "step_10.safetensors",
                                                   "last.safetensors"}));
}

// A file under a checkpoint's name that is no readable checkpoint (junk, a damaged header) is
// neither counted nor removed by retention: it cannot push the run's good checkpoints out.
TEST_F(CheckpointFilesTest, RetentionNeverCountsOrRemovesUnreadableFiles) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "step_99.safetensors") << "not a checkpoint";
  run(dir_, 10, 5, 1);
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"step_10.safetensors", "step_99.safetensors",
                                                   "last.safetensors"}));
}

// The order is the recorded step's, not the name's: a copy of step_10 named step_1 lists after
// step_8; files that are not checkpoints under a checkpoint's name are skipped and named; files
// under other names are not looked at.
TEST_F(CheckpointFilesTest, ListingFollowsTheHeadersAndSkipsUnreadableFiles) {
  run(dir_, 10, 2, 2);
  fs::copy_file(dir_ / "step_10.safetensors", dir_ / "step_1.safetensors");
  std::ofstream(dir_ / "step_3.safetensors") << "this is not a safetensors file";
  std::ofstream(dir_ / "notes.txt") << "hello";
  std::ofstream(dir_ / "step_x.safetensors") << "junk under a name that is not a checkpoint's";
  std::ofstream(dir_ / "step_2.safetensors.tmp.1.0") << "partial";
  // A real safetensors file, but no training checkpoint (weights only).
  const std::vector<train::NamedTensor> weights_only{
      {"w", Tensor::from_floats({1.0f, 2.0f}, {2}, DType::f32)}};
  train::save_safetensors(dir_ / "step_5.safetensors", weights_only);
  std::vector<std::string> skipped;
  const auto files = train::list_checkpoints(dir_, &skipped);
  EXPECT_EQ(listed_names(files),
            (std::vector<std::string>{"step_8.safetensors", "step_1.safetensors",
                                      "step_10.safetensors", "last.safetensors"}));
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[1].step, 10);
  ASSERT_EQ(skipped.size(), 2u);
  std::sort(skipped.begin(), skipped.end());
  EXPECT_EQ(skipped[0].rfind((dir_ / "step_3.safetensors").string() + ": ", 0), 0u) << skipped[0];
  EXPECT_EQ(skipped[1].rfind((dir_ / "step_5.safetensors").string() + ": ", 0), 0u) << skipped[1];
  EXPECT_NE(skipped[1].find("not a stoker training checkpoint"), std::string::npos) << skipped[1];
  // Without a list for them, they are still left out.
  EXPECT_EQ(train::list_checkpoints(dir_).size(), 4u);
}

TEST_F(CheckpointFilesTest, SettingAsideRenamesLaterOnesWhichAreNoLongerListed) {
  run(dir_, 10, 2, 0);
  const auto renamed = train::set_aside_checkpoints_after(dir_, 6);
  std::set<std::string> renamed_names;
  for (const auto& p : renamed) renamed_names.insert(p.filename().string());
  EXPECT_EQ(renamed_names,
            (std::set<std::string>{"step_8.safetensors.abandoned", "step_10.safetensors.abandoned",
                                   "last.safetensors.abandoned"}));
  EXPECT_EQ(names_in(dir_),
            (std::set<std::string>{"step_2.safetensors", "step_4.safetensors", "step_6.safetensors",
                                   "step_8.safetensors.abandoned", "step_10.safetensors.abandoned",
                                   "last.safetensors.abandoned"}));
  const auto files = train::list_checkpoints(dir_);
  EXPECT_EQ(
      listed_names(files),
      (std::vector<std::string>{"step_2.safetensors", "step_4.safetensors", "step_6.safetensors"}));
  // Nothing was deleted: an abandoned file is the checkpoint it was.
  EXPECT_EQ(
      train::SafetensorsReader(dir_ / "step_10.safetensors.abandoned").metadata().at("stoker.step"),
      "10");
  // Retention leaves the abandoned ones alone (they are not step_N.safetensors any more).
  train::prune_checkpoints(dir_, 1);
  EXPECT_EQ(names_in(dir_),
            (std::set<std::string>{"step_6.safetensors", "step_8.safetensors.abandoned",
                                   "step_10.safetensors.abandoned", "last.safetensors.abandoned"}));
  // At or past the newest step: nothing to set aside.
  EXPECT_TRUE(train::set_aside_checkpoints_after(dir_, 6).empty());
  EXPECT_TRUE(train::set_aside_checkpoints_after(dir_, 100).empty());
}

// Going back twice (to step 6, then to step 4 after a second branch was written) keeps both
// branches under distinct names: the first branch's files are never overwritten.
TEST_F(CheckpointFilesTest, GoingBackTwiceKeepsBothAbandonedBranches) {
  auto bytes_of = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  run(dir_, 10, 2, 0);
  ASSERT_EQ(train::set_aside_checkpoints_after(dir_, 6).size(), 3u);
  std::map<std::string, std::string> first_branch;
  for (const char* n : {"step_8.safetensors.abandoned", "step_10.safetensors.abandoned",
                        "last.safetensors.abandoned"})
    first_branch[n] = bytes_of(dir_ / n);
  // The second branch: another run's checkpoints under the same names (other weights).
  {
    const Blobs d = make_blobs(100, 4);
    auto model = make_mlp(77);
    stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    train::Trainer t(*model, loss, opt,
                     {.progress_bar = false,
                      .checkpoint_dir = dir_,
                      .checkpoint_interval = 2,
                      .max_steps = 10,
                      .quiet = true});
    data::TensorBatches b(d.x, d.y, {.batch_size = 10, .seed = 2});
    t.fit(b, 1);
  }
  const auto renamed = train::set_aside_checkpoints_after(dir_, 4);
  std::set<std::string> renamed_names;
  for (const auto& p : renamed) renamed_names.insert(p.filename().string());
  EXPECT_EQ(renamed_names, (std::set<std::string>{
                               "step_6.safetensors.abandoned-2", "step_8.safetensors.abandoned-2",
                               "step_10.safetensors.abandoned-2", "last.safetensors.abandoned-2"}));
  for (const auto& [name, bytes] : first_branch)
    EXPECT_EQ(bytes_of(dir_ / name), bytes) << name << " was overwritten";
  EXPECT_NE(bytes_of(dir_ / "step_8.safetensors.abandoned-2"),
            first_branch["step_8.safetensors.abandoned"]);
  EXPECT_EQ(listed_names(train::list_checkpoints(dir_)),
            (std::vector<std::string>{"step_2.safetensors", "step_4.safetensors"}));
  // A third time: -3, the others untouched.
  run(dir_, 10, 2, 0);
  for (const auto& p : train::set_aside_checkpoints_after(dir_, 8))
    EXPECT_EQ(p.extension(), ".abandoned-3") << p;
  for (const auto& [name, bytes] : first_branch) EXPECT_EQ(bytes_of(dir_ / name), bytes) << name;
}

TEST_F(CheckpointFilesTest, AMissingOrEmptyFolderHasNone) {
  std::vector<std::string> skipped;
  EXPECT_TRUE(train::list_checkpoints(dir_ / "does_not_exist", &skipped).empty());
  EXPECT_TRUE(skipped.empty());
  EXPECT_TRUE(train::list_checkpoints(dir_, &skipped).empty());
  EXPECT_TRUE(skipped.empty());
  EXPECT_TRUE(train::prune_checkpoints(dir_ / "does_not_exist", 2).empty());
  EXPECT_TRUE(train::set_aside_checkpoints_after(dir_ / "does_not_exist", 0).empty());
  EXPECT_FALSE(fs::exists(dir_ / "does_not_exist"));
}

}  // namespace
