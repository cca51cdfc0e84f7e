// Report: the verdict on a window of training steps — input-, compute-, launch-, communication-
// or bandwidth-bound, or throttled — with the numbers behind it and concrete advice, and the
// diagnostics' options. make_report is a pure function of its inputs (Thresholds, seeded from
// TensorFlow's profiler), so the rules are unit-tested on recorded timings.
// Details: docs/diagnostics.md#verdict.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/core/device.h"
#include "stoker/core/dtype.h"

// DiagnosticsOptions: what the Trainer's diagnostics measure, print and write
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
  // Misaligned GEMMs (op_profile.h's misaligned_gemm_share, device-timed steps only).
  double misaligned_moderate = 0.05;
  double misaligned_high = 0.20;
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

namespace stoker::diag {

enum class Level { none, moderate, high };

enum class Verdict {
  compute_bound,
  input_bound,
  launch_bound,
  communication_bound,
  throttled,
  bandwidth_bound,
  misaligned_gemms  // GEMMs off the tensor-core path: a dimension not a whole 16-byte row
};
// "compute-bound", "input-bound", ...
const char* verdict_name(Verdict v);
const char* level_name(Level l);

enum class Phase : uint8_t { data, forward, backward, comm, optimizer };

inline constexpr int kPhaseCount = 5;

// "data", "forward", "backward", "comm", "optimizer".
const char* phase_name(Phase p);

struct PhaseStat {
  double median_ms = 0;
  double p90_ms = 0;
  double mean_ms = 0;
};

struct Breakdown {
  int64_t steps = 0;  // timed steps in the window
  int64_t first_step = 0, last_step = 0;
  bool device_timed = false;                    // device spans measured (GPU) for every step
  PhaseStat step;                               // host wall time per step
  std::array<PhaseStat, kPhaseCount> host{};    // per phase, host
  std::array<PhaseStat, kPhaseCount> device{};  // per phase, compute stream (device_timed)
  PhaseStat other;   // host step time not inside a phase (bookkeeping between phases)
  PhaseStat launch;  // host-paced device time (launch_known)
  PhaseStat h2d;     // copy-stream time of the batches (h2d_known)
  bool launch_known = false;
  bool h2d_known = false;
  // Shares of the summed step time (0..1; docs/diagnostics.md#verdict).
  double input_share = 0;      // data: device span on a GPU, host wait on the CPU
  double launch_share = 0;     // host-paced device time (0 on the CPU or when unknown)
  double comm_share = 0;       // exposed communication: device span (GPU) or host time (CPU)
  double compute_share = 0;    // the rest: 1 - input - launch - comm, floored at 0
  double host_data_share = 0;  // host time in BatchSource::next() / step time (the log's share)
  double h2d_input_share = 0;  // h2d copy time / input time (how much of the input is the copy)
  int64_t max_host_syncs = 0;  // most host syncs in one step
  double mean_host_syncs = 0;
  int64_t samples = 0;              // trained in the window
  double samples_per_s = 0;         // samples / summed step time
  double demand_samples_per_s = 0;  // samples / (step time - input time): if data never waited
};

// The samples of a window reduced (fields -1 when never readable).
struct GpuHealth {
  bool available = false;
  std::string status;  // "ok", or why the monitor is unavailable
  std::string name;    // "NVIDIA H200"
  int samples = 0;
  int busy_samples = 0;      // samples without the GpuIdle reason and with utilization > 0
  double sm_clock_mhz = -1;  // mean over busy samples (all samples when none is busy)
  double sm_clock_max_mhz = -1;
  double mem_clock_mhz = -1, mem_clock_max_mhz = -1;
  double power_w = -1, power_max_w = -1, power_limit_w = -1;  // mean and highest draw
  double temperature_c = -1, temperature_max_c = -1;
  double util_gpu = -1, util_memory = -1;  // mean percent
  double pcie_tx_mb_s = -1, pcie_rx_mb_s = -1;
  // Share of busy samples with each reason, and any slowdown reason (clock_event::kSlowdown).
  double power_cap_share = 0, thermal_share = 0, hw_slowdown_share = 0, power_brake_share = 0;
  double slowdown_share = 0;
  // Summary of the above, one line ("SM 1,755/1,980 MHz (89 %), power 512/700 W, ...").
  std::string line() const;
};

// A device's roofs. Zeros when unknown (the CPU, a GPU missing from the table).
struct DevicePeaks {
  std::string source;         // "table: NVIDIA H200", "unknown GPU ...", "cpu"
  double tensor_tflops = 0;   // bf16/f16 dense tensor-core peak
  double tf32_tflops = 0;     // tf32 tensor-core peak (fp32 GEMMs with TF32 allowed)
  double fp32_tflops = 0;     // fp32 without tensor cores
  double bandwidth_gb_s = 0;  // device memory bandwidth
  bool known() const { return tensor_tflops > 0 && bandwidth_gb_s > 0; }
  // The compute roof for an op on `dtype` (f32: TF32's when `tf32`; u8, the FP8 GEMM's codes:
  // twice the bf16 tensor peak).
  double compute_tflops(DType dtype, bool tf32) const;
};

// The peaks of a GPU by its model name (cudaDeviceProp::name / NVML's), from the vendors'
// datasheets (dense, no sparsity; SXM boards unless the name says PCIe/NVL). Unknown models
// give zeros and say so in `source`.
DevicePeaks peaks_for_gpu(std::string_view name);

// The peaks of `device`: the table for its GPU model; the CPU's are unknown.
DevicePeaks device_peaks(Device device);

// One row of the op table: an op family, a module or an op name.
struct OpRow {
  std::string key;
  std::string family;         // for module and op rows: the family taking most of its time
  double calls = 0;           // per step
  double ms = 0;              // device ms per step
  double share = 0;           // of the step's device time
  double tflops = 0;          // achieved: FLOPs / time
  double gb_s = 0;            // achieved: bytes / time
  double intensity = 0;       // FLOPs per byte
  double compute_pct = -1;    // of the compute roof (-1: peaks unknown)
  double bandwidth_pct = -1;  // of the bandwidth roof (-1: peaks unknown)
  bool memory_bound = false;  // intensity below the ridge point (peaks known)
};

struct OpTable {
  int64_t steps = 0;         // op-timed steps summarized
  bool device_timed = true;  // times from CUDA events (false: the host clock, on the CPU)
  double step_ms = 0;        // device ms per step
  double op_ms = 0;          // sum of the ops' device ms per step
  double idle_ms = 0;        // step_ms - op_ms, floored at 0: gaps between ops (launch gaps,
                             // waits for input or communication, kernels outside any op)
  double idle_share = 0;     // idle_ms / step_ms
  double tflops = 0;         // all ops' FLOPs / step time
  // Communication ("communication" family: the gradient syncs' bucket all-reduces, timed on
  // the comm stream; not part of op_ms, since it overlaps the compute stream's work).
  double comm_calls = 0;          // buckets per step
  double comm_ms = 0;             // their summed device time per step
  double exposed_comm_ms = -1;    // the step's exposed communication (its comm phase), when known
  double hidden_comm_share = -1;  // 1 - exposed / comm_ms: the share hidden behind backward
  DevicePeaks peaks;
  std::vector<OpRow> families, modules, ops;  // most time first
  // The bandwidth-bound finding: the share of the step in memory-bound ops near the bandwidth
  // roof, their achieved share of the roof, and the ops to fuse first (by time).
  double bandwidth_bound_share = 0;
  double bandwidth_bound_roof_pct = 0;
  std::vector<std::string> fuse_candidates;
  // GEMMs with a dimension whose rows are not whole 16-byte vectors (m, n or k not a multiple of
  // 8 in f16/bf16, of 4 in f32): cuBLASLt runs them on slower unaligned kernels. Per step: their
  // calls, device ms and share of the step, and the slowest one's shape ("m x n x k").
  double misaligned_gemm_calls = 0;
  double misaligned_gemm_ms = 0;
  double misaligned_gemm_share = 0;
  std::string misaligned_gemm_example;

