// Diagnostics through the Trainer on the CPU: a run made input-bound on purpose (the Loader
// limited to one thread, large JPEGs to decode) gets "input-bound"; the same run on a replayed
// batch and an MLP on in-memory data get "compute-bound"; traces parse and hold the phases;
// report JSON, baseline cards, environment overrides and the log line's data-wait share.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "diag/diagnostics.h"
#include "diag/replay_source.h"
#include "stoker/data/loader.h"
#include "stoker/data/pack.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/pool.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace fs = std::filesystem;
namespace data = stoker::data;
namespace diag = stoker::diag;
namespace nn = stoker::nn;
using stoker::DType;
using stoker::Tensor;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

namespace {

class TrainerDiagTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("stoker_diag_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Large images for a small model: decoding dominates the step.
    data::pack_synth({.samples = 48, .classes = 4, .size = 512, .seed = 5}, dir_ / "big",
                     {.threads = 2, .progress = false});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // An image classifier that costs next to nothing beside decoding a 512x512 JPEG per sample:
  // average colour -> class.
  static std::unique_ptr<nn::Sequential> small_image_model() {
    nn::manual_seed(3);
    auto m = std::make_unique<nn::Sequential>();
    m->add(nn::make<nn::GlobalAvgPool>());
    m->add(nn::make<nn::Flatten>());
    m->add(nn::make<nn::Linear>(3, 4));
    return m;
  }

  static std::unique_ptr<nn::Sequential> mlp(int64_t in, int64_t width, int64_t out) {
    nn::manual_seed(7);
    auto m = std::make_unique<nn::Sequential>();
    m->add(nn::make<nn::Linear>(in, width));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::Linear>(width, width));
    m->add(nn::make<nn::ReLU>());
    m->add(nn::make<nn::Linear>(width, out));
    return m;
  }

  static data::TensorBatches blobs(int64_t n, int64_t dim, int64_t batch) {
    Tensor x = Tensor::empty({n, dim}, DType::f32);
    stoker::ops::random_normal(x, 0.0f, 1.0f, 1, 0);
    std::vector<int64_t> labels(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % 3;
    return data::TensorBatches(x, Tensor::from_vector(labels, {n}),
                               {.batch_size = batch, .seed = 2});
  }

  static fs::path dir_;
};
fs::path TrainerDiagTest::dir_;

TEST_F(TrainerDiagTest, OneLoaderThreadAndHeavyDecodeIsInputBound) {
  data::LmdbImageDataset ds(dir_ / "big");
  const int size = 224;
  data::Loader loader(ds, {.batch_size = 16,
                           .threads = 1,
                           .prefetch = 2,
                           .transform = {.output_size = size},
                           .seed = 1});
  auto model = small_image_model();
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.01f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.log_interval = 3, .progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 2;
  Trainer trainer(*model, loss, opt, o);
  const auto result = trainer.fit(loader, 4);  // 3 batches per epoch: 12 steps
  ASSERT_NE(trainer.diagnostics(), nullptr);
  const diag::Report& r = result.diagnosis;
  EXPECT_EQ(r.breakdown.steps, 10) << r.text();
  EXPECT_EQ(r.verdict, diag::Verdict::input_bound) << r.text();
  EXPECT_EQ(r.level, diag::Level::high) << r.text();
  // At least the "high" threshold; typically 60-80 %, less when other jobs share the cores.
  EXPECT_GE(r.breakdown.input_share, 0.2) << r.text();
  // The advice quotes the loader's rates and names the fix.
  ASSERT_FALSE(r.advice.empty());
  EXPECT_NE(r.advice.front().find("loader delivers"), std::string::npos) << r.advice.front();
  EXPECT_NE(r.advice.front().find("raise LoaderOptions::threads to "), std::string::npos)
      << r.advice.front();
  EXPECT_TRUE(r.loader.is_loader);
  EXPECT_EQ(r.loader.threads, 1);
  EXPECT_GT(r.loader.decode_ms, 0.0);
  EXPECT_LT(r.loader.capacity_samples_per_s, r.breakdown.demand_samples_per_s);
  // One report per epoch (the first two steps are warm-up), and the log line's share.
  EXPECT_EQ(result.reports.size(), 4u);
  EXPECT_EQ(result.reports.front().breakdown.steps, 1);
  // Each log line carries its window's data-wait share. The last window's is the least (the
  // loader prepares the next epoch's first batches while the current one ends; a loaded CI
  // machine measured 0.13 there), so the test asks it of the most input-bound window.
  ASSERT_FALSE(result.log.empty());
  double most = 0.0;
  for (const auto& line : result.log) {
    EXPECT_GE(line.data_wait_share, 0.0);
    EXPECT_LE(line.data_wait_share, 1.0);
    most = std::max(most, line.data_wait_share);
  }
  EXPECT_GT(most, 0.2);
}

TEST_F(TrainerDiagTest, SyntheticDataAblationRemovesTheInputBottleneck) {
  data::LmdbImageDataset ds(dir_ / "big");
  const int size = 224;
  data::Loader loader(ds, {.batch_size = 16,
                           .threads = 1,
                           .prefetch = 2,
                           .transform = {.output_size = size},
                           .seed = 1});
  auto model = small_image_model();
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.01f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 2;
  diag::ReplaySource replay(loader);
  Trainer trainer(*model, loss, opt, o);
  const auto result = trainer.fit(replay, 4);
  EXPECT_EQ(result.steps, 12);  // the real source's epoch length
  const diag::Report& r = result.diagnosis;
  EXPECT_EQ(r.verdict, diag::Verdict::compute_bound) << r.text();
  EXPECT_LT(r.breakdown.input_share, 0.05) << r.text();
  EXPECT_NE(r.loader.kind.find("synthetic"), std::string::npos);
}

// Diagnostics reads a source's pipeline through BatchSource::pipeline(), whatever its class: a
// source of its own kind (not a data::Loader) with a worker pipeline gets its counters, tuning
// and summary into the report, and one without gets its kind and nothing measured.
class PipelinedBatches : public data::BatchSource, public data::InputPipeline {
 public:
  explicit PipelinedBatches(data::TensorBatches inner) : inner_(std::move(inner)) {}
  void start_epoch(int64_t e) override { inner_.start_epoch(e); }
  bool next(data::Batch& b) override {
    if (!inner_.next(b)) return false;
    counters_.batches += 1;
    counters_.samples += b.size;
    counters_.samples_decoded += b.size;
    counters_.worker_s += 1e-3 * static_cast<double>(b.size);  // 1 ms of work per sample
    counters_.decode_s += 0.5e-3 * static_cast<double>(b.size);
    return true;
  }
  int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return inner_.samples_per_epoch(); }
  int64_t epoch() const override { return inner_.epoch(); }
  int64_t batch_index() const override { return inner_.batch_index(); }
  void restore(int64_t e, int64_t b) override { inner_.restore(e, b); }
  std::string kind() const override { return "PipelinedBatches"; }
  const data::InputPipeline* pipeline() const override { return this; }
  data::LoaderCounters counters() const override { return counters_; }
  data::LoaderTuning tuning() const override { return {.threads = 3, .prefetch = 5}; }
  int max_threads() const override { return 7; }
  bool threads_fixed() const override { return true; }
  int64_t ready_batches() const override { return 2; }
  int output_size() const override { return 0; }
  std::string summary() const override { return "3 workers of my own"; }

