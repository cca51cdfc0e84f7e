// Step observers (train/step_observer.h): a program's observer sees every event of fit() in the
// documented order, once per step/log line/evaluation/epoch; diagnostics attach as an observer
// that only watches (the weights and step count of a run are bit for bit those of the run
// without it); the environment overrides (train/environment.h) change the options only through
// apply_environment, which programs call: the Trainer itself reads no environment variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/step_observer.h"
#include "stoker/train/trainer.h"
#include "train/train_test_util.h"

namespace nn = stoker::nn;
namespace data = stoker::data;
namespace diag = stoker::diag;
using stoker::train::EvalRecord;
using stoker::train::FitContext;
using stoker::train::FitResult;
using stoker::train::StepEnd;
using stoker::train::StepObserver;
using stoker::train::StepStats;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

namespace {

std::unique_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(16, 3));
  return m;
}

// Records every event as a word, and the numbers they hold.
struct Recorder final : StepObserver {
  std::vector<std::string> events;
  std::vector<int64_t> steps_ended, steps_done, logged, evaluated;
  std::map<stoker::diag::Phase, int> phases;
  int64_t first_step = -1, total_steps = -2, samples = 0;
  std::string model;
  void on_fit_begin(const FitContext& c) override {
    events.push_back("fit_begin");
    first_step = c.first_step;
    total_steps = c.total_steps;
    model = c.model;
  }
  void on_epoch_begin(int64_t e) override { events.push_back("epoch_begin " + std::to_string(e)); }
  void on_step_begin(int64_t) override { events.push_back("step_begin"); }
  void on_phase(diag::Phase p) override { ++phases[p]; }
  void on_step_end(const StepEnd& s) override {
    events.push_back("step_end");
    steps_ended.push_back(s.step);
    samples += s.samples;
  }
  void on_step_skipped() override { events.push_back("step_skipped"); }
  void on_log(const StepStats& st) override {
    events.push_back("log");
    logged.push_back(st.step);
  }
  void on_eval(const EvalRecord& r) override {
    events.push_back("eval");
    evaluated.push_back(r.step);
  }
  void on_step_done(const StepEnd& s) override {
    events.push_back("step_done");
    steps_done.push_back(s.step);
  }
  void on_epoch_end(int64_t e) override { events.push_back("epoch_end " + std::to_string(e)); }
  void on_fit_end(FitResult& r) override { events.push_back("fit_end " + std::to_string(r.steps)); }
};

