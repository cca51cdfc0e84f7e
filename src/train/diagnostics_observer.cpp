#include "train/diagnostics_observer.h"

#include <string>

#include "stoker/train/trainer.h"

namespace stoker::train {

void DiagnosticsObserver::on_fit_begin(const FitContext& ctx) {
  reports_.clear();
  diag_.begin_fit(ctx.train, ctx.first_step,
                  {{"model", ctx.model},
                   {"precision", ctx.precision},
                   {"grad_accum_steps", std::to_string(ctx.grad_accum_steps)},
                   {"world_size", std::to_string(ctx.world_size)}},
                  !ctx.quiet && ctx.main_rank, ctx.main_rank);
}

void DiagnosticsObserver::on_log(const StepStats& st) { diag_.record_loss(st.step, st.loss); }

void DiagnosticsObserver::on_eval(const EvalRecord& rec) {
  diag_.record_eval(rec.step, rec.seconds);
}

void DiagnosticsObserver::on_step_done(const StepEnd& s) {
  if (!diag_.report_due(s.step)) return;
  bar_.clear();
  reports_.push_back(diag_.report("steps"));
}

void DiagnosticsObserver::on_epoch_end(int64_t epoch) {
  bar_.clear();
  reports_.push_back(diag_.report("epoch " + std::to_string(epoch + 1), /*with_curves=*/true));
}

void DiagnosticsObserver::on_fit_end(FitResult& result) {
  result.diagnosis = diag_.end_fit();
  result.reports = std::move(reports_);
  reports_.clear();
}

}  // namespace stoker::train
