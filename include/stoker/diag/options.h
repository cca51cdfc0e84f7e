// DiagnosticsOptions: what the Trainer's diagnostics measure, print and write
// (docs/architecture.md#diagnostics, docs/diagnostics.md). A plain struct:
// TrainerOptions{.diagnostics = {.enabled = true}}.
//
// Off by default. Off, the Trainer keeps only the log line's data-wait share (two clock reads
// per batch); on, it times every step's phases (host clocks, and CUDA events on a GPU),
// samples the GPU through NVML, prints a verdict every `report_interval` steps and at the end
// of every epoch, and writes the files named below at the end of fit().
//
// The STOKER_DIAG* environment variables override these fields; they are read with the rest of
// the Trainer's environment in one place, train/environment.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace stoker::diag {

// Where a share of the step time becomes a finding. Seeded from TensorFlow's profiler (XProf:
// input 5 % / 20 %, kernel launch and device collectives 3 % / 15 %); see docs/diagnostics.md.
struct Thresholds {
  double input_moderate = 0.05;
  double input_high = 0.20;
  double launch_moderate = 0.03;
  double launch_high = 0.15;
  double comm_moderate = 0.03;
  double comm_high = 0.15;
  // Throttled: at least this share of the busy GPU samples carries a slowdown clock-event
  // reason (power cap, thermal, hardware slowdown, power brake) and the busy SM clock averages
  // below `throttle_clock_ratio` of its maximum.
  double throttle_samples = 0.20;
  double throttle_clock_ratio = 0.90;
  // A device interval is host-paced (counts as launch time) when the compute stream finished it
  // less than max(host_paced_lag_ms, host_paced_lag_fraction * interval) after the host had
  // enqueued its end: the device had caught up with the host, so the host set the pace.
  double host_paced_lag_ms = 0.05;
  double host_paced_lag_fraction = 0.10;
  // Bandwidth-bound (from the op-timed steps, op_profile.h): the share of the step in
  // memory-bound ops that reach at least `near_bandwidth_roof` of the bandwidth roof and stay
  // below 10 % of the compute roof.
  double bandwidth_moderate = 0.15;
  double bandwidth_high = 0.50;
  double near_bandwidth_roof = 0.20;
  // Curves (curves.h). Saw-tooth: utilization samples below `sawtooth_low_util` percent are
  // gaps, at or above `sawtooth_high_util` bursts; found when at least `sawtooth_min_cycles`
  // burst-gap-burst cycles occur and gaps are >= sawtooth_moderate (high: sawtooth_high) of the
  // samples.
  double sawtooth_low_util = 50;
  double sawtooth_high_util = 90;
  int sawtooth_min_cycles = 3;
  double sawtooth_moderate = 0.15;
  double sawtooth_high = 0.30;
  // Slowing down: the last epoch's median step time (or added data wait) against the first's.
  double slowdown_moderate = 0.10;
  double slowdown_high = 0.25;
  int64_t slowdown_min_steps = 10;  // fewer steps in an epoch: left out of the trend
  // Evaluation-heavy: evaluation's share of the fit's wall time.
  double eval_moderate = 0.10;
  double eval_high = 0.25;
};

struct DiagnosticsOptions {
  bool enabled = false;
  // Steps between printed reports (0: only at the end of each epoch and of fit()).
  int64_t report_interval = 0;
  // The first steps of each fit() are left out of reports and baseline cards (cold caches,
  // GEMM autotuning, the loader's autotuner finding its thread count).
  int64_t warmup_steps = 5;
  // Print reports on stdout (main rank only; TrainerOptions::quiet also silences them).
  bool print = true;
  // Chrome trace-event JSON (Perfetto, chrome://tracing) of the first `trace_max_steps` steps
  // after warm-up: step phases (host, and the device's compute stream on a GPU), loader stage
  // rates and GPU monitor samples as counter tracks. Written at the end of fit(). Empty: none.
  std::filesystem::path trace_path;
  int64_t trace_max_steps = 500;
  // NVTX ranges (domain "stoker") around the same phases, for Nsight Systems (CUDA builds).
  bool nvtx = true;
  // The last report of fit() as JSON. Empty: none.
  std::filesystem::path report_json;
  // Baseline card (environment + per-phase medians, docs/diagnostics.md): written at the end of
  // fit() when `baseline_save` is set; compared with `baseline_compare` at the end of fit().
  std::filesystem::path baseline_save;
  std::filesystem::path baseline_compare;
  // GPU monitor (NVML, loaded at run time; absent NVML is reported once and not an error).
  bool monitor = true;
  double monitor_interval_s = 0.1;
  // Whether the monitor also reads PCIe throughput (NVML measures it over a 20 ms window per
  // direction, so each sample holds the NVML call for ~40 ms; the other readings are instant).
  bool monitor_pcie = true;
  // CUDA timing events at every phase boundary (device spans, launch-bound detection). false:
  // host clocks only, as on the CPU (no device breakdown, no launch time).
  bool device_timing = true;
  // Every this many timed steps (after warm-up), one step is timed op by op: a timing event
  // before and after each op launch (host clock on the CPU), for the op table, the GPU's idle
  // time inside the step and the bandwidth-bound finding (op_profile.h). 0: never. The cost is
  // two events per op on that step only (about 1 % of one step's host time per op-timed step).
  int64_t op_timing_interval = 100;
  // Curves (curves.h), written at the end of fit() by the main rank; empty: not written. The
  // step timeline (step time, data wait, device span, loss at log steps) and the GPU monitor's
  // samples (every monitor_interval_s) as CSV; the HTML report (html_report.h): verdict,
  // phases, op table, curves, static checks and the baseline comparison in one file.
  std::filesystem::path timeline_csv;
  std::filesystem::path gpu_csv;
  std::filesystem::path html_report;
  std::string nvml_library = "libnvidia-ml.so.1";
  Thresholds thresholds;
};

}  // namespace stoker::diag
