#include "train/metrics_observer.h"

#include <cmath>
#include <ctime>

#include "stoker/core/output_path.h"
#include "stoker/train/trainer.h"

namespace stoker::train {

namespace {
using Json = nlohmann::ordered_json;  // the lines keep their fields in a readable order

// -1 (not known) as JSON null.
Json known(double v) { return v < 0 ? Json(nullptr) : Json(v); }
Json known(int64_t v) { return v < 0 ? Json(nullptr) : Json(v); }
Json finite(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

void MetricsObserver::on_fit_begin(const FitContext& ctx) {
  log_.reset();
  if (!ctx.main_rank) return;
  // Checked before the first step: an unwritable path must not cost the run.
  core::check_output_path(path_, "TrainerOptions::metrics_path");
  log_ = std::make_unique<MetricsLog>(path_, ctx.resumed ? ctx.first_step : -1,
                                      ctx.resumed && ctx.resumed_evaluated);
  const int64_t batch = ctx.train.identity().batch_size;
  log_->write({{"kind", "start"},
               {"step", ctx.first_step},
               {"epoch", ctx.first_epoch},
               {"time", utc_now()},
               {"model", ctx.model},
               {"parameters", ctx.parameters},
               {"precision", ctx.precision},
               {"world_size", ctx.world_size},
               {"batch_size", known(batch)},
               {"grad_accum_steps", ctx.grad_accum_steps},
               {"global_batch",
                batch < 0 ? Json(nullptr) : Json(batch * ctx.grad_accum_steps * ctx.world_size)},
               {"total_steps", known(ctx.total_steps)},
               {"resumed_from", ctx.resumed ? Json(ctx.resumed_from.string()) : Json(nullptr)}});
}

void MetricsObserver::on_log(const StepStats& st) {
  if (!log_) return;
  log_->write({{"kind", "train"},
               {"step", st.step},
               {"epoch", st.epoch},
               {"loss", finite(st.loss)},
               {"lr", st.lr},
               {"grad_norm", known(st.grad_norm)},
               {"ms_per_step", st.ms_per_step},
               {"samples_per_s", st.samples_per_s},
               {"global_samples_per_s", st.global_samples_per_s},
               {"world_size", st.world_size},
               {"data_wait_share", st.data_wait_share},
               {"peak_memory_mib", st.peak_memory_mib},
               {"loss_scale", known(st.loss_scale)},
               {"host_syncs_per_step", st.host_syncs_per_step},
               {"elapsed_s", st.elapsed_s},
               {"eval_share", st.eval_share},
               {"total_steps", known(st.total_steps)},
               {"eta_s", known(st.eta_s)}});
}

void MetricsObserver::on_eval(const EvalRecord& rec) {
  if (!log_) return;
  log_->write({{"kind", "eval"},
               {"step", rec.step},
               {"epoch", rec.epoch},
               {"val_loss", finite(rec.loss)},
               {"val_accuracy", known(rec.accuracy)},
               {"samples", rec.samples},
               {"seconds", rec.seconds},
               {"eval_share", rec.share},
               {"elapsed_s", rec.elapsed_s}});
}

}  // namespace stoker::train
