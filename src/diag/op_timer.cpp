#include "diag/op_timer.h"

#include "diag/step_timer.h"

namespace stoker::diag {

OpTimer::OpTimer(Device device) : device_(device), gpu_(device.is_cuda()) {}

OpTimer::~OpTimer() {
  if (active_) core::set_op_listener(previous_);
}

core::Event OpTimer::take_event() {
  if (pool_.empty()) return core::Event::create(device_, /*timing=*/true);
  core::Event e = pool_.back();
  pool_.pop_back();
  return e;
}

void OpTimer::release(Timed& t) {
  for (core::Event& e : t.events) pool_.push_back(e);
  t.events.clear();
}

void OpTimer::point() {
  if (gpu_) {
    core::Event e = take_event();
    e.record(core::current_stream(device_));
    current_.events.push_back(e);
  } else {
    current_.host_ms.push_back(now_ms());
  }
}

void OpTimer::start(int64_t step) {
  if (active_) cancel();
  current_ = Timed{};
  current_.step.step = step;
  depth_ = 0;
  active_ = true;
  previous_ = core::set_op_listener(this);
  point();
}

void OpTimer::cancel() {
  if (!active_) return;
  core::set_op_listener(previous_);
  active_ = false;
  release(current_);
  current_ = Timed{};
}

void OpTimer::stop() {
  if (!active_) return;
  point();
  core::set_op_listener(previous_);
  active_ = false;
  if (pending_.size() >= kMaxPending) {  // nobody reads them: keep the newest
    release(pending_.front());
    pending_.pop_front();
  }
  pending_.push_back(std::move(current_));
  current_ = Timed{};
}

void OpTimer::op_begin(const char* name, Device device, const core::OpCost& cost) {
  if (++depth_ != 1 || device != device_) return;
  OpRecord r;
  r.name = name;
  r.module = core::module_path();
  r.cost = cost;
  current_.step.ops.push_back(std::move(r));
  point();
}

void OpTimer::op_end() {
  if (depth_-- != 1) return;
  // An op on another device than the timed one recorded no point at its begin.
  const size_t points = gpu_ ? current_.events.size() : current_.host_ms.size();
  if (points == 2 * current_.step.ops.size()) point();
}

std::vector<OpStep> OpTimer::completed() {
  std::vector<OpStep> out;
  while (!pending_.empty()) {
    Timed& t = pending_.front();
    const size_t n = t.step.ops.size();
    if (gpu_) {
      if (t.events.size() != 2 * n + 2 || !t.events.back().query()) break;
      t.step.step_ms = core::Event::elapsed_ms(t.events.front(), t.events.back());
      for (size_t i = 0; i < n; ++i) {
        t.step.ops[i].ms = core::Event::elapsed_ms(t.events[1 + 2 * i], t.events[2 + 2 * i]);
        t.step.ops[i].start_ms = core::Event::elapsed_ms(t.events.front(), t.events[1 + 2 * i]);
      }
      release(t);
    } else if (t.host_ms.size() == 2 * n + 2) {
      t.step.step_ms = t.host_ms.back() - t.host_ms.front();
      for (size_t i = 0; i < n; ++i) {
        t.step.ops[i].ms = t.host_ms[2 + 2 * i] - t.host_ms[1 + 2 * i];
        t.step.ops[i].start_ms = t.host_ms[1 + 2 * i] - t.host_ms.front();
      }
    }
    out.push_back(std::move(t.step));
    pending_.pop_front();
  }
  return out;
}

}  // namespace stoker::diag
