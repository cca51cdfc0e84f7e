// Private: TrainerOptions::metrics_path as a step observer — the start line at on_fit_begin,
// a train line per log line and an eval line per evaluation (train/metrics_log.h, written by
// rank 0; the fields are documented in docs/long_runs.md#metrics).
#pragma once

#include <filesystem>
#include <memory>

#include "stoker/train/step_observer.h"
#include "train/metrics_log.h"

namespace stoker::train {

class MetricsObserver final : public StepObserver {
 public:
  explicit MetricsObserver(std::filesystem::path path) : path_(std::move(path)) {}
  void on_fit_begin(const FitContext& ctx) override;
  void on_log(const StepStats& st) override;
  void on_eval(const EvalRecord& rec) override;
  void on_fit_end(FitResult&) override { log_.reset(); }

 private:
  std::filesystem::path path_;
  std::unique_ptr<MetricsLog> log_;
};

}  // namespace stoker::train
