// The files the diagnostics write at the end of fit() (trace, report JSON, baseline card) and
// the card they compare with are checked when fit() starts: a bad path ends the run before its
// first step, with an error naming the option and its environment variable, instead of after
// the last step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
using stoker::diag::DiagnosticsOptions;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

class DiagOutputPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_diag_paths_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "plain") << "not a folder";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Steps that ran and the error message of fit() (empty when it returned) for 4 steps of a
  // linear model with diagnostics `d`.
  std::pair<int, std::string> fit_with(DiagnosticsOptions d) {
    Tensor x = Tensor::empty({64, 4}, DType::f32);
    stoker::ops::random_normal(x, 0.0f, 1.0f, 1, 0);
    std::vector<int64_t> labels(64);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 2);
    stoker::data::TensorBatches batches(x, Tensor::from_vector(labels, {64}), {.batch_size = 16});
    nn::manual_seed(0);
    nn::Sequential model(nn::make<nn::Linear>(4, 2));
    stoker::optim::SGD opt(model.named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.log_interval = 1, .progress_bar = false, .quiet = true};
    d.enabled = true;
    d.warmup_steps = 0;
    d.monitor = false;
    o.diagnostics = d;
    Trainer trainer(model, loss, opt, o);
    int steps = 0;
    trainer.add_log_callback([&](const stoker::train::StepStats&) { ++steps; });
    try {
      trainer.fit(batches, 1);
    } catch (const stoker::Error& e) {
      return {steps, e.message()};
    }
    return {steps, ""};
  }

  fs::path dir_;
};

TEST_F(DiagOutputPathsTest, ABadTracePathFailsBeforeTheFirstStep) {
  const fs::path bad = dir_ / "plain" / "trace.json";
  const auto [steps, error] = fit_with({.trace_path = bad});
  EXPECT_EQ(steps, 0);
  EXPECT_NE(error.find("DiagnosticsOptions::trace_path (STOKER_DIAG_TRACE) " + bad.string()),
            std::string::npos)
      << error;
}

TEST_F(DiagOutputPathsTest, ABadReportPathFailsBeforeTheFirstStep) {
  const auto [steps, error] = fit_with({.report_json = dir_});  // a folder
  EXPECT_EQ(steps, 0);
  EXPECT_NE(error.find("DiagnosticsOptions::report_json (STOKER_DIAG_REPORT_JSON) " +
                       dir_.string() + ": is a folder"),
            std::string::npos)
      << error;
}

TEST_F(DiagOutputPathsTest, ABadBaselinePathFailsBeforeTheFirstStep) {
  DiagnosticsOptions d;
  d.baseline_save = dir_ / "plain" / "card.json";
  auto [steps, error] = fit_with(d);
  EXPECT_EQ(steps, 0);
  EXPECT_NE(error.find("DiagnosticsOptions::baseline_save"), std::string::npos) << error;
  d = {};
  d.baseline_compare = dir_ / "missing.json";
  std::tie(steps, error) = fit_with(d);
  EXPECT_EQ(steps, 0);
  EXPECT_NE(error.find("DiagnosticsOptions::baseline_compare (STOKER_DIAG_BASELINE_COMPARE) " +
                       (dir_ / "missing.json").string() + ": no such file"),
            std::string::npos)
      << error;
}

TEST_F(DiagOutputPathsTest, GoodPathsInMissingFoldersAreWritten) {
  const fs::path out = dir_ / "new" / "folder";
  const auto [steps, error] =
      fit_with({.trace_path = out / "trace.json", .report_json = out / "report.json"});
  EXPECT_EQ(error, "");
  EXPECT_EQ(steps, 4);
  EXPECT_TRUE(fs::is_regular_file(out / "trace.json"));
  EXPECT_TRUE(fs::is_regular_file(out / "report.json"));
}

TEST_F(DiagOutputPathsTest, BadCurvePathsFailBeforeTheFirstStep) {
  DiagnosticsOptions d;
  d.html_report = dir_;  // a folder
  auto [steps, error] = fit_with(d);
  EXPECT_EQ(steps, 0);
  EXPECT_NE(error.find("DiagnosticsOptions::html_report (STOKER_DIAG_HTML) " + dir_.string() +
                       ": is a folder"),
            std::string::npos)
      << error;
  d = {};
  d.timeline_csv = dir_ / "plain" / "timeline.csv";
  std::tie(steps, error) = fit_with(d);
  EXPECT_EQ(steps, 0);
  EXPECT_NE(error.find("DiagnosticsOptions::timeline_csv (STOKER_DIAG_TIMELINE_CSV)"),
            std::string::npos)
      << error;
  d = {};
  d.gpu_csv = dir_ / "plain" / "gpu.csv";
  std::tie(steps, error) = fit_with(d);
  EXPECT_EQ(steps, 0);
  EXPECT_NE(error.find("DiagnosticsOptions::gpu_csv (STOKER_DIAG_GPU_CSV)"), std::string::npos)
      << error;
}

}  // namespace
