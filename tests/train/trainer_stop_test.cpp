// Preemption of the Trainer (TrainerOptions::stop_signals): a stop signal during fit() ends it
// after the step in progress with that step's log line and a checkpoint of it, and the run
// resumed from there ends with the weights of the run never stopped; a second signal ends the
// process at once; the ranks of a job stop at the same step (the next log line). The signals are
// raised by the process itself, from an observer, at a chosen step.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "dist/thread_communicator.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/dist/communicator.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/step_observer.h"
#include "stoker/train/trainer.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
namespace nn = stoker::nn;
namespace data = stoker::data;
using stoker::train::FitResult;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

namespace {

class TrainerStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_stop_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Raises `signals` (one each) when the step numbered `at` (0-based) begins.
class RaiseAt final : public stoker::train::StepObserver {
 public:
  RaiseAt(int64_t at, std::vector<int> signals) : at_(at), signals_(std::move(signals)) {}
  void on_step_begin(int64_t step) override {
    if (step == at_)
      for (const int s : signals_) ::raise(s);
  }

 private:
  int64_t at_;
  std::vector<int> signals_;
};

std::unique_ptr<nn::Sequential> make_mlp() {
  nn::manual_seed(21);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Dropout>(0.2f));
  m->add(nn::make<nn::Linear>(16, 3));
  return m;
}

