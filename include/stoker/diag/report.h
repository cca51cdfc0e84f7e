// Report: the verdict on a window of training steps — input-bound, compute-bound, launch-bound,
// communication-bound or throttled — with the numbers behind it and concrete advice
// (docs/architecture.md#diagnostics; docs/diagnostics.md defines every number and the rules below).
//
// Rules (Thresholds, seeded from TensorFlow's profiler):
//   1. Each of input, launch and exposed communication is rated by its share of the step time:
//      none, moderate (>= *_moderate) or high (>= *_high).
//   2. If any is high, the verdict is the largest high share.
//   3. Else, if the GPU monitor saw slowdown clock-event reasons in >= throttle_samples of its
//      busy samples while the SM clock averaged < throttle_clock_ratio of its maximum:
//      throttled.
//   3b. Else, when steps were timed op by op: bandwidth-bound if the share of the step in
//      memory-bound ops near the bandwidth roof is >= bandwidth_high.
//   4. Else, if any of input, launch, communication is moderate, the verdict is the largest
//      moderate share (level moderate); else bandwidth-bound (moderate) from bandwidth_moderate.
//   5. Else compute-bound: the device (or, on the CPU, the training thread's own arithmetic) is
//      what limits the step.
// make_report is a pure function of its inputs, so the rules are unit-tested on recorded
// timings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/diag/breakdown.h"
#include "stoker/diag/curves.h"
#include "stoker/diag/gpu_monitor.h"
#include "stoker/diag/op_profile.h"
#include "stoker/diag/options.h"

namespace stoker::diag {

enum class Verdict {
  compute_bound,
  input_bound,
  launch_bound,
  communication_bound,
  throttled,
  bandwidth_bound
};
enum class Level { none, moderate, high };
// "compute-bound", "input-bound", ...
const char* verdict_name(Verdict v);
const char* level_name(Level l);

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
  std::string what;  // "input", "launch", "communication", "bandwidth"
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

// The verdict and advice for a window (see the rules above).
// `ops`: the window's op table (empty: no op-timed step, no bandwidth finding).
Report make_report(const Breakdown& breakdown, const LoaderView& loader, const GpuHealth& gpu,
                   const Thresholds& thresholds = {}, const OpTable& ops = {});

// "3,100" — thousands separated, for the advice text.
std::string format_count(double v);

}  // namespace stoker::diag
