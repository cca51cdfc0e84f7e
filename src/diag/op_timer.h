// Private: OpTimer, the core::OpListener the Diagnostics install for the steps they time op by
// op (src/diag/op_profile.h).
//
// On a GPU each op gets a timing event recorded on the compute stream (the calling thread's
// current stream of the device) before its launch and one after; the step gets one at its start
// and one at its end. Nothing waits: completed() polls the events (Event::query) and returns the
// steps whose last event has completed. An op's time so includes its launch latency when the
// stream was idle waiting for it (what a launch-bound step is made of), and the step's idle
// time is what lies between the ops. On the CPU the host clock times each op.
//
// Ops called from inside another op are not recorded separately (the outermost one is).
//
// Thread-safety: the training thread only (the listener is per thread).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "diag/op_profile.h"
#include "stoker/core/device.h"
#include "stoker/core/op_listener.h"
#include "stoker/core/stream.h"

namespace stoker::diag {

class OpTimer final : public core::OpListener {
 public:
  explicit OpTimer(Device device);
  ~OpTimer() override;
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Times the ops of step `step` on this thread until stop().
  void start(int64_t step);
  void stop();
  bool active() const { return active_; }
  // Forgets the step being timed (it trained nothing).
  void cancel();

  // Op-timed steps whose events have all completed, oldest first, removed from the timer.
  std::vector<OpStep> completed();
  size_t pending() const { return pending_.size(); }

  void op_begin(const char* name, Device device, const core::OpCost& cost) override;
  void op_end() override;

 private:
  struct Timed {
    OpStep step;
    std::vector<core::Event> events;  // GPU: step start, (before, after) per op, step end
    std::vector<double> host_ms;      // CPU: the same points on the host clock
  };
  void point();
  core::Event take_event();
  void release(Timed& t);

  Device device_;
  bool gpu_;
  bool active_ = false;
  int depth_ = 0;
  core::OpListener* previous_ = nullptr;
  Timed current_;
  std::deque<Timed> pending_;
  std::vector<core::Event> pool_;
  static constexpr size_t kMaxPending = 8;
};

}  // namespace stoker::diag