std::vector<std::vector<float>> weights(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

struct Outcome {
  FitResult fit;
  std::vector<std::vector<float>> weights;
  int64_t resumed_at = -1;
};

// 2 epochs of 12 batches of 10; the checkpoints in `ck` (resumed from when there are some);
// `raise_at` >= 0: raises SIGUSR1 as that step begins.
Outcome run(const fs::path& ck, int64_t raise_at) {
  const auto blobs = stoker::train_test::make_blobs(120, 5);
  auto model = make_mlp();
  stoker::optim::AdamW opt(model->named_parameters(), {.lr = 1e-2f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.log_interval = 4, .progress_bar = false, .quiet = true};
  o.checkpoint_dir = ck;
  Trainer t(*model, loss, opt, o);
  RaiseAt raiser(raise_at, {SIGUSR1});
  t.add_observer(raiser);
  Outcome r;
  if (t.resume_latest(ck)) r.resumed_at = t.step();
  data::TensorBatches b(blobs.x, blobs.y, {.batch_size = 10, .seed = 9});
  r.fit = t.fit(b, 2);
  r.weights = weights(*model);
  return r;
}

TEST_F(TrainerStopTest, ASignalEndsTheFitAfterItsStepWithACheckpoint) {
  const Outcome whole = run(dir_ / "whole", -1);
  ASSERT_EQ(whole.fit.steps, 24);
  EXPECT_EQ(whole.fit.stop_signal, 0);

  const fs::path ck = dir_ / "stopped";
  const Outcome stopped = run(ck, 6);  // SIGUSR1 during step 7 (0-based 6)
  EXPECT_EQ(stopped.fit.stop_signal, SIGUSR1);
  EXPECT_EQ(stopped.fit.steps, 7);
  EXPECT_EQ(stopped.fit.stop_checkpoint, ck / "step_7.safetensors");
  ASSERT_TRUE(fs::exists(ck / "step_7.safetensors"));
  EXPECT_FALSE(fs::exists(ck / "last.safetensors"));  // the run is not over
  EXPECT_EQ(
      stoker::train::SafetensorsReader(ck / "step_7.safetensors").metadata().at("stoker.step"),
      "7");
  // The step's log line is written (not a log step: 4 and 8 are).
  ASSERT_FALSE(stopped.fit.log.empty());
  EXPECT_EQ(stopped.fit.log.back().step, 7);
  EXPECT_FALSE(fs::exists(ck / ".stoker-lock"));  // released

  // The same run again continues from it and ends where the run never stopped ends, bit for bit.
  const Outcome resumed = run(ck, -1);
  EXPECT_EQ(resumed.resumed_at, 7);
  EXPECT_EQ(resumed.fit.steps, 24);
  EXPECT_EQ(resumed.fit.stop_signal, 0);
  EXPECT_EQ(resumed.weights, whole.weights);
  // After the fit the signal has its default action again (not tested by raising it: that ends
  // the test program).
  struct sigaction now {};
  ::sigaction(SIGUSR1, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST_F(TrainerStopTest, WithoutACheckpointFolderTheFitStillStopsAndSaysNoFile) {
  const auto blobs = stoker::train_test::make_blobs(60, 5);
  auto model = make_mlp();
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  RaiseAt raiser(2, {SIGTERM});
  t.add_observer(raiser);
  data::TensorBatches b(blobs.x, blobs.y, {.batch_size = 10});
  const FitResult r = t.fit(b, 3);
  EXPECT_EQ(r.stop_signal, SIGTERM);
  EXPECT_EQ(r.steps, 3);
  EXPECT_TRUE(r.stop_checkpoint.empty());
}

TEST_F(TrainerStopTest, SignalsNotListedKeepTheirAction) {
  const auto blobs = stoker::train_test::make_blobs(60, 5);
  auto model = make_mlp();
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.progress_bar = false, .quiet = true};
  o.stop_signals = {SIGUSR2};
  Trainer t(*model, loss, opt, o);
  RaiseAt raiser(2, {SIGUSR2});
  t.add_observer(raiser);
  data::TensorBatches b(blobs.x, blobs.y, {.batch_size = 10});
  EXPECT_EQ(t.fit(b, 1).stop_signal, SIGUSR2);
  // SIGTERM is not in the list: it kills.
  EXPECT_EXIT(
      {
        o.stop_signals = {SIGUSR2};
        Trainer t2(*model, loss, opt, o);
        RaiseAt term(1, {SIGTERM});
        t2.add_observer(term);
        data::TensorBatches b2(blobs.x, blobs.y, {.batch_size = 10});
        t2.fit(b2, 1);
        std::exit(0);
      },
      testing::KilledBySignal(SIGTERM), "");
}

TEST_F(TrainerStopTest, ASecondSignalEndsTheProcessAtOnce) {
  const auto blobs = stoker::train_test::make_blobs(60, 5);
  EXPECT_EXIT(
      {
        auto model = make_mlp();
        stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
        nn::CrossEntropyLoss loss;
        Trainer t(*model, loss, opt,
                  {.progress_bar = false, .checkpoint_dir = dir_ / "ck", .quiet = true});
        RaiseAt twice(2, {SIGTERM, SIGINT});
        t.add_observer(twice);
        data::TensorBatches b(blobs.x, blobs.y, {.batch_size = 10});
        t.fit(b, 1);
        std::exit(0);  // not reached: SIGINT ends it
      },
      testing::KilledBySignal(SIGINT), "");
}

// Two ranks (threads over a ThreadCommunicator): one raises the signal at step 2; both stop at
// the next log line (step 4), where they agree, and one checkpoint of step 4 is written.
TEST_F(TrainerStopTest, TheRanksOfAJobStopAtTheSameStep) {
  const auto blobs = stoker::train_test::make_blobs(160, 5);
  const fs::path ck = dir_ / "job";
  std::vector<std::unique_ptr<nn::Sequential>> models;
  for (int r = 0; r < 2; ++r) models.push_back(make_mlp());
  std::vector<FitResult> results(2);
  stoker::dist::run_ranks(2, [&](stoker::dist::Communicator& comm) {
    nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
    stoker::dist::ReplicatedGradSync sync(comm, m);
    stoker::optim::SGD opt(m.named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.log_interval = 4, .progress_bar = false, .quiet = true, .grad_sync = &sync};
    o.checkpoint_dir = ck;
    Trainer t(m, loss, opt, o);
    RaiseAt raiser(1, comm.rank() == 1 ? std::vector<int>{SIGUSR1} : std::vector<int>{});
    t.add_observer(raiser);
    data::TensorBatches b(blobs.x, blobs.y,
                          {.batch_size = 10, .seed = 4, .rank = comm.rank(), .world_size = 2});
    results[static_cast<size_t>(comm.rank())] = t.fit(b, 1);
  });
  for (const FitResult& r : results) {
    EXPECT_EQ(r.stop_signal, SIGUSR1);
    EXPECT_EQ(r.steps, 4);
  }
  const auto files = stoker::train::list_checkpoints(ck);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, ck / "step_4.safetensors");
  EXPECT_EQ(weights(*models[0]), weights(*models[1]));
}

}  // namespace