  bool empty() const { return steps == 0; }
  // "diag  ops ..." lines: the family table, the top modules and ops, idle time.
  std::string text(size_t top = 8) const;
  std::string json() const;
  // Sets exposed_comm_ms and hidden_comm_share from the step's exposed communication.
  void set_exposed_comm(double exposed_ms);
};

// Saw-tooth detection on a utilization series (percent, 0..100): samples below
// `sawtooth_low_util` are gaps, samples at or above `sawtooth_high_util` bursts; a cycle is a
// burst followed by a gap followed by a burst (hysteresis: values in between keep the state).
struct SawtoothStats {
  std::string source;  // "GPU utilization (NVML)" or "step timeline (100 % - data wait)"
  int samples = 0;
  double mean_util = -1;  // percent
  double low_share = 0;   // share of samples that are gaps
  int cycles = 0;         // burst -> gap -> burst
  double period_s = -1;   // mean time between the starts of consecutive gaps (-1: < 2 gaps)
};

// Slowing down: medians per epoch (or, for a run of one epoch, per quarter of its steps).
struct TrendSegment {
  std::string label;  // "epoch 3" / "steps 251..500"
  int64_t epoch = 0;  // the epoch (-1 for quarters)
  int64_t first_step = 0, last_step = 0;
  int64_t steps = 0;
  double step_ms = 0;       // median
  double step_p90_ms = 0;   // p90
  double data_wait_ms = 0;  // median
};

struct SlowdownStats {
  std::vector<TrendSegment> segments;
  bool by_epoch = false;
  // Rise of the last segment against the first: step time relative to the first segment's step
  // time; data wait as the added wait relative to the first segment's step time (a wait that
  // grows from 0.01 to 0.1 ms in a 100 ms step is no slowdown).
  double step_rise = 0;
  double data_rise = 0;
  // The first segment's own spread, p90 / median - 1 of its step times: a rise below it is the
  // step's jitter (a 2 ms step of a small model moves by half its length), not a trend.
  double jitter = 0;
  // The first segment whose step-time or data-wait rise reaches Thresholds::slowdown_moderate
  // and the jitter, as every later one does (-1: none).
  int first_slow = -1;
};

// One finding of the curves, with the numbers that back it and what to do.
struct CurveFinding {
  std::string what;  // "saw-tooth utilization", "slowing down", "evaluation-heavy"
  Level level{};     // moderate or high
  double value = 0;  // the number the level comes from (low share, rise, eval share)
  std::string evidence;
  std::string advice;
};

// Everything the curves say about a fit.
struct CurveAnalysis {
  SawtoothStats sawtooth;
  SlowdownStats slowdown;
  double wall_s = 0;      // the fit's wall time so far
  double eval_s = 0;      // evaluation's wall time
  double eval_share = 0;  // eval_s / wall_s
  int evaluations = 0;
  std::vector<CurveFinding> findings;  // the moderate and high ones, strongest first
  // One line per detector ("diag  curves  ..."), printed in the report.
  std::string text() const;
};

// What the data source looked like over the window (the Loader's counters when it is one).
struct LoaderView {
  bool present = false;  // filled in
  // A source with an input pipeline (BatchSource::pipeline(), e.g. data::Loader): the fields
  // below are measured.
  bool is_loader = false;
  std::string kind;  // "Loader", "TensorBatches", "replayed batch (synthetic)", ...
  int threads = 0, max_threads = 0, prefetch = 0;
  bool threads_fixed = false;
  int cpu_count = 0;                                 // hardware threads of the machine
  int64_t samples_decoded = 0;                       // by the workers in the window
  double worker_s_per_sample = 0;                    // thread-seconds of work per sample
  double read_ms = 0, decode_ms = 0, resize_ms = 0;  // per sample, thread time
  double capacity_samples_per_s = 0;                 // threads / worker_s_per_sample
  double h2d_ms_per_batch = -1;                      // copy-stream time per batch (GPU)
  int64_t image_size = 0;                            // output side in pixels
  std::string summary;                               // Loader::summary()
};

struct Finding {
  std::string what;  // "input", "launch", "communication", "bandwidth", "misaligned GEMMs"
  double share = 0;
  Level level = Level::none;
};

struct Report {
  std::string title;  // "steps 6..105" / "epoch 1" ...
  Verdict verdict = Verdict::compute_bound;
  Level level = Level::none;  // how strong (none for compute-bound)
  std::string headline;       // one line: verdict and the share behind it
  std::vector<Finding> findings;
  std::vector<std::string> advice;
  Breakdown breakdown;
  LoaderView loader;
  GpuHealth gpu;
  OpTable ops;  // the window's op-timed steps (empty when none)
  // The fit's curves so far (curves.h): filled in the reports at an epoch's end and at the end
  // of fit(); its findings (saw-tooth, slowing down, evaluation-heavy) are about the run, not
  // the step, and are listed after the verdict's.
  CurveAnalysis curves;
  std::string device;  // "cuda:0" / "cpu"
  int64_t timer_dropped = 0;

  // The printed report (several lines, each starting with "diag"), and the same as JSON.
  std::string text() const;
  std::string json() const;
};

// The verdict and advice for a window (the rules: docs/diagnostics.md#verdict).
// `ops`: the window's op table (empty: no op-timed step, no bandwidth finding).
Report make_report(const Breakdown& breakdown, const LoaderView& loader, const GpuHealth& gpu,
                   const Thresholds& thresholds = {}, const OpTable& ops = {});

// "3,100" — thousands separated, for the advice text.
std::string format_count(double v);

}  // namespace stoker::diag
