// StepTimer: host clocks and timing events at phase boundaries, read back without waiting.
//
// Host-paced (launch) time, precisely: for each interval between two marks of a step that lies
// in forward, backward or optimizer, let d_end be the device time of its closing mark (on the
// host's time line, through the calibration event) and h_end the host time of that mark. The
// interval is host-paced when d_end - h_end < max(host_paced_lag_ms, host_paced_lag_fraction *
// device span): the compute stream finished the interval's work (almost) as soon as the host had
// enqueued it, so the device was waiting for launches rather than the host for the device. Its
// whole device span then counts as launch time. A device that runs behind the host (the host
// enqueues ahead and later blocks) shows lags of whole steps and no launch time.
#include "diag/step_timer.h"

#include <algorithm>
#include <cmath>

#include "stoker/core/stream.h"

namespace stoker::diag {

namespace {
using Clock = std::chrono::steady_clock;
const Clock::time_point kEpoch = Clock::now();
constexpr double kRecalibrateMs = 500.0;
}  // namespace

double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now() - kEpoch).count(); }

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data:
      return "data";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::comm:
      return "comm";
    case Phase::optimizer:
      return "optimizer";
  }
  return "?";
}

StepTimer::StepTimer(Device device, bool device_timing, Thresholds thresholds)
    : device_(device), device_timing_(device_timing && device.is_cuda()), thresholds_(thresholds) {}

StepTimer::~StepTimer() = default;

core::Event StepTimer::take_event() {
  if (pool_.empty()) return core::Event::create(device_, /*timing=*/true);
  core::Event e = pool_.back();
  pool_.pop_back();
  return e;
}

void StepTimer::begin_step(int64_t step) {
  if (open_) {  // the previous step never closed (an exception inside it): forget it
    for (auto& e : current_.events) pool_.push_back(e);
  }
  current_ = OpenStep{};
  current_.sample.step = step;
  current_.sample.micro_steps = 1;
  current_.syncs_at_open = core::host_sync_count();
  open_ = true;
  if (device_timing_ &&
      (calibrations_.empty() || now_ms() - calibrations_.back().host_ms > kRecalibrateMs))
    calibrate();
  mark(Phase::data, false);
}

void StepTimer::mark(Phase p, bool end) {
  Mark m;
  m.phase = p;
  m.end = end;
  m.host_ms = now_ms();
  if (device_timing_) {
    core::Event e = take_event();
    e.record(core::current_stream(device_));
    current_.events.push_back(e);
  }
  current_.sample.marks.push_back(m);
}

void StepTimer::begin(Phase p) {
  if (!open_) return;
  if (p == Phase::data) current_.sample.micro_steps += 1;
  mark(p, false);
}

void StepTimer::cancel_step() {
  if (!open_) return;
  for (auto& e : current_.events) pool_.push_back(e);
  current_ = OpenStep{};
  open_ = false;
}

void StepTimer::end_step(int64_t samples, double h2d_ms) {
  if (!open_) return;
  mark(Phase::optimizer, true);
  open_ = false;
  StepSample& s = current_.sample;
  s.samples = samples;
  s.h2d_ms = h2d_ms;
  s.micro_steps = std::max(1, s.micro_steps);
  s.host_syncs = static_cast<int64_t>(core::host_sync_count() - current_.syncs_at_open);
  s.host_ms = s.marks.back().host_ms - s.marks.front().host_ms;
  for (size_t i = 0; i + 1 < s.marks.size(); ++i)
    s.host[static_cast<int>(s.marks[i].phase)] += s.marks[i + 1].host_ms - s.marks[i].host_ms;
  if (!device_timing_) {
    // Nothing to read later: the CPU step is complete.
    pending_.push_back(std::move(current_));
    current_ = OpenStep{};
    return;
  }
  if (pending_.size() >= kMaxPending) {  // the device is thousands of steps behind: drop
    for (auto& e : pending_.front().events) pool_.push_back(e);
    pending_.pop_front();
    ++dropped_;
  }
  pending_.push_back(std::move(current_));
  current_ = OpenStep{};
}

bool StepTimer::calibrate(bool settle) {
  if (!device_timing_) return false;
  // An idle stream executes a new event at once: its device time is the host time of its
  // record (plus the submission latency, a few microseconds). query() does not wait.
  const core::Stream s = core::current_stream(device_);
  if (!s.query()) return false;
  Calibration c;
  c.event = core::Event::create(device_, /*timing=*/true);
  c.host_ms = now_ms();
  c.event.record(s);
  calibrations_.push_back(c);
  while (calibrations_.size() > kMaxCalibrations) calibrations_.pop_front();
  for (const double until = now_ms() + 5; settle && !c.event.query() && now_ms() < until;) {
  }
  return true;
}

void StepTimer::harvest(OpenStep& o) {
  StepSample& s = o.sample;
  if (o.events.size() != s.marks.size()) return;
  s.has_device = true;
  // The completed calibration nearest to the step (event times are float milliseconds: the
  // nearer, the finer). Marks and calibrations go to the same stream in host order.
  const Calibration* cal = nullptr;
  const double t0 = s.marks.front().host_ms;
  for (const Calibration& c : calibrations_) {
    if (cal && std::abs(c.host_ms - t0) >= std::abs(cal->host_ms - t0)) continue;
    if (c.event.query()) cal = &c;
  }
  if (cal) {
    for (size_t i = 0; i < s.marks.size(); ++i)
      s.marks[i].device_ms = s.marks[i].host_ms >= cal->host_ms
                                 ? cal->host_ms + core::Event::elapsed_ms(cal->event, o.events[i])
                                 : cal->host_ms - core::Event::elapsed_ms(o.events[i], cal->event);
  }
  double launch = 0;
  for (size_t i = 0; i + 1 < s.marks.size(); ++i) {
    const double span = core::Event::elapsed_ms(o.events[i], o.events[i + 1]);
    const Phase p = s.marks[i].phase;
    s.device[static_cast<int>(p)] += span;
    if (cal && (p == Phase::forward || p == Phase::backward || p == Phase::optimizer)) {
      const double lag = s.marks[i + 1].device_ms - s.marks[i + 1].host_ms;
      const double limit =
          std::max(thresholds_.host_paced_lag_ms, thresholds_.host_paced_lag_fraction * span);
      if (lag < limit) launch += span;
    }
  }
  s.launch_ms = cal ? launch : -1;
  for (auto& e : o.events) pool_.push_back(e);
  o.events.clear();
}

std::vector<StepSample> StepTimer::completed() {
  std::vector<StepSample> out;
  while (!pending_.empty()) {
    OpenStep& o = pending_.front();
    if (!o.events.empty()) {
      if (!o.events.back().query()) break;  // the device has not reached the step's end yet
      harvest(o);
    }
    out.push_back(std::move(o.sample));
    pending_.pop_front();
  }
  return out;
}

}  // namespace stoker::diag