 private:
  data::TensorBatches inner_;
  data::LoaderCounters counters_;
};

TEST_F(TrainerDiagTest, AnySourceWithAPipelineReachesTheReportThroughBatchSource) {
  PipelinedBatches source(blobs(512, 16, 64));
  auto model = mlp(16, 32, 3);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.01f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.log_interval = 4, .progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 1;
  Trainer trainer(*model, loss, opt, o);
  const diag::Report r = trainer.fit(source, 1).diagnosis;
  EXPECT_EQ(r.loader.kind, "PipelinedBatches");
  EXPECT_TRUE(r.loader.is_loader);
  EXPECT_EQ(r.loader.threads, 3);
  EXPECT_EQ(r.loader.prefetch, 5);
  EXPECT_EQ(r.loader.max_threads, 7);
  EXPECT_TRUE(r.loader.threads_fixed);
  EXPECT_EQ(r.loader.summary, "3 workers of my own");
  EXPECT_GT(r.loader.samples_decoded, 0);
  EXPECT_NEAR(r.loader.worker_s_per_sample, 1e-3, 1e-9);
  EXPECT_NEAR(r.loader.capacity_samples_per_s, 3 / 1e-3, 1e-3);
}

TEST_F(TrainerDiagTest, InMemoryMlpIsComputeBoundAndTraceHoldsThePhases) {
  auto batches = blobs(2048, 256, 256);
  auto model = mlp(256, 512, 3);
  stoker::optim::AdamW opt(model->named_parameters());
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.grad_accum_steps = 2, .log_interval = 2, .progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 1;
  o.diagnostics.report_interval = 2;
  o.diagnostics.trace_path = dir_ / "trace.json";
  o.diagnostics.report_json = dir_ / "report.json";
  Trainer trainer(*model, loss, opt, o);
  const auto result = trainer.fit(batches, 2);  // 4 steps of 2 micro-batches per epoch
  const diag::Report& r = result.diagnosis;
  EXPECT_EQ(r.breakdown.steps, 7);
  EXPECT_EQ(r.verdict, diag::Verdict::compute_bound) << r.text();
  EXPECT_EQ(r.loader.kind, "TensorBatches");
  EXPECT_GT(r.breakdown.host[static_cast<int>(diag::Phase::backward)].median_ms, 0.0);
  EXPECT_EQ(r.breakdown.host[static_cast<int>(diag::Phase::comm)].median_ms, 0.0);
  EXPECT_EQ(r.breakdown.max_host_syncs, 0);  // none inside a CPU step
  // Reports every 2 steps and at each epoch end.
  EXPECT_GE(result.reports.size(), 4u);

  // The trace: valid JSON in Chrome's trace-event format with every phase of every step.
  std::ifstream f(dir_ / "trace.json");
  ASSERT_TRUE(f.good());
  const auto trace = nlohmann::json::parse(f);
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::set<std::string> names;
  int steps = 0, data_spans = 0;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid"));
    const std::string name = e["name"];
    names.insert(name);
    if (e["ph"] == "X") {
      ASSERT_TRUE(e.contains("ts") && e.contains("dur"));
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      if (name.rfind("step ", 0) == 0) ++steps;
      if (name == "data") ++data_spans;
    }
  }
  for (const char* phase :
       {"data", "forward", "backward", "optimizer", "process_name", "thread_name"})
    EXPECT_TRUE(names.count(phase)) << phase;
  EXPECT_EQ(steps, 7);
  EXPECT_EQ(data_spans, 14);  // two micro-batches per step

  std::ifstream rj(dir_ / "report.json");
  const auto report = nlohmann::json::parse(rj);
  EXPECT_EQ(report["verdict"], "compute-bound");
  EXPECT_EQ(report["steps"], 7);
}

