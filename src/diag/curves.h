// Curves: the run over time — the step timeline and the GPU monitor's samples, written as CSV,
// and the findings only a time series shows (docs/diagnostics.md#curves-over-time):
//   - saw-tooth utilization: the GPU alternates between busy bursts and idle gaps (fed in
//     bursts: a loader that fills its queue, then drains it);
//   - slowing down: the step time (or the data wait) rises from the first epoch to the last,
//     with the first epoch at which it did;
//   - evaluation-heavy: evaluation (timed as its own phase by the Trainer) takes a large share of
//     the wall time.
// The detectors are pure functions of recorded series, so they are unit-tested on made-up runs.
//
// Thread-safety: free functions and value types; a SeriesBuffer is used by one thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "diag/gpu_monitor.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

// One optimizer step on the run's time line.
struct TimelinePoint {
  int64_t step = 0;         // optimizer steps done, this one included
  int64_t epoch = 0;        // 0-based
  double time_s = 0;        // seconds since the fit began, at the step's end (host clock)
  double step_ms = 0;       // host wall time of the step
  double data_wait_ms = 0;  // host time in the data phase (BatchSource::next and the copy)
  double device_ms = -1;    // the device's span of the step (GPU; -1: not measured)
  int64_t samples = 0;      // trained in the step (this rank)
  double loss = std::numeric_limits<double>::quiet_NaN();  // log window's mean loss, at log steps
};

// One evaluation inside fit(), on the same time line.
struct EvalSpan {
  int64_t step = 0;    // optimizer steps done when it ran
  double end_s = 0;    // seconds since the fit began when it ended
  double seconds = 0;  // its wall time
};

// A bounded series for runs of days: when `capacity` items are held, every second one is
// dropped (the oldest of each pair is kept) and only every `stride()`-th pushed item is kept
// from then on. The series keeps its whole time span at a resolution that halves each time.
template <class T>
class SeriesBuffer {
 public:
  // An even capacity (rounded up): the item that triggers a halving then lies one new stride
  // after the last item kept.
  explicit SeriesBuffer(size_t capacity = 400000)
      : capacity_(capacity < 2 ? 2 : capacity + capacity % 2) {}
  void push(const T& v) {
    if (seen_++ % stride_ != 0) return;
    if (items_.size() >= capacity_) {
      size_t j = 0;
      for (size_t i = 0; i < items_.size(); i += 2) items_[j++] = items_[i];
      items_.resize(j);
      stride_ *= 2;
      seen_ = 1;  // this item is the first of the new stride
    }
    items_.push_back(v);
  }
  void clear() {
    items_.clear();
    stride_ = 1;
    seen_ = 0;
  }
  const std::vector<T>& items() const { return items_; }
  T& back() { return items_.back(); }
  bool empty() const { return items_.empty(); }
  int64_t stride() const { return stride_; }

 private:
  size_t capacity_;
  std::vector<T> items_;
  int64_t stride_ = 1;
  int64_t seen_ = 0;
};

// `time_s` and `util` of equal length, time ascending.
SawtoothStats detect_sawtooth(const std::vector<double>& time_s, const std::vector<double>& util,
                              const Thresholds& t, std::string source);

// Points in step order; segments with fewer than Thresholds::slowdown_min_steps steps are left
// out (a short last epoch of a max_steps run).
SlowdownStats detect_slowdown(const std::vector<TimelinePoint>& points, const Thresholds& t);

// `gpu`: the monitor's samples of the fit (empty on the CPU or without NVML: the saw-tooth is
// then looked for in the step timeline, as 100 % minus each step's data-wait share).
CurveAnalysis analyze_curves(const std::vector<TimelinePoint>& points,
                             const std::vector<GpuSample>& gpu, const std::vector<EvalSpan>& evals,
                             double wall_s, const Thresholds& t);

// CSV files (a header line, then one row per point; empty fields for unknown values).
// timeline: step,epoch,time_s,step_ms,data_wait_ms,device_ms,samples,loss
std::string timeline_csv(const std::vector<TimelinePoint>& points);
// GPU samples, time relative to `t0_ms` (the fit's start on the diag::now_ms() time line):
// time_s,util_gpu,util_memory,sm_clock_mhz,sm_clock_max_mhz,mem_clock_mhz,power_w,
// power_limit_w,temperature_c,memory_used_mib,pcie_tx_mb_s,pcie_rx_mb_s,clock_events,
// slowdown_reasons
std::string gpu_samples_csv(const std::vector<GpuSample>& samples, double t0_ms);

}  // namespace stoker::diag
