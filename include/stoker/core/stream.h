// Stream and Event: thin, copyable handles over CUDA streams and events. Ops run on the calling
// thread's current stream (compute unless a StreamGuard says otherwise); streams meet only through
// events; every host wait counts in host_sync_count(). On the CPU a Stream is empty.
// Thread-safety: handles may be shared between threads; the current stream is thread-local.
// Details: docs/architecture.md#streams.
#pragma once

#include <cstdint>
#include <memory>

#include "stoker/core/device.h"

namespace stoker::core {

class Stream {
 public:
  Stream() = default;  // the CPU stream: no handle, synchronous

  // A new non-blocking stream on `device` (lower priority number = higher priority).
  static Stream create(Device device, int priority = 0);

  Device device() const { return device_; }
  void* handle() const { return handle_; }  // cudaStream_t
  bool is_cuda() const { return handle_ != nullptr; }

  // Blocks the host until all work queued so far has finished. Counts as a host sync.
  void synchronize() const;
  // True when all queued work has finished (does not block, not a sync).
  bool query() const;

  bool operator==(const Stream& o) const { return handle_ == o.handle_ && device_ == o.device_; }

 private:
  Stream(Device d, void* h, std::shared_ptr<void> owner)
      : device_(d), handle_(h), owner_(std::move(owner)) {}
  friend struct StreamAccess;
  Device device_{};
  void* handle_ = nullptr;
  std::shared_ptr<void> owner_;  // destroys the CUDA stream with the last copy
};

// The device's long-lived streams (created on first use, live until exit). CPU: empty Stream.
Stream compute_stream(Device d);
Stream copy_stream(Device d);
Stream comm_stream(Device d);

// The stream ops on `d` run on from this thread: the StreamGuard's, else the compute stream.
Stream current_stream(Device d);

// Makes `s` the current stream of its device for this thread until the guard is destroyed.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  void* previous_;
  std::shared_ptr<void> previous_owner_;
};

class Event {
 public:
  Event() = default;
  // A CUDA event on `device`; with `timing` it can measure elapsed time (slightly costlier).
  static Event create(Device device, bool timing = false);

  // Marks the point in `s` that waiters wait for.
  void record(const Stream& s);
  // Makes stream `s` wait (on the device, not the host) until the recorded point is reached.
  void block(const Stream& s) const;
  // Host waits for the event. Counts as a host sync.
  void synchronize() const;
  bool query() const;
  // Milliseconds between two recorded timing events (both must have completed).
  static float elapsed_ms(const Event& start, const Event& end);

  void* handle() const { return handle_; }

 private:
  Device device_{};
  void* handle_ = nullptr;
  std::shared_ptr<void> owner_;
};

// Number of host-device synchronizations since process start (all threads, all devices).
uint64_t host_sync_count();
// Called by every blocking wait on the device; exposed for subsystems that sync on their own.
void note_host_sync();

// Blocks until everything on `d` finished (all streams). Counts as a host sync. CPU: no-op.
void synchronize_device(Device d);

}  // namespace stoker::core

namespace stoker {
using core::Event;
using core::Stream;
}  // namespace stoker
