#include "train/progress_observer.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "train/eta.h"

namespace stoker::train {

void ProgressObserver::on_fit_begin(const FitContext& ctx) {
  train_ = &ctx.train;
  epochs_ = ctx.epochs;
  first_step_ = ctx.first_step;
  total_steps_ = ctx.total_steps;
  start_ = std::chrono::steady_clock::now();
}

void ProgressObserver::on_step_done(const StepEnd& s) {
  if (!bar_.enabled()) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  bar_.draw(fmt::format("  epoch {}/{}", s.epoch + 1, epochs_), train_->batch_index(),
            train_->batches_per_epoch(),
            total_steps_ >= 0 ? fmt::format(" | step {}/{} | ETA {}", s.step, total_steps_,
                                            util::format_duration(seconds_left(
                                                s.step, first_step_, total_steps_, elapsed)))
                              : std::string());
}

}  // namespace stoker::train
