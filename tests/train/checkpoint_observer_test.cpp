// Nothing finished is thrown away (train/checkpoint_observer.h, the final checkpoint of fit()):
// a periodic checkpoint the file system refuses keeps the previous one intact, says so naming
// it, and training continues; a final checkpoint that cannot be written goes to a fallback file
// named in the error; when no place can take it, the error names every place tried. A full
// disk is a file size limit here (setrlimit(RLIMIT_FSIZE) with SIGXFSZ ignored: write() fails
// with EFBIG), which needs no privileges.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/step_observer.h"
#include "stoker/train/trainer.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
namespace nn = stoker::nn;
namespace data = stoker::data;
namespace train = stoker::train;
using train::Trainer;

namespace {

using stoker::train_test::Blobs;
using stoker::train_test::make_blobs;

std::unique_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(16, 3));
  return m;
}

// Files of at most `bytes` while alive (the soft limit only: it can be raised back).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    struct rlimit l = old_;
    l.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &l), 0);
  }
  ~FileSizeLimit() { lift(); }
  void lift() {
    if (lifted_) return;
    lifted_ = true;
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  struct rlimit old_ {};
  sighandler_t old_handler_ = SIG_DFL;
  bool lifted_ = false;
};

// Calls `at(step)` after each step (after the Trainer's own checkpoint of that step).
class AfterStep final : public train::StepObserver {
 public:
  explicit AfterStep(std::function<void(int64_t)> at) : at_(std::move(at)) {}
  void on_step_done(const train::StepEnd& s) override { at_(s.step); }

 private:
  std::function<void(int64_t)> at_;
};

// The safetensors files (and their temporaries) of `dir`.
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() &&
        e.path().filename().string().find(".safetensors") != std::string::npos)
      out.insert(e.path().filename().string());
  return out;
}

class CheckpointObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_ckpt_observer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "tmp");
    const char* t = std::getenv("TMPDIR");
    old_tmpdir_ = t ? t : "";
    had_tmpdir_ = t != nullptr;
    ::setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);  // the fallbacks' temp folder
  }
  void TearDown() override {
    if (had_tmpdir_)
      ::setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    fs::remove_all(dir_);
  }

  // 8 steps (AdamW, batches of 10) with checkpoints every 2 into `ckpt`; `at` runs after each
  // step. Returns fit()'s error ("(no error)" when it returned) and the stderr it printed.
  std::pair<std::string, std::string> fit(const fs::path& ckpt, std::function<void(int64_t)> at) {
    const Blobs d = make_blobs(80, 3);
    auto model = make_mlp(5);
    stoker::optim::AdamW opt(model->named_parameters());
    nn::CrossEntropyLoss loss;
    Trainer t(
        *model, loss, opt,
        {.progress_bar = false, .checkpoint_dir = ckpt, .checkpoint_interval = 2, .quiet = true});
    AfterStep after(std::move(at));
    t.add_observer(after);
    data::TensorBatches b(d.x, d.y, {.batch_size = 10, .seed = 1});
    std::string error = "(no error)";
    ::testing::internal::CaptureStderr();
    try {
      steps_ = t.fit(b, 1).steps;
    } catch (const stoker::Error& e) {
      error = e.what();
    }
    return {error, ::testing::internal::GetCapturedStderr()};
  }

  int64_t resumed_step(const fs::path& file) {
    auto model = make_mlp(9);
    stoker::optim::AdamW opt(model->named_parameters());
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
    t.resume(file);
    return t.step();
  }

  fs::path dir_;
  int64_t steps_ = -1;
  std::string old_tmpdir_;
  bool had_tmpdir_ = false;
};