TEST_F(TrainerDiagTest, BaselineSavedThenComparedAndEnvironmentOverrides) {
  const fs::path card = dir_ / "card.json";
  auto run = [&](bool save) {
    auto batches = blobs(1024, 64, 128);
    auto model = mlp(64, 128, 3);
    stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.progress_bar = false, .quiet = true};
    o.diagnostics.enabled = true;
    o.diagnostics.warmup_steps = 1;
    (save ? o.diagnostics.baseline_save : o.diagnostics.baseline_compare) = card;
    Trainer trainer(*model, loss, opt, o);
    trainer.fit(batches, 3);
    return trainer.diagnostics()->comparison();
  };
  EXPECT_FALSE(run(true).has_value());
  ASSERT_TRUE(fs::exists(card));
  const auto cmp = run(false);
  ASSERT_TRUE(cmp.has_value());
  EXPECT_TRUE(cmp->comparable);
  EXPECT_TRUE(cmp->environment_changes.empty()) << cmp->text();
  EXPECT_GE(cmp->metrics.size(), 6u);

  // Environment: STOKER_DIAG turns diagnostics on in a program that applies the environment
  // (train::apply_environment); MAX_STEPS cuts it.
  ::setenv("STOKER_DIAG", "1", 1);
  ::setenv("STOKER_DIAG_MAX_STEPS", "3", 1);
  ::setenv("STOKER_DIAG_REPORT_JSON", (dir_ / "env_report.json").c_str(), 1);
  ::setenv("STOKER_DIAG_WARMUP", "0", 1);
  {
    auto batches = blobs(512, 64, 64);
    auto model = mlp(64, 64, 3);
    stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
    nn::CrossEntropyLoss loss;
    Trainer trainer(*model, loss, opt,
                    stoker::train::apply_environment({.progress_bar = false, .quiet = true}));
    const auto result = trainer.fit(batches, 5);
    EXPECT_NE(trainer.diagnostics(), nullptr);
    EXPECT_EQ(result.steps, 3);
    EXPECT_EQ(result.diagnosis.breakdown.steps, 3);
  }
  for (const char* v :
       {"STOKER_DIAG", "STOKER_DIAG_MAX_STEPS", "STOKER_DIAG_REPORT_JSON", "STOKER_DIAG_WARMUP"})
    ::unsetenv(v);
  EXPECT_TRUE(fs::exists(dir_ / "env_report.json"));
  ::setenv("STOKER_DIAG_INTERVAL", "x", 1);
  EXPECT_THROW(stoker::train::apply_environment({}), stoker::Error);
  ::unsetenv("STOKER_DIAG_INTERVAL");
}

