// StepTimer: where the time of each training step goes (docs/architecture.md#diagnostics).
//
// The Trainer opens a step, names each phase as it starts (data, forward, backward, comm,
// optimizer; a phase ends where the next begins, and repeats over micro-steps add up) and
// closes the step. Every boundary is a *mark*: a host clock reading and, on a GPU, a timing
// event recorded on the calling thread's current stream of the device (the compute stream).
//
// Nothing waits for the device. Marks are read later: completed() polls the oldest open steps
// with Event::query() and returns the steps whose last event has completed, in order. The
// Trainer calls it at log/report time, right after the log's own host sync, so every event is
// normally complete then; a step whose events are still pending is returned by a later call.
//
// Device clock on the host's time line: whenever the compute stream is idle (Stream::query, no
// wait) at a step's start — at most every half second — or when calibrate() is called (the
// Trainer's log has just waited for the device), a calibration event is recorded there; its
// device time is taken as the host time of its record. A mark's device time is then that of
// the nearest calibration plus (or minus) the elapsed time between the two events, which gives
// the lag of the device behind the host at each mark, hence the host-paced (launch) time of
// the step (Thresholds::host_paced_*). Until a first calibration exists (a GPU that is never
// idle before the first log) the launch time is unknown (-1).
//
// On the CPU every op runs on the calling thread: marks are host clocks only, device spans are
// absent (StepSample::has_device false).
//
// Thread-safety: one thread (the training thread) uses a StepTimer. Events come from a pool
// owned by the timer.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "stoker/core/device.h"
#include "stoker/core/stream.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

// Milliseconds on the process-wide diagnostics clock (steady_clock, zero at first use): the
// time line of traces and marks.
double now_ms();

// One boundary inside a step: `phase` starts here (the step's last mark has end = true).
struct Mark {
  Phase phase = Phase::data;
  bool end = false;
  double host_ms = 0;     // when the host reached it (now_ms())
  double device_ms = -1;  // when the device reached it, on the host's time line (-1: unknown)
};

// One training step.
struct StepSample {
  int64_t step = 0;
  double host_ms = 0;                        // host wall time from open to close
  std::array<double, kPhaseCount> host{};    // host time in each phase (summed over micro-steps)
  std::array<double, kPhaseCount> device{};  // compute-stream time in each phase (GPU)
  bool has_device = false;                   // device[] is measured
  double launch_ms = -1;   // host-paced device time in forward/backward/optimizer (-1: unknown)
  double h2d_ms = -1;      // copy-stream time of this step's batch copies (Loader on a GPU)
  int64_t host_syncs = 0;  // host<->device synchronizations inside the step
  int64_t samples = 0;
  int micro_steps = 0;
  std::vector<Mark> marks;  // in order; the first opens the step
};

class StepTimer {
 public:
  // `device`: where the model computes. With `device_timing` false (or a CPU device) only host
  // clocks are read. `thresholds` decide which device intervals are host-paced.
  StepTimer(Device device, bool device_timing = true, Thresholds thresholds = {});
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  // Opens step `step`; the data phase starts. A step left open is dropped.
  void begin_step(int64_t step);
  // The phase `p` starts now (ends the current one). Ignored outside a step.
  void begin(Phase p);
  // Closes the step: `samples` trained, `h2d_ms` copy-stream time of its batches (-1 unknown).
  void end_step(int64_t samples, double h2d_ms = -1);
  // Forgets the open step (it trained nothing: the epoch had no batch left).
  void cancel_step();
  bool in_step() const { return open_; }

  // Steps whose marks are all readable, oldest first, removed from the timer. Polls only.
  std::vector<StepSample> completed();
  // Records a calibration event if the device's current stream is idle now (no wait); true if
  // it did. Call it right after a host synchronization. With `settle`, polls (query, at most a
  // few milliseconds) until the device has passed the event, so completed() can use it at once.
  bool calibrate(bool settle = false);
  // Closed steps whose device times are not read yet.
  size_t pending() const { return pending_.size(); }
  // Steps dropped because more than kMaxPending were waiting for the device.
  int64_t dropped() const { return dropped_; }
  bool device_timing() const { return device_timing_; }
  Device device() const { return device_; }

  static constexpr size_t kMaxPending = 4096;

 private:
  struct OpenStep {
    StepSample sample;
    std::vector<core::Event> events;  // one per mark (GPU)
    uint64_t syncs_at_open = 0;
  };
  struct Calibration {
    core::Event event;   // recorded on an idle stream ...
    double host_ms = 0;  // ... at this host time
  };
  void mark(Phase p, bool end);
  core::Event take_event();
  void harvest(OpenStep& s);

  Device device_;
  bool device_timing_;
  Thresholds thresholds_;
  bool open_ = false;
  OpenStep current_;
  std::deque<OpenStep> pending_;
  std::vector<core::Event> pool_;
  std::deque<Calibration> calibrations_;  // the newest last (at most kMaxCalibrations)
  static constexpr size_t kMaxCalibrations = 64;
  int64_t dropped_ = 0;
};

}  // namespace stoker::diag
