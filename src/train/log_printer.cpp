#include "train/log_printer.h"

#include <fmt/format.h>
#include <cstdio>

#include "stoker/core/error.h"
#include "stoker/train/trainer.h"

namespace stoker::train {

void LogPrinter::on_fit_begin(const FitContext& ctx) {
  print_ = !ctx.quiet && ctx.main_rank;
  first_step_ = ctx.first_step;
  lines_ = 0;
}

void LogPrinter::on_log(const StepStats& st) {
  const bool first = lines_++ == 0;
  if (!print_) return;
  bar_.clear();
  const std::string throughput =
      st.world_size > 1
          ? fmt::format("{} samples/s/rank, {} samples/s on {} ranks",
                        static_cast<long long>(st.samples_per_s),
                        static_cast<long long>(st.global_samples_per_s), st.world_size)
          : fmt::format("{} samples/s", static_cast<long long>(st.samples_per_s));
  const bool eta_known = st.eta_s >= 0 && st.step < st.total_steps;
  const std::string eta = eta_known ? " | ETA " + util::format_duration(st.eta_s) : std::string();
  std::printf(
      "step %6lld | epoch %lld | loss %.6f | lr %.3e | grad norm %s | %.2f ms/step | "
      "%s | data wait %.1f%% | host syncs/step %lld | peak %.1f MiB%s\n",
      static_cast<long long>(st.step), static_cast<long long>(st.epoch), st.loss, st.lr,
      st.grad_norm >= 0 ? fmt::format("{:g}", st.grad_norm).c_str() : "-", st.ms_per_step,
      throughput.c_str(), 100.0 * st.data_wait_share,
      static_cast<long long>(st.host_syncs_per_step), st.peak_memory_mib, eta.c_str());
  if (first && eta_known)
    std::printf(
        "estimated time: %s for the %lld steps to step %lld (at the pace of the first "
        "%lld; the progress bar and the log lines refine it)\n",
        util::format_duration(st.eta_s).c_str(), static_cast<long long>(st.total_steps - st.step),
        static_cast<long long>(st.total_steps), static_cast<long long>(st.step - first_step_));
  std::fflush(stdout);
}

void LogPrinter::on_eval(const EvalRecord& rec) {
  if (!print_) return;
  bar_.clear();
  char accuracy[48] = "";
  if (rec.accuracy >= 0)
    std::snprintf(accuracy, sizeof(accuracy), " | val accuracy %.2f %%", rec.accuracy * 100);
  std::printf(
      "eval   %6lld | epoch %lld | val loss %.6f%s | %lld samples in %.2f s | "
      "evaluation %.1f%% of the wall time so far\n",
      static_cast<long long>(rec.step), static_cast<long long>(rec.epoch), rec.loss, accuracy,
      static_cast<long long>(rec.samples), rec.seconds, 100.0 * rec.share);
  std::fflush(stdout);
}

}  // namespace stoker::train