std::vector<std::vector<float>> weights(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

TEST(StepObserverTest, SeesEveryEventOfFitInOrder) {
  const auto blobs = stoker::train_test::make_blobs(40, 3);
  data::TensorBatches train(blobs.x, blobs.y, {.batch_size = 10, .seed = 5});  // 4 batches
  data::TensorBatches val(blobs.x, blobs.y, {.batch_size = 20, .shuffle = false});
  auto model = make_mlp(1);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt,
            {.grad_accum_steps = 2,  // 2 steps per epoch
             .log_interval = 3,
             .progress_bar = false,
             .evaluation = {.every_steps = 2},
             .quiet = true});
  Recorder rec;
  t.add_observer(rec);
  const FitResult r = t.fit(train, 2, &val);
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(rec.first_step, 0);
  EXPECT_EQ(rec.total_steps, 4);
  EXPECT_EQ(rec.model, model->describe());
  EXPECT_EQ(rec.steps_ended, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(rec.steps_done, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(rec.samples, 80);  // this rank's samples over the two epochs
  // Log lines: step 2 (epoch end), 3 (interval), 4 (epoch and fit end); evaluations every 2.
  EXPECT_EQ(rec.logged, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(rec.evaluated, (std::vector<int64_t>{2, 4}));
  // Phases: every micro-step has a forward and a backward; every step one optimizer phase and
  // (with two micro-steps) one data phase after the first micro-step's fetch.
  EXPECT_EQ(rec.phases[diag::Phase::forward], 8);
  EXPECT_EQ(rec.phases[diag::Phase::backward], 8);
  EXPECT_EQ(rec.phases[diag::Phase::optimizer], 4);
  EXPECT_EQ(rec.phases[diag::Phase::data], 4);
  // Step 2 ends the epoch's batches, but the epoch ends when the next fetch finds none: that
  // step is skipped and the epoch's tail is logged then.
  const std::vector<std::string> want = {
      "fit_begin",   "epoch_begin 0", "step_begin", "step_end",   "step_done",    "step_begin",
      "step_end",    "eval",          "step_done",  "step_begin", "step_skipped", "log",
      "epoch_end 0", "epoch_begin 1", "step_begin", "step_end",   "log",          "step_done",
      "step_begin",  "step_end",      "eval",       "step_done",  "step_begin",   "step_skipped",
      "log",         "epoch_end 1",   "fit_end 4"};
  EXPECT_EQ(rec.events, want);
  // The callbacks are observers too, called at the same points.
  int logs = 0;
  t.add_log_callback([&](const StepStats&) { ++logs; });
  data::TensorBatches again(blobs.x, blobs.y, {.batch_size = 10, .seed = 5});
  const FitResult more = t.fit(again, 1);
  EXPECT_EQ(logs, static_cast<int>(more.log.size()));
  EXPECT_GT(logs, 0);
}

// Diagnostics watch the run without changing it: the same steps and, on the CPU, the same bits.
TEST(StepObserverTest, DiagnosticsOnlyWatch) {
  const auto blobs = stoker::train_test::make_blobs(60, 4);
  std::vector<std::vector<std::vector<float>>> finals;
  std::vector<int64_t> steps;
  for (bool diagnose : {false, true}) {
    data::TensorBatches train(blobs.x, blobs.y, {.batch_size = 10, .seed = 8});
    auto model = make_mlp(2);
    stoker::optim::AdamW opt(model->named_parameters(), {.lr = 1e-2f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.progress_bar = false, .max_steps = 9, .quiet = true};
    o.diagnostics.enabled = diagnose;
    o.diagnostics.warmup_steps = 1;
    o.diagnostics.report_interval = 4;
    Trainer t(*model, loss, opt, o);
    const FitResult r = t.fit(train, 3);
    steps.push_back(r.steps);
    finals.push_back(weights(*model));
    if (diagnose) {
      EXPECT_EQ(r.diagnosis.breakdown.steps, 8);  // 9 steps less 1 of warm-up
      EXPECT_EQ(r.reports.size(), 2u + 2u);       // after steps 4 and 8, and 2 epoch ends
    }
  }
  EXPECT_EQ(steps[0], 9);
  EXPECT_EQ(steps[1], 9);
  EXPECT_EQ(finals[0], finals[1]);
}

// The environment reaches a Trainer only through apply_environment, which the program calls.
TEST(StepObserverTest, EnvironmentOverridesAreAppliedInOnePlace) {
  ::setenv("STOKER_DIAG_MAX_STEPS", "2", 1);
  ::setenv("STOKER_DIAG_SYNTHETIC", "1", 1);
  const TrainerOptions applied = stoker::train::apply_environment({.max_steps = 5});
  EXPECT_EQ(applied.max_steps, 2);
  EXPECT_TRUE(applied.replay_first_batch);
  EXPECT_EQ(stoker::train::apply_environment({.max_steps = 1}).max_steps, 1);  // the smaller
  const auto blobs = stoker::train_test::make_blobs(40, 5);
  for (bool applied_by_program : {true, false}) {
    data::TensorBatches train(blobs.x, blobs.y, {.batch_size = 10, .seed = 1});
    auto model = make_mlp(3);
    stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
    nn::CrossEntropyLoss loss;
    const TrainerOptions options{.progress_bar = false, .quiet = true};
    Trainer t(*model, loss, opt,
              applied_by_program ? stoker::train::apply_environment(options) : options);
    EXPECT_EQ(t.fit(train, 1).steps, applied_by_program ? 2 : 4);
  }
  ::setenv("STOKER_DIAG_MAX_STEPS", "-3", 1);
  EXPECT_THROW(stoker::train::apply_environment({}), stoker::Error);
  ::setenv("STOKER_DIAG_SYNTHETIC", "maybe", 1);
  ::unsetenv("STOKER_DIAG_MAX_STEPS");
  EXPECT_THROW(stoker::train::apply_environment({}), stoker::Error);
  ::unsetenv("STOKER_DIAG_SYNTHETIC");
}

// replay_first_batch trains every step on the source's first batch, for its epoch length.
TEST(StepObserverTest, ReplayFirstBatchKeepsTheEpochLength) {
  const auto blobs = stoker::train_test::make_blobs(40, 6);
  data::TensorBatches train(blobs.x, blobs.y, {.batch_size = 10, .seed = 1});
  auto model = make_mlp(4);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true, .replay_first_batch = true});
  EXPECT_EQ(t.fit(train, 2).steps, 8);
}

}  // namespace

namespace {

// An observer that asks for the end of the run at a given step.
struct StopAt final : StepObserver {
  explicit StopAt(int64_t step) : at(step) {}
  int64_t at;
  Trainer* trainer = nullptr;
  void on_fit_begin(const FitContext& c) override { trainer = &c.trainer; }
  void on_step_done(const StepEnd& s) override {
    if (s.step == at) trainer->request_stop();
  }
};

TEST(StepObserverTest, RequestStopEndsTheFitAfterThatStep) {
  const auto blobs = stoker::train_test::make_blobs(40, 7);
  data::TensorBatches train(blobs.x, blobs.y, {.batch_size = 10, .seed = 1});
  auto model = make_mlp(5);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.log_interval = 100, .progress_bar = false, .quiet = true});
  StopAt stop(6);
  t.add_observer(stop);
  const FitResult r = t.fit(train, 5);
  EXPECT_EQ(r.steps, 6);
  ASSERT_FALSE(r.log.empty());
  EXPECT_EQ(r.log.back().step, 6);  // the window up to the stop is logged
  // The next fit() starts without the request and runs on.
  stop.at = -1;
  EXPECT_EQ(t.fit(train, 1).steps, 10);
}

}  // namespace
