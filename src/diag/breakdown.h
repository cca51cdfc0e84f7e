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

#include "diag/step_timer.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

// Median, p90 (nearest rank) and mean of `values` (zeros for an empty span).
PhaseStat summarize_values(std::span<const double> values);

// The window's breakdown (steps in any order; an empty window gives steps = 0).
Breakdown summarize(std::span<const StepSample> steps);

}  // namespace stoker::diag
