// Breakdown: a window of timed steps reduced to medians, p90s and shares of the step time
// (docs/diagnostics.md defines every field).
//
// Shares are ratios of sums over the window (as TensorFlow's profiler does), so a few slow
// steps weigh what they cost; medians and p90s describe the typical and the bad step. The
// denominator is the host's step time, or on a GPU the device's (the sum of its phase spans)
// where that is longer.
// On a GPU the shares come from the device (compute-stream) spans: the host's own data wait
// also holds back-pressure (a host that runs ahead of the GPU ends up waiting for a free loader
// slot), while the device's data span is the time the GPU really had nothing to do but wait for
// its input. On the CPU the host spans are the work itself.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "stoker/diag/step_timer.h"

namespace stoker::diag {

struct PhaseStat {
  double median_ms = 0;
  double p90_ms = 0;
  double mean_ms = 0;
};

// Median, p90 (nearest rank) and mean of `values` (zeros for an empty span).
PhaseStat summarize_values(std::span<const double> values);

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
  // Shares of the summed step time (0..1; see above).
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

// The window's breakdown (steps in any order; an empty window gives steps = 0).
Breakdown summarize(std::span<const StepSample> steps);

}  // namespace stoker::diag
