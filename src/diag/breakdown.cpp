#include "diag/breakdown.h"

#include <algorithm>
#include <cmath>

namespace stoker::diag {

PhaseStat summarize_values(std::span<const double> values) {
  PhaseStat s;
  if (values.empty()) return s;
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median_ms = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  // Nearest rank: the smallest value with at least 90 % of the values at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));
  s.p90_ms = v[std::max<size_t>(rank, 1) - 1];
  double sum = 0;
  for (double x : v) sum += x;
  s.mean_ms = sum / static_cast<double>(n);
  return s;
}

Breakdown summarize(std::span<const StepSample> steps) {
  Breakdown b;
  b.steps = static_cast<int64_t>(steps.size());
  if (steps.empty()) return b;
  b.first_step = steps.front().step;
  b.last_step = steps.front().step;
  b.device_timed = true;
  b.launch_known = true;
  b.h2d_known = true;
  const size_t n = steps.size();
  std::vector<double> step(n), other(n), launch, h2d;
  std::array<std::vector<double>, kPhaseCount> host, device;
  double sum_step = 0, sum_input = 0, sum_launch = 0, sum_comm = 0, sum_host_data = 0, sum_h2d = 0,
         sum_syncs = 0;
  for (size_t i = 0; i < n; ++i) {
    const StepSample& s = steps[i];
    b.first_step = std::min(b.first_step, s.step);
    b.last_step = std::max(b.last_step, s.step);
    b.device_timed = b.device_timed && s.has_device;
    b.launch_known = b.launch_known && s.launch_ms >= 0;
    b.h2d_known = b.h2d_known && s.h2d_ms >= 0;
    step[i] = s.host_ms;
    double in_phases = 0;
    for (int p = 0; p < kPhaseCount; ++p) {
      host[p].push_back(s.host[p]);
      device[p].push_back(s.device[p]);
      in_phases += s.host[p];
    }
    other[i] = std::max(0.0, s.host_ms - in_phases);
    if (s.launch_ms >= 0) launch.push_back(s.launch_ms);
    if (s.h2d_ms >= 0) h2d.push_back(s.h2d_ms);
    sum_step += s.host_ms;
    sum_host_data += s.host[static_cast<int>(Phase::data)];
    sum_syncs += static_cast<double>(s.host_syncs);
    b.max_host_syncs = std::max(b.max_host_syncs, s.host_syncs);
    b.samples += s.samples;
    sum_h2d += std::max(0.0, s.h2d_ms);
  }
  b.step = summarize_values(step);
  b.other = summarize_values(other);
  for (int p = 0; p < kPhaseCount; ++p) {
    b.host[p] = summarize_values(host[p]);
    if (b.device_timed) b.device[p] = summarize_values(device[p]);
  }
  if (b.launch_known) b.launch = summarize_values(launch);
  if (b.h2d_known) b.h2d = summarize_values(h2d);
  // The shares' denominator: the host's step, or on a GPU the device's when it is longer (a
  // host that runs ahead of the device, as in a loop without back-pressure).
  double sum_share_base = 0;
  for (const StepSample& s : steps) {
    const auto& src = b.device_timed ? s.device : s.host;
    sum_input += src[static_cast<int>(Phase::data)];
    sum_comm += src[static_cast<int>(Phase::comm)];
    if (b.device_timed && b.launch_known) sum_launch += s.launch_ms;
    double device_step = 0;
    for (double v : s.device) device_step += v;
    sum_share_base += b.device_timed ? std::max(s.host_ms, device_step) : s.host_ms;
  }
  if (sum_step > 0 && sum_share_base > 0) {
    b.input_share = std::min(1.0, sum_input / sum_share_base);
    b.comm_share = std::min(1.0 - b.input_share, sum_comm / sum_share_base);
    b.launch_share = std::min(1.0 - b.input_share - b.comm_share, sum_launch / sum_share_base);
    b.compute_share = std::max(0.0, 1.0 - b.input_share - b.comm_share - b.launch_share);
    b.host_data_share = std::min(1.0, sum_host_data / sum_step);
    b.samples_per_s = static_cast<double>(b.samples) / (sum_step / 1e3);
    const double busy = sum_share_base - std::min(sum_share_base, sum_input);
    b.demand_samples_per_s = busy > 0 ? static_cast<double>(b.samples) / (busy / 1e3) : 0;
  }
  b.mean_host_syncs = sum_syncs / static_cast<double>(n);
  b.h2d_input_share = b.h2d_known && sum_input > 0 ? std::min(1.0, sum_h2d / sum_input) : 0;
  return b;
}

}  // namespace stoker::diag
