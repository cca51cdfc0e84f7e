// Private: the estimated time left of a fit, one formula for the log line and the progress bar.
#pragma once

#include <algorithm>
#include <cstdint>

namespace stoker::train {

// Seconds until `total_steps` at the pace of the steps from `first_step` to `step`, which took
// `elapsed_s` (evaluation included); -1 when unknown (no total, or no step done yet).
inline double seconds_left(int64_t step, int64_t first_step, int64_t total_steps,
                           double elapsed_s) {
  const int64_t done = step - first_step;
  if (total_steps < 0 || done <= 0) return -1.0;
  return static_cast<double>(std::max<int64_t>(0, total_steps - step)) * elapsed_s /
         static_cast<double>(done);
}

}  // namespace stoker::train
