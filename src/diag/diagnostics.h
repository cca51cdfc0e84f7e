// Diagnostics: one training run's diagnosis — the StepTimer, the GpuMonitor, the trace, NVTX
// ranges, reports with a verdict, baseline cards — behind the few calls the Trainer makes
// (docs/architecture.md#diagnostics, docs/diagnostics.md). The Trainer attaches it as a step
// observer when TrainerOptions::diagnostics.enabled; it never changes what is trained (how many
// steps, on which data: `stoker doctor` wraps sources itself). Usable from a custom loop:
//
//   diag::Diagnostics d({.enabled = true, .report_interval = 100}, device);
//   d.begin_fit(source, {{"model", "mlp"}});
//   for each step: d.begin_step(i); [next()] d.begin(Phase::forward); ...
//                  d.begin(Phase::optimizer); ...; d.end_step(samples);
//                  if (d.report_due(i + 1)) d.report("steps");
//   d.end_fit();
//
// Costs while training: per phase boundary a clock read and (GPU) one cudaEventRecord and an
// NVTX push/pop; nothing waits for the device. Events are read at report time with
// Event::query. Trace events go to memory and are written at end_fit().
//
// Ownership: the data source is borrowed during fit. Thread-safety: the training thread only
// (the GPU monitor has its own thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diag/baseline.h"
#include "diag/curves.h"
#include "diag/gpu_monitor.h"
#include "diag/html_report.h"
#include "diag/op_profile.h"
#include "diag/step_timer.h"
#include "diag/trace.h"
#include "stoker/core/device.h"
#include "stoker/data/batch_source.h"
#include "stoker/diag/report.h"

namespace stoker::data {
struct LoaderCounters;
}  // namespace stoker::data

namespace stoker::diag {

class OpTimer;  // src/diag/op_timer.h

class Diagnostics {
 public:
  Diagnostics(DiagnosticsOptions options, Device device);
  ~Diagnostics();
  Diagnostics(const Diagnostics&) = delete;
  Diagnostics& operator=(const Diagnostics&) = delete;

  // A fit starts at optimizer step `first_step`: `source` is inspected (its pipeline() gives
  // the loader's counters), `config` goes into baseline cards, `print` says whether reports are
  // printed, and only the `main_rank` of a data-parallel job writes the trace, report JSON and
  // cards.
  void begin_fit(const data::BatchSource& source, int64_t first_step,
                 std::map<std::string, std::string> config, bool print, bool main_rank = true);
  void begin_step(int64_t step);
  void begin(Phase p);
  void end_step(int64_t samples);
  void cancel_step();  // the step trained nothing (no batch left in the epoch)
  // The run's time line (curves.h): the epoch that begins, the mean loss of the log window
  // ending after `steps_done` optimizer steps, an evaluation that just ended after `seconds`.
  void begin_epoch(int64_t epoch);
  void record_loss(int64_t steps_done, double loss);
  void record_eval(int64_t steps_done, double seconds);

  // True when a report is due after `steps_done` optimizer steps (report_interval).
  bool report_due(int64_t steps_done) const;
  // The report over the steps timed since the previous one; printed when begin_fit said so.
  // `with_curves`: also the curves' findings over the fit so far (at an epoch's end).
  Report report(const std::string& title, bool with_curves = false);
  // End of fit: waits for the device (once, outside any step), reports the remaining steps,
  // writes the trace, the report JSON and the baseline card, compares with the baseline.
  // Returns the report over all timed steps of the fit (after warm-up).
  Report end_fit();

  const DiagnosticsOptions& options() const { return options_; }
  const StepTimer& timer() const { return timer_; }
  const GpuMonitor* monitor() const { return monitor_.get(); }
  // The fit's timed steps after warm-up (the baseline card's input), in order.
  const std::vector<StepSample>& run_steps() const { return run_; }
  // The fit's op-timed steps (the latest kMaxRunOpSteps), in order.
  const std::vector<OpStep>& run_op_steps() const { return run_ops_; }
  static constexpr size_t kMaxRunOpSteps = 64;
  // Set by end_fit() when baseline_compare was given.
  const std::optional<Comparison>& comparison() const { return comparison_; }
  // The fit's curves: timed steps after warm-up (one point each, thinned for very long runs),
  // the GPU monitor's samples, the evaluations; and what the detectors find in them.
  const std::vector<TimelinePoint>& timeline() const { return timeline_.items(); }
  const std::vector<GpuSample>& gpu_curve() const { return gpu_curve_.items(); }
  const std::vector<EvalSpan>& evaluations() const { return evals_; }
  CurveAnalysis analyze_curves() const;
  // The HTML report of the fit (html_report.h) with `checks` as its static checks: what
  // end_fit() writes to DiagnosticsOptions::html_report.
  HtmlReport html(const Report& whole, std::vector<Check> checks) const;

 private:
  struct LoaderSnapshot;
  void collect();
  void trace_step(const StepSample& s);
  void trace_ops(const OpStep& s);
  void add_timeline_point(const StepSample& s);
  void write_curves();
  LoaderView loader_view(const LoaderSnapshot& from, const LoaderSnapshot& to) const;
  LoaderSnapshot snapshot() const;
  Report build(const std::vector<StepSample>& steps, const std::vector<OpStep>& ops,
               const LoaderSnapshot& from, double since_ms, const std::string& title);

  DiagnosticsOptions options_;
  Device device_;
  StepTimer timer_;
  std::unique_ptr<GpuMonitor> monitor_;
  std::unique_ptr<TraceWriter> trace_;
  const data::BatchSource* source_ = nullptr;
  std::map<std::string, std::string> config_;
  bool print_ = false;
  bool main_rank_ = true;
  int64_t first_timed_step_ = 0;  // steps before it are warm-up
  int64_t traced_steps_ = 0;
  int nvtx_depth_ = 0;
  std::vector<StepSample> window_;
  std::vector<StepSample> run_;
  std::unique_ptr<LoaderSnapshot> window_start_, run_start_, trace_prev_;
  double window_start_ms_ = -1, run_start_ms_ = -1;
  double trace_first_ms_ = -1, trace_last_ms_ = -1;
  std::optional<Comparison> comparison_;
  // Op timing (op_profile.h): one step in op_timing_interval, its records until reported.
  std::unique_ptr<OpTimer> op_timer_;
  std::vector<OpStep> window_ops_, run_ops_;
  DevicePeaks peaks_;
  std::map<int64_t, double> step_starts_;  // traced steps' first mark on the trace's time line
  // Curves: the fit's start on the now_ms() time line, the epoch of each step, losses logged
  // for steps not collected yet, the monitor's samples taken so far.
  double fit_start_ms_ = 0;
  std::map<int64_t, int64_t> epoch_starts_;  // first step -> epoch
  std::map<int64_t, double> pending_loss_;
  SeriesBuffer<TimelinePoint> timeline_{500000};
  SeriesBuffer<GpuSample> gpu_curve_{400000};
  double gpu_curve_last_ms_ = -1;
  std::vector<EvalSpan> evals_;
};

}  // namespace stoker::diag
