// Private: the Trainer's log line and evaluation line on stdout (rank 0, unless quiet), a step
// observer. The fields are defined in docs/long_runs.md and docs/diagnostics.md.
#pragma once

#include "stoker/train/step_observer.h"
#include "util/progress_bar.h"

namespace stoker::train {

class LogPrinter final : public StepObserver {
 public:
  explicit LogPrinter(util::ProgressBar& bar) : bar_(bar) {}
  void on_fit_begin(const FitContext& ctx) override;
  void on_log(const StepStats& st) override;
  void on_eval(const EvalRecord& rec) override;

 private:
  util::ProgressBar& bar_;
  bool print_ = false;
  int64_t first_step_ = 0;
  int64_t lines_ = 0;  // log lines of this fit so far
};

}  // namespace stoker::train
