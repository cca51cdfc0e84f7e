// Private: the Trainer's progress bar (on stderr when it is a terminal; rank 0, unless quiet):
// the epoch's batches, and the step with the estimated time left when fit()'s end is known.
#pragma once

#include <chrono>

#include "stoker/train/step_observer.h"
#include "util/progress_bar.h"

namespace stoker::train {

class ProgressObserver final : public StepObserver {
 public:
  explicit ProgressObserver(util::ProgressBar& bar) : bar_(bar) {}
  void on_fit_begin(const FitContext& ctx) override;
  void on_step_done(const StepEnd& s) override;
  void on_fit_end(FitResult&) override { bar_.clear(); }

 private:
  util::ProgressBar& bar_;
  const data::BatchSource* train_ = nullptr;
  int64_t epochs_ = 0, first_step_ = 0, total_steps_ = -1;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace stoker::train
