// Private: diag::Diagnostics attached to fit() as a step observer (TrainerOptions::diagnostics):
// it times the phases the Trainer announces, prints a report every report_interval steps and at
// each epoch's end, and hands the reports and the fit's diagnosis to FitResult. It only
// watches: the steps and the data are the Trainer's.
#pragma once

#include <vector>

#include "diag/diagnostics.h"
#include "stoker/train/step_observer.h"
#include "util/progress_bar.h"

namespace stoker::train {

class DiagnosticsObserver final : public StepObserver {
 public:
  DiagnosticsObserver(const diag::DiagnosticsOptions& options, Device device,
                      util::ProgressBar& bar)
      : diag_(options, device), bar_(bar) {}
  const diag::Diagnostics& diagnostics() const { return diag_; }

  void on_fit_begin(const FitContext& ctx) override;
  void on_epoch_begin(int64_t epoch) override { diag_.begin_epoch(epoch); }
  void on_step_begin(int64_t step) override { diag_.begin_step(step); }
  void on_phase(diag::Phase p) override { diag_.begin(p); }
  void on_step_end(const StepEnd& s) override { diag_.end_step(s.samples); }
  void on_step_skipped() override { diag_.cancel_step(); }
  void on_log(const StepStats& st) override;
  void on_eval(const EvalRecord& rec) override;
  void on_step_done(const StepEnd& s) override;
  void on_epoch_end(int64_t epoch) override;
  void on_fit_end(FitResult& result) override;

 private:
  diag::Diagnostics diag_;
  util::ProgressBar& bar_;
  std::vector<diag::Report> reports_;
};

}  // namespace stoker::train
