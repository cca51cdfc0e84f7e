// The Trainer for long runs: evaluation inside fit() (every N steps or each epoch's end, a
// subset, timed apart from the steps), the metrics file (JSON Lines, continued across a resume
// without duplicates), resume_latest() falling back past damaged checkpoints, checkpoints by wall
// time, the times and ETA of the log lines, and a zero-step fit() of a complete resumed run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/trainer.h"
#include "test_util.h"
#include "train/metrics_log.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
namespace data = stoker::data;
using stoker::train::EvalRecord;
using stoker::train::FitResult;
using stoker::train::MetricsLog;
using stoker::train::SafetensorsReader;
using stoker::train::StepStats;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;
using Json = nlohmann::json;

namespace {

using stoker::train_test::Blobs;
using stoker::train_test::byte_of_tensor;
using stoker::train_test::flip_byte;
using stoker::train_test::make_blobs;

// The first n samples of b, copied.
Blobs head(const Blobs& b, int64_t n) {
  const std::vector<float> x = b.x.to_vector<float>();
  const std::vector<int64_t> y = b.y.to_vector<int64_t>();
  return {Tensor::from_vector(std::vector<float>(x.begin(), x.begin() + n * 8), {n, 8}),
          Tensor::from_vector(std::vector<int64_t>(y.begin(), y.begin() + n), {n})};
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

std::vector<int64_t> steps_of(const std::vector<EvalRecord>& evals) {
  std::vector<int64_t> out;
  for (const auto& e : evals) out.push_back(e.step);
  return out;
}

// Offset in the file of byte `k` of tensor `name`'s data (past the header).

void damage(const fs::path& checkpoint) {
  flip_byte(checkpoint, byte_of_tensor(checkpoint, "model.0.weight", 9));
}

std::string meta(const fs::path& checkpoint, const std::string& key) {
  const SafetensorsReader r(checkpoint);
  const auto it = r.metadata().find(key);
  return it == r.metadata().end() ? "(none)" : it->second;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Every line of a metrics file, parsed (a line that does not parse fails the test).
std::vector<Json> metrics_lines(const fs::path& p) {
  std::vector<Json> out;
  const std::string text = read_text(p);
  EXPECT_TRUE(text.empty() || text.back() == '\n') << "the last line of " << p << " is torn";
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    try {
      out.push_back(Json::parse(line));
      EXPECT_TRUE(out.back().is_object()) << line;
    } catch (const Json::exception& e) {
      ADD_FAILURE() << p << ": a line does not parse (" << e.what() << "): " << line;
    }
  }
  return out;
}

std::vector<Json> of_kind(const std::vector<Json>& lines, const std::string& kind) {
  std::vector<Json> out;
  for (const Json& j : lines)
    if (j.value("kind", "") == kind) out.push_back(j);
  return out;
}

// (step, loss) of train lines and (step, val_loss) of eval lines, in file order.
using Points = std::vector<std::pair<int64_t, double>>;
Points points(const std::vector<Json>& lines, const std::string& kind, const std::string& field) {
  Points out;
  for (const Json& j : of_kind(lines, kind))
    out.emplace_back(j.at("step").get<int64_t>(), j.at(field).get<double>());
  return out;
}

bool strictly_increasing_steps(const Points& p) {
  for (size_t i = 1; i < p.size(); ++i)
    if (p[i].first <= p[i - 1].first) return false;
  return true;
}

// A source that takes `delay` for every batch (a slow validation set).
class SlowSource : public data::BatchSource {
 public:
  SlowSource(data::BatchSource& inner, std::chrono::milliseconds delay)
      : inner_(inner), delay_(delay) {}
  void start_epoch(int64_t epoch) override { inner_.start_epoch(epoch); }
  bool next(data::Batch& batch) override {
    std::this_thread::sleep_for(delay_);
    return inner_.next(batch);
  }
  int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return inner_.samples_per_epoch(); }
  int64_t epoch() const override { return inner_.epoch(); }
  int64_t batch_index() const override { return inner_.batch_index(); }
  void restore(int64_t epoch, int64_t batch_index) override { inner_.restore(epoch, batch_index); }

 private:
  data::BatchSource& inner_;
  std::chrono::milliseconds delay_;
};

class TrainerLongRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_long_run_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// A small run: `samples` training samples in batches of 10 (shuffled, seed 99), an MLP with
// dropout, AdamW; validation on 30 samples in batches of 10.
struct RunSpec {
  int64_t samples = 100;
  int64_t epochs = 1;
  TrainerOptions options{.log_interval = 2, .progress_bar = false, .quiet = true};
  bool validate = true;
  fs::path resume_from;
  bool resume_latest = false;
};

struct RunResult {
  FitResult fit;
  std::vector<EvalRecord> callback_evals;
  std::vector<std::vector<float>> weights;
  int64_t resumed_step = -1;
};

RunResult run(const RunSpec& r) {
  const Blobs train = make_blobs(r.samples, 5), val = make_blobs(30, 77);
  auto model = make_mlp(13, 0.2f);
  stoker::optim::AdamW opt(model->named_parameters(), {.lr = 1e-2f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, r.options);
  RunResult out;
  t.add_eval_callback([&](const EvalRecord& e) { out.callback_evals.push_back(e); });
  if (!r.resume_from.empty()) t.resume(r.resume_from);
  if (r.resume_latest) t.resume_latest(r.options.checkpoint_dir);
  out.resumed_step = t.step();
  data::TensorBatches b(train.x, train.y, {.batch_size = 10, .seed = 99});
  data::TensorBatches v(val.x, val.y, {.batch_size = 10, .shuffle = false});
  out.fit = t.fit(b, r.epochs, r.validate ? &v : nullptr);
  out.weights = weights(*model);
  return out;
}

// every_steps 3 over 10 steps: after steps 3, 6, 9 and the last, 10 — also across epochs (an
// epoch's end is no evaluation then).
TEST_F(TrainerLongRunTest, EvaluatesEveryNStepsAndAfterTheLastStep) {
  for (const int64_t samples : {100, 50}) {  // 1 epoch of 10 steps, 2 of 5
    SCOPED_TRACE(samples);
    RunSpec r{.samples = samples, .epochs = 100 / samples};
    r.options.log_interval = 1;
    r.options.evaluation.every_steps = 3;
    const RunResult res = run(r);
    ASSERT_EQ(res.fit.steps, 10);
    EXPECT_EQ(steps_of(res.fit.evaluations), (std::vector<int64_t>{3, 6, 9, 10}));
    ASSERT_EQ(res.callback_evals.size(), res.fit.evaluations.size());
    double sum = 0;
    for (size_t i = 0; i < res.fit.evaluations.size(); ++i) {
      const EvalRecord& e = res.fit.evaluations[i];
      EXPECT_EQ(res.callback_evals[i].step, e.step);
      EXPECT_EQ(res.callback_evals[i].loss, e.loss);
      EXPECT_EQ(e.samples, 30);
      EXPECT_GE(e.accuracy, 0.0);
      EXPECT_LE(e.accuracy, 1.0);
      EXPECT_GT(e.loss, 0.0);
      EXPECT_GT(e.seconds, 0.0);
      EXPECT_GT(e.share, 0.0);
      EXPECT_LE(e.share, 1.0);
      sum += e.seconds;
    }
    if (samples == 50) {
      EXPECT_EQ(res.fit.evaluations[0].epoch, 0);
      EXPECT_EQ(res.fit.evaluations[1].epoch, 1);
      EXPECT_EQ(res.fit.evaluations[3].epoch, 1);
    }
    EXPECT_NEAR(res.fit.eval_seconds, sum, 1e-9);
    // The log line of step 1 comes before any evaluation, the last one after three.
    ASSERT_EQ(res.fit.log.size(), 10u);
    EXPECT_EQ(res.fit.log.front().eval_share, 0.0);
    EXPECT_GT(res.fit.log.back().eval_share, 0.0);
    EXPECT_LE(res.fit.log.back().eval_share, 1.0);
  }
}

// The last evaluation is of the weights fit() returns with.
TEST_F(TrainerLongRunTest, TheLastEvaluationIsOfTheFinalWeights) {
  const Blobs train = make_blobs(100, 5), val = make_blobs(30, 77);
  auto model = make_mlp(13, 0.2f);
  stoker::optim::AdamW opt(model->named_parameters(), {.lr = 1e-2f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.progress_bar = false, .quiet = true};
  o.evaluation.every_steps = 4;
  Trainer t(*model, loss, opt, o);
  data::TensorBatches b(train.x, train.y, {.batch_size = 10, .seed = 99});
  data::TensorBatches v(val.x, val.y, {.batch_size = 10, .shuffle = false});
  const FitResult res = t.fit(b, 1, &v);
  ASSERT_EQ(steps_of(res.evaluations), (std::vector<int64_t>{4, 8, 10}));
  const auto after = t.evaluate(v);
  EXPECT_EQ(res.evaluations.back().loss, after.loss);
  EXPECT_EQ(res.evaluations.back().accuracy, after.accuracy);
  // Evaluation left the model training: the same run without validation ends with the same
  // weights (evaluation draws no dropout masks and changes nothing).
  const RunResult plain = run({.samples = 100, .epochs = 1, .validate = false});
  EXPECT_EQ(weights(*model), plain.weights);
}

// every_steps 0: after each epoch's last step, and after fit()'s last step when max_steps stops
// it inside an epoch.
TEST_F(TrainerLongRunTest, EveryStepsZeroEvaluatesAtEachEpochsEnd) {
  {
    const RunResult res = run({.samples = 40, .epochs = 3});  // 4 steps an epoch
    EXPECT_EQ(steps_of(res.fit.evaluations), (std::vector<int64_t>{4, 8, 12}));
    ASSERT_EQ(res.fit.evaluations.size(), 3u);
    for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(res.fit.evaluations[e].epoch, e);
  }
  {
    RunSpec r{.samples = 40, .epochs = 3};
    r.options.max_steps = 10;
    const RunResult res = run(r);
    EXPECT_EQ(res.fit.steps, 10);
    EXPECT_EQ(steps_of(res.fit.evaluations), (std::vector<int64_t>{4, 8, 10}));
  }
  {
    const RunResult res = run({.samples = 40, .epochs = 3, .validate = false});
    EXPECT_TRUE(res.fit.evaluations.empty());
    EXPECT_TRUE(res.callback_evals.empty());
    EXPECT_EQ(res.fit.eval_seconds, 0.0);
    for (const StepStats& s : res.fit.log) EXPECT_EQ(s.eval_share, 0.0);
  }
}

// max_samples takes the first samples of epoch 0 in whole batches: 25 of batches of 10 are 30.
TEST_F(TrainerLongRunTest, MaxSamplesEvaluatesTheFirstWholeBatches) {
  const Blobs val = make_blobs(50, 77);
  const Blobs first30 = head(val, 30);
  auto model = make_mlp(13, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  data::TensorBatches v(val.x, val.y, {.batch_size = 10, .shuffle = false});
  data::TensorBatches v30(first30.x, first30.y, {.batch_size = 10, .shuffle = false});
  EXPECT_EQ(t.evaluate(v).samples, 50);
  EXPECT_EQ(t.evaluate(v, 0).samples, 50);
  EXPECT_EQ(t.evaluate(v, 1000).samples, 50);
  EXPECT_EQ(t.evaluate(v, 1).samples, 10);
  EXPECT_EQ(t.evaluate(v, 30).samples, 30);
  const auto sub = t.evaluate(v, 25);
  EXPECT_EQ(sub.samples, 30);
  const auto ref = t.evaluate(v30);
  EXPECT_DOUBLE_EQ(sub.loss, ref.loss);
  EXPECT_EQ(sub.accuracy, ref.accuracy);
  EXPECT_NE(sub.loss, t.evaluate(v).loss);
  EXPECT_THROW(t.evaluate(v, -1), stoker::Error);

  RunSpec r{.samples = 100, .epochs = 1};
  r.options.evaluation = {.every_steps = 5, .max_samples = 15};
  const RunResult res = run(r);
  ASSERT_EQ(res.fit.evaluations.size(), 2u);
  for (const EvalRecord& e : res.fit.evaluations) EXPECT_EQ(e.samples, 20);
  // Negative settings are refused before the first step.
  RunSpec bad{.samples = 100, .epochs = 1};
  bad.options.evaluation.every_steps = -1;
  EXPECT_THROW(run(bad), stoker::Error);
}

// A slow validation set (100 ms a batch): its time is in eval_seconds and the shares, not in
// the steps' ms/step.
TEST_F(TrainerLongRunTest, EvaluationTimeIsLeftOutOfTheStepTime) {
  const Blobs train = make_blobs(100, 5), val = make_blobs(10, 77);
  auto model = make_mlp(13, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.log_interval = 10, .progress_bar = false, .quiet = true};
  o.evaluation.every_steps = 5;
  Trainer t(*model, loss, opt, o);
  data::TensorBatches b(train.x, train.y, {.batch_size = 10, .seed = 99});
  data::TensorBatches v(val.x, val.y, {.batch_size = 10, .shuffle = false});
  SlowSource slow(v, std::chrono::milliseconds(100));
  const FitResult res = t.fit(b, 1, &slow);
  ASSERT_EQ(steps_of(res.evaluations), (std::vector<int64_t>{5, 10}));
  ASSERT_EQ(res.log.size(), 1u);  // step 10, before its evaluation: the one of step 5 inside
  // Each evaluation waits at least 2 x 100 ms (the batch, then the end of the epoch).
  EXPECT_GE(res.eval_seconds, 0.4);
  // Were the evaluation of step 5 counted, ms/step would be at least 20.
  EXPECT_LT(res.log[0].ms_per_step, 10.0) << res.log[0].ms_per_step;
  EXPECT_GT(res.log[0].eval_share, 0.3);
  EXPECT_LE(res.log[0].eval_share, 1.0);
  EXPECT_GT(res.evaluations.back().share, 0.3);
  EXPECT_LE(res.evaluations.back().share, 1.0);
}

// The log lines' times and ETA: total_steps is where this fit() ends, eta_s reaches 0 there.
TEST_F(TrainerLongRunTest, LogLinesCarryElapsedTimeTotalStepsAndEta) {
  const RunResult res = run({.samples = 100, .epochs = 1, .validate = false});
  ASSERT_EQ(res.fit.log.size(), 5u);
  double elapsed = 0;
  for (const StepStats& s : res.fit.log) {
    EXPECT_EQ(s.total_steps, 10);
    EXPECT_GE(s.elapsed_s, elapsed);
    elapsed = s.elapsed_s;
    EXPECT_GE(s.eta_s, 0.0);
  }
  EXPECT_GT(res.fit.log.front().eta_s, 0.0);
  EXPECT_EQ(res.fit.log.back().eta_s, 0.0);
  EXPECT_LE(res.fit.log.back().elapsed_s, res.fit.seconds);
  RunSpec capped{.samples = 50, .epochs = 4, .validate = false};
  capped.options.max_steps = 7;
  for (const StepStats& s : run(capped).fit.log) EXPECT_EQ(s.total_steps, 7);
}

// Every line parses; a start line, then train lines equal to FitResult::log and eval lines equal
// to FitResult::evaluations.
TEST_F(TrainerLongRunTest, MetricsLinesMatchTheLogAndTheEvaluations) {
  const fs::path metrics = dir_ / "sub" / "metrics.jsonl";  // the folder is created
  RunSpec r{.samples = 100, .epochs = 1};
  r.options.metrics_path = metrics;
  r.options.evaluation.every_steps = 5;
  const RunResult res = run(r);
  const std::vector<Json> lines = metrics_lines(metrics);
  ASSERT_FALSE(lines.empty());
  for (const Json& j : lines) {
    ASSERT_TRUE(j.contains("kind")) << j.dump();
    ASSERT_TRUE(j.contains("step")) << j.dump();
    const std::string kind = j["kind"];
    EXPECT_TRUE(kind == "start" || kind == "train" || kind == "eval") << kind;
  }
  EXPECT_EQ(lines.front()["kind"], "start");
  EXPECT_EQ(lines.front()["step"], 0);
  EXPECT_EQ(lines.front()["total_steps"], 10);
  EXPECT_EQ(lines.front()["batch_size"], 10);
  EXPECT_TRUE(lines.front()["resumed_from"].is_null());
  EXPECT_EQ(of_kind(lines, "start").size(), 1u);

  const auto train = of_kind(lines, "train");
  ASSERT_EQ(train.size(), res.fit.log.size());
  for (size_t i = 0; i < train.size(); ++i) {
    const StepStats& s = res.fit.log[i];
    EXPECT_EQ(train[i]["step"].get<int64_t>(), s.step);
    EXPECT_EQ(train[i]["epoch"].get<int64_t>(), s.epoch);
    EXPECT_EQ(train[i]["loss"].get<double>(), s.loss);
    EXPECT_FLOAT_EQ(train[i]["lr"].get<float>(), s.lr);
    EXPECT_EQ(train[i]["total_steps"].get<int64_t>(), 10);
    EXPECT_DOUBLE_EQ(train[i]["eval_share"].get<double>(), s.eval_share);
  }
  const auto evals = of_kind(lines, "eval");
  ASSERT_EQ(evals.size(), res.fit.evaluations.size());
  ASSERT_EQ(evals.size(), 2u);
  for (size_t i = 0; i < evals.size(); ++i) {
    const EvalRecord& e = res.fit.evaluations[i];
    EXPECT_EQ(evals[i]["step"].get<int64_t>(), e.step);
    EXPECT_EQ(evals[i]["val_loss"].get<double>(), e.loss);
    EXPECT_EQ(evals[i]["val_accuracy"].get<double>(), e.accuracy);
    EXPECT_EQ(evals[i]["samples"].get<int64_t>(), 30);
  }
  // The eval line of step 5 comes after the train lines up to step 5 and before step 6's.
  size_t eval5 = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i]["kind"] == "eval" && lines[i]["step"] == 5) eval5 = i;
  ASSERT_GT(eval5, 0u);
  EXPECT_LE(lines[eval5 - 1]["step"].get<int64_t>(), 5);
  EXPECT_GT(lines[eval5 + 1]["step"].get<int64_t>(), 5);
  // A new run (no resume) starts the file afresh.
  run(r);
  EXPECT_EQ(of_kind(metrics_lines(metrics), "start").size(), 1u);
}

// A run stopped after a checkpoint (lines written past it), resumed from that checkpoint: the
// metrics file equals the uninterrupted run's, without duplicated steps, and the end is the
// same bit for bit. Two cases: the checkpoint follows the evaluation of its step (every_steps 4,
// checkpoint_interval 4: the line is kept and the evaluation does not run again) and precedes it
// (an epoch's end with every_steps 0: the line is dropped and the evaluation runs again).
TEST_F(TrainerLongRunTest, AResumedRunContinuesTheMetricsFileWithoutDuplicates) {
  struct Case {
    int64_t samples, epochs, every_steps, interval, stop_at, resume_at;
    std::string evaluated_step;  // stoker.evaluated_step of the checkpoint resumed
    std::vector<int64_t> resumed_evals;
  };
  for (const Case& c : {Case{100, 2, 4, 4, 11, 8, "8", {12, 16, 20}},
                        Case{50, 4, 0, 5, 7, 5, "-1", {5, 10, 15, 20}}}) {
    SCOPED_TRACE(c.every_steps);
    const fs::path a = dir_ / ("a" + std::to_string(c.every_steps));
    const fs::path b = dir_ / ("b" + std::to_string(c.every_steps));
    auto make = [&](const fs::path& where, int64_t max_steps) {
      RunSpec r{.samples = c.samples, .epochs = c.epochs};
      r.options.checkpoint_dir = where;
      r.options.checkpoint_interval = c.interval;
      r.options.metrics_path = where / "metrics.jsonl";
      r.options.evaluation.every_steps = c.every_steps;
      r.options.max_steps = max_steps;
      return r;
    };
    const RunResult straight = run(make(a, -1));
    ASSERT_EQ(straight.fit.steps, 20);

    run(make(b, c.stop_at));
    const fs::path ckpt = stoker::train::periodic_checkpoint_path(b, c.resume_at);
    ASSERT_TRUE(fs::exists(ckpt));
    EXPECT_EQ(meta(ckpt, "stoker.evaluated_step"), c.evaluated_step);
    {
      // The stopped run wrote lines past the checkpoint; a kill tore its last line.
      const auto before = metrics_lines(b / "metrics.jsonl");
      ASSERT_FALSE(before.empty());
      EXPECT_EQ(before.back()["step"].get<int64_t>(), c.stop_at);
      std::ofstream(b / "metrics.jsonl", std::ios::app)
          << R"({"kind":"train","step":1,"loss":0.5})";
    }
    RunSpec resumed = make(b, -1);
    resumed.resume_from = ckpt;
    const RunResult res = run(resumed);
    EXPECT_EQ(res.resumed_step, c.resume_at);
    EXPECT_EQ(steps_of(res.fit.evaluations), c.resumed_evals);
    EXPECT_EQ(res.weights, straight.weights);

    const auto la = metrics_lines(a / "metrics.jsonl"), lb = metrics_lines(b / "metrics.jsonl");
    const Points ta = points(la, "train", "loss"), tb = points(lb, "train", "loss");
    const Points ea = points(la, "eval", "val_loss"), eb = points(lb, "eval", "val_loss");
    EXPECT_TRUE(strictly_increasing_steps(tb));
    EXPECT_TRUE(strictly_increasing_steps(eb));
    EXPECT_EQ(ta, tb);
    EXPECT_EQ(ea, eb);
    EXPECT_EQ(ea.size(), c.every_steps == 4 ? 5u : 4u);
    // Both fits of the resumed run started a section; the second names the checkpoint.
    const auto starts = of_kind(lb, "start");
    ASSERT_EQ(starts.size(), 2u);
    EXPECT_EQ(starts[1]["step"].get<int64_t>(), c.resume_at);
    EXPECT_EQ(starts[1]["resumed_from"].get<std::string>(), ckpt.string());
    // The stopped run's checkpoints past the resumed step were set aside.
    EXPECT_TRUE(fs::exists(b / "last.safetensors.abandoned"));
  }
}

// MetricsLog itself: lines up to the resumed step are kept (the eval line of that step only
// when its evaluation is part of the checkpoint), later lines, lines that do not parse and a
// torn last line are dropped, and new lines are appended; a fresh run starts the file afresh.
TEST_F(TrainerLongRunTest, MetricsLogKeepsThePrefixOfTheResumedStep) {
  const fs::path p = dir_ / "m.jsonl";
  const std::string original = R"({"kind":"start","step":0})"
                               "\n"
                               R"({"kind":"train","step":2,"loss":1.5})"
                               "\n"
                               "not json at all\n"
                               R"({"kind":"train","step":4,"loss":1.25})"
                               "\n"
                               R"({"kind":"eval","step":4,"val_loss":1.0})"
                               "\n"
                               R"({"kind":"train","step":6,"loss":1.0})"
                               "\n"
                               R"({"kind":"eval","step":6,"val_loss":0.5})"
                               "\n"
                               R"({"kind":"train","step":3,"lo)";
  auto kinds_and_steps = [&] {
    std::vector<std::string> out;
    for (const Json& j : metrics_lines(p))
      out.push_back(j.value("kind", "?") + std::to_string(j.value("step", -1)));
    return out;
  };
  std::ofstream(p, std::ios::binary) << original;
  {
    MetricsLog log(p, 4, /*evaluated=*/true);
    log.write({{"kind", "start"}, {"step", 4}});
  }
  EXPECT_EQ(kinds_and_steps(),
            (std::vector<std::string>{"start0", "train2", "train4", "eval4", "start4"}));
  std::ofstream(p, std::ios::binary) << original;
  {
    MetricsLog log(p, 4, /*evaluated=*/false);
    log.write({{"kind", "eval"}, {"step", 4}});
    log.write({{"kind", "train"}, {"step", 5}});
  }
  EXPECT_EQ(kinds_and_steps(),
            (std::vector<std::string>{"start0", "train2", "train4", "eval4", "train5"}));
  // A complete-looking last line without its newline is torn too.
  std::ofstream(p, std::ios::binary) << R"({"kind":"train","step":2,"loss":1.5})"
                                        "\n"
                                     << R"({"kind":"train","step":3,"loss":1.0})";
  { MetricsLog log(p, 10, true); }
  EXPECT_EQ(kinds_and_steps(), (std::vector<std::string>{"train2"}));
  // A fresh run (-1) and a missing file start empty.
  std::ofstream(p, std::ios::binary) << original;
  { MetricsLog log(p, -1, false); }
  EXPECT_EQ(read_text(p), "");
  { MetricsLog log(dir_ / "new.jsonl", 8, true); }
  EXPECT_EQ(read_text(dir_ / "new.jsonl"), "");
}

// The newest checkpoints damaged (a byte of their tensor data flipped): resume_latest() names
// them on stderr and resumes the one before; every one damaged: an error naming the folder.
TEST_F(TrainerLongRunTest, ResumeLatestFallsBackPastDamagedCheckpoints) {
  RunSpec first{.samples = 100, .epochs = 1, .validate = false};
  first.options.checkpoint_dir = dir_;
  first.options.checkpoint_interval = 2;
  first.options.max_steps = 6;
  run(first);
  for (const char* f : {"step_2", "step_4", "step_6", "last"})
    ASSERT_TRUE(fs::exists(dir_ / (std::string(f) + ".safetensors"))) << f;
  damage(dir_ / "step_6.safetensors");
  damage(dir_ / "last.safetensors");
  {
    auto model = make_mlp(1, 0.0f);
    stoker::optim::AdamW opt(model->named_parameters());
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
    ::testing::internal::CaptureStderr();
    const auto from = t.resume_latest(dir_);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(from.has_value());
    EXPECT_EQ(*from, dir_ / "step_4.safetensors");
    EXPECT_EQ(t.step(), 4);
    EXPECT_NE(err.find((dir_ / "last.safetensors").string() + " does not resume"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find((dir_ / "step_6.safetensors").string() + " does not resume"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("fails its checksum"), std::string::npos) << err;
    EXPECT_EQ(err.find("step_4.safetensors does not resume"), std::string::npos) << err;
  }
  // Resumed that way, the run goes on to the same end as an uninterrupted one.
  {
    RunSpec again = first;
    again.resume_latest = true;
    ::testing::internal::CaptureStderr();
    const RunResult res = run(again);
    ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(res.resumed_step, 4);
    EXPECT_EQ(res.fit.steps, 6);
    RunSpec plain{.samples = 100, .epochs = 1, .validate = false};
    plain.options.max_steps = 6;
    EXPECT_EQ(res.weights, run(plain).weights);
    EXPECT_TRUE(fs::exists(dir_ / "step_6.safetensors.abandoned"));
  }
  // Every one damaged.
  for (const char* f : {"step_2", "step_4", "step_6", "last"})
    damage(dir_ / (std::string(f) + ".safetensors"));
  auto model = make_mlp(1, 0.0f);
  stoker::optim::AdamW opt(model->named_parameters());
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  const auto before = weights(*model);
  ::testing::internal::CaptureStderr();
  try {
    t.resume_latest(dir_);
    ::testing::internal::GetCapturedStderr();
    FAIL() << "resume_latest resumed a damaged checkpoint";
  } catch (const stoker::Error& e) {
    ::testing::internal::GetCapturedStderr();
    const std::string msg = e.message();
    EXPECT_NE(msg.find("checkpoints of " + dir_.string() + " resumes"), std::string::npos) << msg;
    for (const char* f : {"step_2", "step_4", "step_6", "last"})
      EXPECT_NE(msg.find((dir_ / (std::string(f) + ".safetensors")).string()), std::string::npos)
          << f << ": " << msg;
    EXPECT_FALSE(e.hint().empty());
  }
  EXPECT_EQ(t.step(), 0);
  EXPECT_EQ(weights(*model), before);
}

TEST_F(TrainerLongRunTest, ResumeLatestOfAnEmptyMissingOrUnreadableFolder) {
  auto model = make_mlp(1, 0.0f);
  stoker::optim::AdamW opt(model->named_parameters());
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  EXPECT_FALSE(t.resume_latest(dir_).has_value());
  EXPECT_FALSE(t.resume_latest(dir_ / "missing").has_value());
  std::ofstream(dir_ / "notes.txt") << "not a checkpoint name: not looked at";
  EXPECT_FALSE(t.resume_latest(dir_).has_value());
  EXPECT_EQ(t.step(), 0);
  // Only files under a checkpoint's name that are no checkpoints: an error, not a new run.
  std::ofstream(dir_ / "step_3.safetensors") << "junk";
  ::testing::internal::CaptureStderr();
  try {
    t.resume_latest(dir_);
    ::testing::internal::GetCapturedStderr();
    FAIL() << "no error";
  } catch (const stoker::Error& e) {
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(std::string(e.message()).find(dir_.string()), std::string::npos) << e.what();
    EXPECT_NE(err.find("step_3.safetensors"), std::string::npos) << err;
  }
  EXPECT_EQ(t.step(), 0);
}

// A tiny checkpoint_interval_seconds: a periodic checkpoint at every log line (and only there).
TEST_F(TrainerLongRunTest, CheckpointsByWallTimeAreWrittenAtLogLines) {
  RunSpec r{.samples = 100, .epochs = 1, .validate = false};
  r.options.log_interval = 2;
  r.options.checkpoint_dir = dir_;
  r.options.checkpoint_interval_seconds = 1e-9;
  run(r);
  std::set<int64_t> steps;
  for (const auto& f : stoker::train::list_checkpoints(dir_))
    if (!f.final) steps.insert(f.step);
  EXPECT_EQ(steps, (std::set<int64_t>{2, 4, 6, 8, 10}));
  // With keep_last, retention applies to them as well.
  fs::remove_all(dir_);
  r.options.keep_last = 2;
  run(r);
  steps.clear();
  for (const auto& f : stoker::train::list_checkpoints(dir_))
    if (!f.final) steps.insert(f.step);
  EXPECT_EQ(steps, (std::set<int64_t>{8, 10}));
  // A long interval: none before the end.
  fs::remove_all(dir_);
  r.options.checkpoint_interval_seconds = 3600;
  run(r);
  EXPECT_EQ(stoker::train::list_checkpoints(dir_).size(), 1u);
  // Negative: refused.
  r.options.checkpoint_interval_seconds = -1;
  EXPECT_THROW(run(r), stoker::Error);
}

// A duration that falls due at an epoch's tail log line (between log_interval multiples) is
// written there, at the epoch's end, not after the next epoch's first step.
TEST_F(TrainerLongRunTest, TimeCheckpointsDueAtAnEpochsEndAreWrittenThere) {
  RunSpec r{.samples = 50, .epochs = 3, .validate = false};  // 5 steps an epoch
  r.options.log_interval = 4;
  r.options.checkpoint_dir = dir_;
  r.options.checkpoint_interval_seconds = 1e-9;
  run(r);
  std::set<int64_t> steps;
  for (const auto& f : stoker::train::list_checkpoints(dir_))
    if (!f.final) steps.insert(f.step);
  EXPECT_EQ(steps, (std::set<int64_t>{4, 5, 8, 10, 12, 15}));
}

// fit() of a resumed run that is already complete makes no step and rewrites last.safetensors
// with the resumed position (not the unstarted source's): resuming it again continues where the
// run stands, bit for bit.
TEST_F(TrainerLongRunTest, AZeroStepFitOfACompleteResumedRunKeepsItsPosition) {
  const fs::path last = dir_ / "last.safetensors";
  RunSpec r{.samples = 50, .epochs = 2, .validate = false};  // 5 steps an epoch
  r.options.checkpoint_dir = dir_;
  ASSERT_EQ(run(r).fit.steps, 10);
  EXPECT_EQ(meta(last, "stoker.step"), "10");
  EXPECT_EQ(meta(last, "stoker.epoch"), "2");
  EXPECT_EQ(meta(last, "stoker.batch_index"), "0");
  const std::string generators = meta(last, "stoker.generators");

  RunSpec again = r;
  again.resume_from = last;
  const RunResult noop = run(again);
  EXPECT_EQ(noop.fit.steps, 10);
  EXPECT_TRUE(noop.fit.log.empty());
  EXPECT_EQ(meta(last, "stoker.step"), "10");
  EXPECT_EQ(meta(last, "stoker.epoch"), "2");
  EXPECT_EQ(meta(last, "stoker.batch_index"), "0");
  EXPECT_EQ(meta(last, "stoker.generators"), generators);

  RunSpec longer = again;
  longer.epochs = 3;
  const RunResult continued = run(longer);
  EXPECT_EQ(continued.resumed_step, 10);
  EXPECT_EQ(continued.fit.steps, 15);
  RunSpec straight{.samples = 50, .epochs = 3, .validate = false};
  EXPECT_EQ(continued.weights, run(straight).weights);

  // Stopped by max_steps inside an epoch: the same.
  fs::remove_all(dir_);
  r.options.max_steps = 7;
  run(r);
  EXPECT_EQ(meta(last, "stoker.epoch"), "1");
  EXPECT_EQ(meta(last, "stoker.batch_index"), "2");
  RunSpec stopped = r;
  stopped.resume_from = last;
  EXPECT_EQ(run(stopped).fit.steps, 7);
  EXPECT_EQ(meta(last, "stoker.step"), "7");
  EXPECT_EQ(meta(last, "stoker.epoch"), "1");
  EXPECT_EQ(meta(last, "stoker.batch_index"), "2");
  RunSpec rest = stopped;
  rest.options.max_steps = -1;
  const RunResult finished = run(rest);
  EXPECT_EQ(finished.fit.steps, 10);
  RunSpec whole{.samples = 50, .epochs = 2, .validate = false};
  EXPECT_EQ(finished.weights, run(whole).weights);
}

}  // namespace