// The disk "fills" after step 2's checkpoint and is freed after step 6: the checkpoints of
// steps 4 and 6 fail, each saying that step_2 is kept, training goes on, and step 8's and the
// final one are written again.
TEST_F(CheckpointObserverTest, APeriodicCheckpointTheDiskRefusesKeepsThePreviousOne) {
  const fs::path ckpt = dir_ / "ckpt";
  std::unique_ptr<FileSizeLimit> full;
  const auto [error, err] = fit(ckpt, [&](int64_t step) {
    if (step == 2) full = std::make_unique<FileSizeLimit>(4096);  // a checkpoint is ~8 KB
    if (step == 6) full->lift();
  });
  full.reset();
  EXPECT_EQ(error, "(no error)");
  EXPECT_EQ(steps_, 8);
  for (const char* f : {"step_4", "step_6"}) {
    const std::string line = "checkpoint: writing " + (ckpt / f).string() + ".safetensors failed (";
    EXPECT_NE(err.find(line), std::string::npos) << err;
  }
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_NE(err.find("the previous one, " + (ckpt / "step_2.safetensors").string() +
                     ", is kept intact. Training continues"),
            std::string::npos)
      << err;
  EXPECT_EQ(names_in(ckpt), (std::set<std::string>{"step_2.safetensors", "step_8.safetensors",
                                                   "last.safetensors"}));
  EXPECT_EQ(resumed_step(ckpt / "step_2.safetensors"), 2);
  EXPECT_EQ(resumed_step(ckpt / "last.safetensors"), 8);
}

// The checkpoint folder is gone (a regular file in its place) when fit() ends: the final
// checkpoint goes to the temp folder, the error names both, and the run resumes from it.
TEST_F(CheckpointObserverTest, TheFinalCheckpointGoesToAFallbackNamedInTheError) {
  const fs::path ckpt = dir_ / "ckpt";
  const auto [error, err] = fit(ckpt, [&](int64_t step) {
    if (step != 8) return;
    fs::rename(ckpt, dir_ / "moved");
    std::ofstream(ckpt) << "not a folder";
  });
  const auto fallbacks = names_in(dir_ / "tmp");
  ASSERT_EQ(fallbacks.size(), 1u) << error;
  const fs::path written = dir_ / "tmp" / *fallbacks.begin();
  EXPECT_EQ(written.filename().string().rfind("last.unsaved-" + std::to_string(::getpid()), 0), 0u)
      << written;
  EXPECT_EQ(written.extension(), ".safetensors");
  EXPECT_NE(error.find("the final checkpoint " + (ckpt / "last.safetensors").string() +
                       " could not be written ("),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("it was written to " + written.string() + " instead"), std::string::npos)
      << error;
  EXPECT_NE(error.find("--resume " + written.string()), std::string::npos) << error;
  EXPECT_EQ(resumed_step(written), 8);
}

// No place can take the final checkpoint (every file is limited): the error says so and names
// each place tried with its reason; nothing half-written is left anywhere.
TEST_F(CheckpointObserverTest, WhenNoPlaceTakesTheFinalCheckpointTheErrorNamesEachOne) {
  const fs::path ckpt = dir_ / "ckpt";
  std::unique_ptr<FileSizeLimit> full;
  const auto [error, err] = fit(ckpt, [&](int64_t step) {
    if (step == 8) full = std::make_unique<FileSizeLimit>(4096);
  });
  full.reset();
  EXPECT_NE(error.find("the final checkpoint " + (ckpt / "last.safetensors").string() +
                       " could not be written ("),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("nor any of the places tried instead:"), std::string::npos) << error;
  EXPECT_NE(error.find((ckpt / "last.unsaved-").string()), std::string::npos) << error;
  EXPECT_NE(error.find((dir_ / "tmp" / "last.unsaved-").string()), std::string::npos) << error;
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_TRUE(names_in(dir_ / "tmp").empty());
  for (const auto& n : names_in(ckpt)) EXPECT_EQ(n.find(".tmp."), std::string::npos) << n;
  EXPECT_TRUE(names_in(ckpt).count("step_8.safetensors"));  // the periodic one came first
}

}  // namespace