TEST_F(TrainerDiagTest, DisabledByDefaultWithTheDataWaitShareInTheLog) {
  auto batches = blobs(256, 16, 32);
  auto model = mlp(16, 16, 3);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
  nn::CrossEntropyLoss loss;
  Trainer trainer(*model, loss, opt, {.log_interval = 4, .progress_bar = false, .quiet = true});
  EXPECT_EQ(trainer.diagnostics(), nullptr);
  const auto result = trainer.fit(batches, 1);
  EXPECT_TRUE(result.reports.empty());
  EXPECT_EQ(result.diagnosis.breakdown.steps, 0);
  ASSERT_FALSE(result.log.empty());
  for (const auto& st : result.log) {
    EXPECT_GE(st.data_wait_share, 0.0);
    EXPECT_LE(st.data_wait_share, 1.0);
  }
}

// The curves of a real fit: one timeline point per timed step with its epoch and the logged
// losses, the evaluations timed as their own phase, the CSV files and the HTML report written
// at the end of fit() (no GPU monitor on the CPU: the GPU file has its header only).
TEST_F(TrainerDiagTest, CurvesAndTheHtmlReportOfAFit) {
  data::TensorBatches train = blobs(512, 16, 64), validation = blobs(128, 16, 64);
  auto model = mlp(16, 32, 3);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.05f});
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.log_interval = 4, .progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 2;
  o.diagnostics.timeline_csv = dir_ / "curves" / "timeline.csv";
  o.diagnostics.gpu_csv = dir_ / "curves" / "gpu.csv";
  o.diagnostics.html_report = dir_ / "curves" / "report.html";
  Trainer trainer(*model, loss, opt, o);
  const auto result = trainer.fit(train, 3, &validation);  // 8 steps per epoch
  ASSERT_EQ(result.steps, 24);
  const diag::Diagnostics* d = trainer.diagnostics();
  ASSERT_NE(d, nullptr);
  const auto& tl = d->timeline();
  ASSERT_EQ(tl.size(), 22u);  // the first 2 steps are warm-up
  EXPECT_EQ(tl.front().step, 3);
  EXPECT_EQ(tl.back().step, 24);
  int losses = 0;
  for (size_t i = 0; i < tl.size(); ++i) {
    EXPECT_EQ(tl[i].epoch, (tl[i].step - 1) / 8) << tl[i].step;
    EXPECT_GT(tl[i].step_ms, 0);
    EXPECT_GE(tl[i].data_wait_ms, 0);
    EXPECT_LE(tl[i].data_wait_ms, tl[i].step_ms);
    if (i > 0) EXPECT_GT(tl[i].time_s, tl[i - 1].time_s);
    if (std::isfinite(tl[i].loss)) {
      ++losses;
      EXPECT_EQ(tl[i].step % 4, 0) << "a loss at a step without a log line";
    }
  }
  EXPECT_EQ(losses, 6);  // steps 4, 8, ..., 24
  // Evaluation after each epoch, timed apart from the steps.
  ASSERT_EQ(d->evaluations().size(), 3u);
  EXPECT_EQ(d->evaluations()[0].step, 8);
  const diag::CurveAnalysis& c = result.diagnosis.curves;
  EXPECT_EQ(c.evaluations, 3);
  EXPECT_GT(c.eval_share, 0.0);
  EXPECT_NEAR(c.eval_s, result.eval_seconds, 1e-9);
  // Epochs of 6, 8 and 8 timed steps are too short for a trend (slowdown_min_steps 10), and so
  // are quarters of 22 steps: no segment, no finding.
  EXPECT_TRUE(c.slowdown.segments.empty());
  // The epoch reports hold the curves so far.
  ASSERT_EQ(result.reports.size(), 3u);
  EXPECT_EQ(result.reports.back().curves.evaluations, 3);
  EXPECT_NE(result.reports.back().text().find("diag  curves  evaluation"), std::string::npos);
  // Files.
  std::ifstream tin(dir_ / "curves" / "timeline.csv");
  std::string line;
  int rows = -1;
  while (std::getline(tin, line)) ++rows;
  EXPECT_EQ(rows, 22);
  std::ifstream gin(dir_ / "curves" / "gpu.csv");
  std::getline(gin, line);
  EXPECT_EQ(line.rfind("time_s,util_gpu,", 0), 0u);
  EXPECT_FALSE(std::getline(gin, line));
  std::ifstream hin(dir_ / "curves" / "report.html");
  std::stringstream html;
  html << hin.rdbuf();
  EXPECT_NE(html.str().find("data-series=\"step_ms\" data-points=\"22\""), std::string::npos);
  EXPECT_NE(html.str().find("data-series=\"loss\" data-points=\"6\""), std::string::npos);
  EXPECT_NE(html.str().find("Static checks"), std::string::npos);
  EXPECT_NE(html.str().find(std::string("\">") + diag::verdict_name(result.diagnosis.verdict)),
            std::string::npos)
      << diag::verdict_name(result.diagnosis.verdict);
}

}  // namespace
