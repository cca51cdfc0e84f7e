#include "stoker/core/stream.h"

#include <array>
#include <atomic>
#include <mutex>

#include "stoker/core/error.h"

#include "core/cuda_util.h"

namespace stoker::core {

namespace {
constexpr int kMaxDevices = 64;
std::atomic<uint64_t> g_host_syncs{0};

struct CurrentStream {
  void* handle = nullptr;
  std::shared_ptr<void> owner;
};
thread_local std::array<CurrentStream, kMaxDevices> t_current{};

[[maybe_unused]] void check_cuda_device(Device d, const char* what) {
  STOKER_CHECK(d.is_cuda(), what, ": needs a CUDA device, got ", d.str());
  STOKER_CHECK(d.index >= 0 && d.index < cuda_device_count() && d.index < kMaxDevices, what, ": ",
               d.str(), " does not exist (", cuda_device_count(), " CUDA devices visible)");
}

#if STOKER_WITH_CUDA
cudaStream_t new_stream(int device, int priority) {
  DeviceScope scope(device);
  cudaStream_t s = nullptr;
  STOKER_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  return s;
}

// The per-device role streams live for the whole process: destroying them during static
// destruction would race the CUDA runtime's own teardown.
enum Role { kCompute = 0, kCopy = 1, kComm = 2 };
void* role_stream(Device d, Role role) {
  static std::mutex mu;
  static std::array<std::array<void*, 3>, kMaxDevices> streams{};
  check_cuda_device(d, "stream");
  std::lock_guard<std::mutex> lock(mu);
  void*& s = streams[d.index][role];
  if (!s) s = new_stream(d.index, 0);
  return s;
}
#endif
}  // namespace

struct StreamAccess {
  static Stream make(Device d, void* h, std::shared_ptr<void> owner) {
    return Stream(d, h, std::move(owner));
  }
};

Stream Stream::create(Device device, int priority) {
#if STOKER_WITH_CUDA
  check_cuda_device(device, "Stream::create");
  cudaStream_t s = new_stream(device.index, priority);
  std::shared_ptr<void> owner(s, [](void* p) { cudaStreamDestroy(static_cast<cudaStream_t>(p)); });
  return Stream(device, s, std::move(owner));
#else
  STOKER_THROW("Stream::create(", device.str(), "): stoker was built without CUDA");
#endif
}

void Stream::synchronize() const {
  if (!handle_) return;
#if STOKER_WITH_CUDA
  note_host_sync();
  STOKER_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
#endif
}

bool Stream::query() const {
  if (!handle_) return true;
#if STOKER_WITH_CUDA
  const cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (e == cudaErrorNotReady) return false;
  STOKER_CUDA_CHECK(e);
#endif
  return true;
}

Stream compute_stream(Device d) {
  if (d.is_cpu()) return Stream();
#if STOKER_WITH_CUDA
  return StreamAccess::make(d, role_stream(d, kCompute), nullptr);
#else
  STOKER_THROW("compute_stream(", d.str(), "): stoker was built without CUDA");
#endif
}

Stream copy_stream(Device d) {
  if (d.is_cpu()) return Stream();
#if STOKER_WITH_CUDA
  return StreamAccess::make(d, role_stream(d, kCopy), nullptr);
#else
  STOKER_THROW("copy_stream(", d.str(), "): stoker was built without CUDA");
#endif
}

Stream comm_stream(Device d) {
  if (d.is_cpu()) return Stream();
#if STOKER_WITH_CUDA
  return StreamAccess::make(d, role_stream(d, kComm), nullptr);
#else
  STOKER_THROW("comm_stream(", d.str(), "): stoker was built without CUDA");
#endif
}

Stream current_stream(Device d) {
  if (d.is_cpu()) return Stream();
  STOKER_CHECK(d.index >= 0 && d.index < kMaxDevices, "current_stream: bad device ", d.str());
  const CurrentStream& c = t_current[d.index];
  if (c.handle) return StreamAccess::make(d, c.handle, c.owner);
  return compute_stream(d);
}

StreamGuard::StreamGuard(const Stream& s) : device_(s.device()), previous_(nullptr) {
  if (!s.is_cuda()) return;
  CurrentStream& c = t_current[device_.index];
  previous_ = c.handle;
  previous_owner_ = c.owner;
  c.handle = s.handle();
  c.owner = std::shared_ptr<void>(s.handle(), [keep = s](void*) {});  // keeps s alive
}

StreamGuard::~StreamGuard() {
  if (!device_.is_cuda()) return;
  CurrentStream& c = t_current[device_.index];
  c.handle = previous_;
  c.owner = std::move(previous_owner_);
}

Event Event::create(Device device, bool timing) {
  Event e;
  e.device_ = device;
  if (device.is_cpu()) return e;
#if STOKER_WITH_CUDA
  check_cuda_device(device, "Event::create");
  DeviceScope scope(device.index);
  cudaEvent_t ev = nullptr;
  STOKER_CUDA_CHECK(
      cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming));
  e.handle_ = ev;
  e.owner_ =
      std::shared_ptr<void>(ev, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
#else
  STOKER_THROW("Event::create(", device.str(), "): stoker was built without CUDA");
#endif
  return e;
}

void Event::record(const Stream& s) {
  if (!handle_) return;
#if STOKER_WITH_CUDA
  STOKER_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(s.handle())));
#endif
}

void Event::block(const Stream& s) const {
  if (!handle_ || !s.is_cuda()) return;
#if STOKER_WITH_CUDA
  STOKER_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle()),
                                        static_cast<cudaEvent_t>(handle_), 0));
#endif
}

void Event::synchronize() const {
  if (!handle_) return;
#if STOKER_WITH_CUDA
  note_host_sync();
  STOKER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
#endif
}

bool Event::query() const {
  if (!handle_) return true;
#if STOKER_WITH_CUDA
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (e == cudaErrorNotReady) return false;
  STOKER_CUDA_CHECK(e);
#endif
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  STOKER_CHECK(start.handle_ && end.handle_, "Event::elapsed_ms needs two CUDA timing events");
  float ms = 0.0f;
#if STOKER_WITH_CUDA
  STOKER_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_),
                                         static_cast<cudaEvent_t>(end.handle_)));
#endif
  return ms;
}

uint64_t host_sync_count() { return g_host_syncs.load(std::memory_order_relaxed); }
void note_host_sync() { g_host_syncs.fetch_add(1, std::memory_order_relaxed); }

void synchronize_device(Device d) {
  if (d.is_cpu()) return;
#if STOKER_WITH_CUDA
  check_cuda_device(d, "synchronize_device");
  DeviceScope scope(d.index);
  note_host_sync();
  STOKER_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

}  // namespace stoker::core
