// The cost of diagnostics in `stoker doctor --overhead`: the bundled model on a fixed batch with
// diagnostics off and on (and, on a GPU, with parts of them taken away), interleaved
// repetitions, the median ms/step of each; then the host cost of the diagnostics calls alone.
#include <algorithm>
#include <cstdio>

#include "diag/breakdown.h"
#include "parts.h"
#include "stoker/core/stream.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace stoker::cli::doctor {

json run_overhead(const DoctorOptions& options, const Setup& s) {
  DoctorOptions o = options;
  if (o.overhead_steps > 0) o.steps = o.overhead_steps;
  std::printf("\n== diagnostics overhead (%d repetitions of %lld steps, batch %lld) ==\n",
              o.repeats, static_cast<long long>(o.steps), static_cast<long long>(o.batch));
  auto model = make_model(o, s);
  FixedBatches source(random_batch(o, s, o.batch), o.warmup + o.steps + 2);
  // What is switched on in each run: "off" is the reference; "on" is what
  // TrainerOptions::diagnostics.enabled gives; the others take one part away to attribute the
  // cost (GPU runs only: on the CPU there is no monitor and no device timing).
  struct Variant {
    const char* name;
    bool enabled, monitor, pcie, device_timing, op_timing;
  };
  std::vector<Variant> variants = {{"off", false, true, true, true, true},
                                   {"on", true, true, true, true, true},
                                   {"on, no op-timed steps", true, true, true, true, false}};
  if (s.device.is_cuda()) {
    variants.push_back({"on, monitor without PCIe", true, true, false, true, true});
    variants.push_back({"on, no monitor", true, false, false, true, true});
    variants.push_back({"on, no device timing", true, true, true, false, true});
  }
  // What one run measured: its steady-state ms/step and its report.
  struct Run {
    double ms = 0;
    diag::Report report;
  };
  auto one = [&](const Variant& v) {
    optim::AdamW opt(model->named_parameters(), {.lr = 1e-4f});
    nn::CrossEntropyLoss loss;
    train::TrainerOptions t;
    t.precision = s.precision;
    t.log_interval = static_cast<int>(o.warmup + o.steps + 1);
    t.progress_bar = false;
    t.max_steps = o.warmup + o.steps + 1;
    t.quiet = true;
    t.diagnostics.enabled = v.enabled;
    t.diagnostics.monitor = v.monitor;
    t.diagnostics.monitor_pcie = v.pcie;
    t.diagnostics.device_timing = v.device_timing;
    if (!v.op_timing) t.diagnostics.op_timing_interval = 0;
    t.diagnostics.warmup_steps = o.warmup;
    t.diagnostics.print = false;
    t.diagnostics.nvml_library = o.nvml;
    train::Trainer trainer(*model, loss, opt, t);
    // Steady-state steps only: the clock starts when batch `warmup` is asked for and stops when
    // batch `warmup + steps` is, each after the device has finished the steps before it. What
    // fit() does once at its start and end (NVML start-up, the final report) is left out: it
    // does not grow with the run.
    struct Timed : data::BatchSource {
      data::BatchSource& inner;
      int64_t warmup, steps, delivered = 0;
      double start_ms = 0, stop_ms = 0;
      Device device;
      Timed(data::BatchSource& i, int64_t w, int64_t n, Device d)
          : inner(i), warmup(w), steps(n), device(d) {}
      void start_epoch(int64_t e) override { inner.start_epoch(e); }
      bool next(data::Batch& b) override {
        if (delivered == warmup || delivered == warmup + steps) {
          core::synchronize_device(device);
          (delivered == warmup ? start_ms : stop_ms) = diag::now_ms();
        }
        ++delivered;
        return inner.next(b);
      }
      int64_t batches_per_epoch() const override { return inner.batches_per_epoch(); }
      int64_t samples_per_epoch() const override { return inner.samples_per_epoch(); }
      int64_t epoch() const override { return inner.epoch(); }
      int64_t batch_index() const override { return inner.batch_index(); }
      void restore(int64_t e, int64_t i) override { inner.restore(e, i); }
    };
    Timed timed(source, o.warmup, o.steps, s.device);
    const auto r = trainer.fit(timed, 1);
    core::synchronize_device(s.device);
    Run run;
    run.ms = (timed.stop_ms - timed.start_ms) / static_cast<double>(o.steps);
    run.report = r.diagnosis;
    return run;
  };
  std::vector<std::vector<double>> times(variants.size());
  diag::Report last;
  std::vector<int64_t> op_steps;  // per "on" run: its op-timed steps
  for (int i = 0; i < o.repeats; ++i) {
    // Rotate the order so that drift (clocks, temperature) hits every variant alike.
    std::printf("  repetition %d:", i + 1);
    for (size_t j = 0; j < variants.size(); ++j) {
      const size_t k = (j + static_cast<size_t>(i)) % variants.size();
      const Run r = one(variants[k]);
      times[k].push_back(r.ms);
      if (k == 1) {
        last = r.report;
        op_steps.push_back(r.report.ops.steps);
      }
    }
    for (size_t k = 0; k < variants.size(); ++k)
      std::printf("%s %s %.4f", k ? "," : "", variants[k].name, times[k].back());
    std::printf(" ms/step\n");
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double moff = median(times[0]), mon = median(times[1]);
  const double overhead = moff > 0 ? mon / moff - 1 : 0;
  std::printf("  median: off %.4f ms/step, on %.4f ms/step: overhead %+.2f %% (target <= 1 %%)\n",
              moff, mon, 100 * overhead);
  json parts = json::array();
  for (size_t k = 2; k < variants.size(); ++k) {
    const double m = median(times[k]);
    std::printf("    %-26s %.4f ms/step: %+.2f %% over off\n", variants[k].name, m,
                moff > 0 ? 100 * (m / moff - 1) : 0.0);
    parts.push_back({{"variant", variants[k].name},
                     {"ms", times[k]},
                     {"median_ms", m},
                     {"overhead", moff > 0 ? m / moff - 1 : 0.0}});
  }
  // The op-timed steps' own cost: "on" against "on, no op-timed steps", paired within each
  // repetition (the two ran back to back), as a share of the step and per op-timed step. Not the
  // host time of an op-timed step against the others: reading its events waits for the work
  // queued before it, which on a device-bound run is the queue, not the cost.
  json op_timing = nullptr;
  int64_t timed_steps = 0;
  for (const int64_t n : op_steps) timed_steps += n;
  if (timed_steps > 0) {
    std::vector<double> share, per_step_ms;
    for (size_t i = 0; i < times[1].size(); ++i) {
      share.push_back(times[2][i] > 0 ? times[1][i] / times[2][i] - 1 : 0.0);
      if (op_steps[i] > 0)
        per_step_ms.push_back((times[1][i] - times[2][i]) * static_cast<double>(o.steps) /
                              static_cast<double>(op_steps[i]));
    }
    const double cost = median(share);
    const double each = per_step_ms.empty() ? 0.0 : median(per_step_ms);
    const int64_t interval = diag::DiagnosticsOptions{}.op_timing_interval;
    std::printf(
        "  op-timed steps (%lld in these runs, one in %lld): %+.2f %% of the run against no "
        "op-timed steps (median of the paired repetitions), about %+.3f ms each\n",
        static_cast<long long>(timed_steps), static_cast<long long>(interval), 100 * cost, each);
    op_timing = {{"op_timed_steps", op_steps},          {"paired_overhead", share},
                 {"median_paired_overhead", cost},      {"ms_per_op_timed_step", per_step_ms},
                 {"median_ms_per_op_timed_step", each}, {"interval", interval}};
  }
  std::printf("  verdict with diagnostics on: %s\n", last.headline.c_str());
  const std::vector<double>& off = times[0];
  const std::vector<double>& on = times[1];

  // The diagnostics calls alone, with no work between the marks: their host cost per step
  // (one data, forward, backward and optimizer phase), free of the run-to-run noise above.
  double call_us = 0;
  {
    diag::DiagnosticsOptions d;
    d.enabled = true;
    d.warmup_steps = 0;
    d.print = false;
    d.monitor = false;
    diag::Diagnostics diag(d, s.device);
    diag.begin_fit(source, 0, {}, false);
    const int n = 2000;
    const double t0 = diag::now_ms();
    for (int i = 0; i < n; ++i) {
      diag.begin_step(i);
      diag.begin(diag::Phase::forward);
      diag.begin(diag::Phase::backward);
      diag.begin(diag::Phase::optimizer);
      diag.end_step(o.batch);
    }
    call_us = (diag::now_ms() - t0) * 1e3 / n;
    diag.end_fit();
  }
  std::printf(
      "  host cost of the diagnostics calls: %.2f us per step (%s), %.3f %% of the "
      "step without diagnostics\n",
      call_us, s.device.is_cuda() ? "5 marks with CUDA timing events" : "5 marks",
      moff > 0 ? 100 * call_us / (moff * 1e3) : 0.0);
  std::fflush(stdout);
  return {{"call_us_per_step", call_us},
          {"off_ms", off},
          {"on_ms", on},
          {"median_off_ms", moff},
          {"median_on_ms", mon},
          {"overhead", overhead},
          {"variants", parts},
          {"op_timing", op_timing},
          {"verdict", diag::verdict_name(last.verdict)}};
}

}  // namespace stoker::cli::doctor
