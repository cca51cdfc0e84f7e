// NcclCommunicator over NCCL (compiled only with CUDA; src/dist/nccl_unavailable.cpp stands in
// otherwise). Every call goes through STOKER_NCCL_CHECK; the device is made current around each
// call because NCCL launches on the current device of the calling thread.
//
// The watchdog: after each collective the rank's thread records an event (from a pool; created
// only while the pool grows) on the collective's stream and queues (seq, event). The watchdog
// thread pops the events that completed (marking the flight recorder), polls
// ncclCommGetAsyncError, and asks WatchdogPolicy what to do; on an abort it calls
// ncclCommAbort, stores the message (the next call throws it), writes the flight recorder and
// prints the message, then ends.
#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/cuda_util.h"
#include "dist/nccl_communicator.h"
#include "dist/watchdog_policy.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "stoker/core/stream.h"

namespace stoker::dist {

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes),
              "NcclUniqueId must hold NCCL_UNIQUE_ID_BYTES");

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

ncclComm_t comm_of(void* p) { return static_cast<ncclComm_t>(p); }

}  // namespace

struct NcclCommunicator::Watchdog {
  struct Pending {
    uint64_t seq = 0;
    cudaEvent_t event = nullptr;
  };

  NcclCommunicator* owner = nullptr;
  WatchdogPolicy policy;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> pending;           // enqueued, not seen complete, oldest first
  std::vector<cudaEvent_t> free_events;  // completed, to reuse
  bool stop = false;
  std::atomic<bool> failed{false};
  std::string error;  // under mu, once failed
  std::thread thread;

  ~Watchdog() {
    stop_thread();
    for (const Pending& p : pending) cudaEventDestroy(p.event);
    for (cudaEvent_t e : free_events) cudaEventDestroy(e);
  }

  void stop_thread() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }

  std::string error_message() {
    std::lock_guard<std::mutex> lock(mu);
    return error;
  }

  void run() {
    cudaSetDevice(owner->device_.index);
    int64_t last_completed_ns = 0;
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, std::chrono::duration<double>(policy.poll_interval_s));
      if (stop) return;
      // The rank's thread only appends to `pending` and this thread only pops: the queries run
      // on a copy, without the lock, so that enqueuing a collective never waits for them.
      const std::vector<Pending> snap(pending.begin(), pending.end());
      lock.unlock();
      std::string async_error;
      // Completions, oldest first (a stream completes its work in order; different streams
      // may not, so only the front is trusted to say "still running").
      size_t done = 0;
      for (; done < snap.size(); ++done) {
        const cudaError_t q = cudaEventQuery(snap[done].event);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess) {
          async_error =
              fmt::format("CUDA error while waiting for the collective's completion event: {}",
                          cudaGetErrorString(q));
          (void)cudaGetLastError();
          break;
        }
        last_completed_ns = FlightRecorder::now_ns();
        owner->mark_collective_ended(snap[done].seq, CollectiveState::completed, last_completed_ns);
        if (done + 1 < snap.size())
          owner->mark_collective_started(snap[done + 1].seq, last_completed_ns);
      }
      if (async_error.empty()) {
        ncclResult_t r = ncclSuccess;
        if (ncclCommGetAsyncError(comm_of(owner->comm_), &r) == ncclSuccess && r != ncclSuccess &&
            r != ncclInProgress)
          async_error =
              fmt::format("{} (NCCL status {})", ncclGetErrorString(r), static_cast<int>(r));
      }
      std::vector<CollectiveRecord> outstanding;
      outstanding.reserve(snap.size() - done);
      for (size_t i = done; i < snap.size(); ++i)
        if (auto rec = owner->flight_recorder().find(snap[i].seq)) outstanding.push_back(*rec);
      const WatchdogDecision d =
          policy.decide(FlightRecorder::now_ns(), outstanding, last_completed_ns, async_error,
                        owner->rank(), owner->world_size());
      lock.lock();
      for (size_t i = 0; i < done; ++i) {
        free_events.push_back(pending.front().event);
        pending.pop_front();
      }
      if (d.action == WatchdogDecision::Action::none) continue;
      lock.unlock();
      std::string message = d.message;
      if (d.action == WatchdogDecision::Action::abort_timeout) {
        // Which ranks had not reached it: the peer watch asks them (up to progress_timeout_s).
        const NcclOptions& o = owner->options_;
        const std::optional<ProgressTable> table =
            o.progress_query ? o.progress_query(o.progress_timeout_s) : std::nullopt;
        message = WatchdogPolicy::timeout_message(d, static_cast<bool>(o.progress_query), table);
      }
      // Abort: the rank's thread may be blocked in the stream (barrier) or about to issue more.
      lock.lock();
      error = "NcclCommunicator: " + message;
      failed.store(true);
      lock.unlock();
      if (!owner->aborted_.exchange(true)) ncclCommAbort(comm_of(owner->comm_));
      const int64_t now = FlightRecorder::now_ns();
      for (const CollectiveRecord& r : outstanding)
        owner->mark_collective_ended(r.seq, CollectiveState::failed, now);
      std::fprintf(stderr, "stoker: %s\n", message.c_str());
      std::fflush(stderr);
      owner->dump_flight_recorder_on_failure(message);
      return;
    }
  }
};

NcclUniqueId NcclCommunicator::create_unique_id() {
  ncclUniqueId id;
  STOKER_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

std::string NcclCommunicator::version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, Device device,
                                   NcclOptions options)
    : Communicator(rank, world_size), device_(device), options_(std::move(options)) {
  STOKER_CHECK(options_.timeout_s > 0 && options_.poll_interval_s > 0, "NcclOptions: timeout_s ",
               options_.timeout_s, " and poll_interval_s ", options_.poll_interval_s,
               " must be positive");
  configure_flight_recorder(options_.flight_recorder);
  STOKER_CHECK(device.is_cuda(), "NcclCommunicator: needs a CUDA device, got ", device.str());
  STOKER_CHECK_HINT(device.index < core::cuda_device_count(),
                    "with torchrun or `stoker launch`, start at most one process per visible GPU",
                    "NcclCommunicator: rank ", rank, " wants ", device.str(), " but ",
                    core::cuda_device_count(), " CUDA devices are visible");
  core::DeviceScope scope(device.index);
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof(nid));
  ncclComm_t comm = nullptr;
  STOKER_NCCL_CHECK(ncclCommInitRank(&comm, world_size, nid, rank));
  comm_ = comm;
  if (options_.watchdog) {
    watchdog_ = std::make_unique<Watchdog>();
    watchdog_->owner = this;
    watchdog_->policy = {options_.timeout_s, options_.poll_interval_s};
    watchdog_->thread = std::thread([w = watchdog_.get()] { w->run(); });
  }
}

NcclCommunicator::~NcclCommunicator() {
  {
    core::DeviceScope scope(device_.index);
    watchdog_.reset();  // joins the thread, frees the events
  }
  if (!comm_ || aborted_) return;  // ncclCommAbort already freed it
  core::DeviceScope scope(device_.index);
  ncclCommDestroy(comm_of(comm_));
}

std::string NcclCommunicator::describe() const {
  return fmt::format("nccl rank {}/{} on {}", rank(), world_size(), device_.str());
}

void NcclCommunicator::abort(const std::string& reason) {
  // The watchdog stops first: it must not poll a communicator that ncclCommAbort frees.
  if (watchdog_) watchdog_->stop_thread();
  if (!comm_ || aborted_.exchange(true)) return;
  core::DeviceScope scope(device_.index);
  ncclCommAbort(comm_of(comm_));
}

void NcclCommunicator::check_usable(const char* op) const {
  if (watchdog_ && watchdog_->failed.load()) STOKER_THROW(watchdog_->error_message());
  STOKER_CHECK(!aborted_, "NcclCommunicator: ", op, " after abort()");
}

void NcclCommunicator::track() {
  if (!watchdog_) return;
  Watchdog& w = *watchdog_;
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    if (!w.free_events.empty()) {
      ev = w.free_events.back();
      w.free_events.pop_back();
    }
  }
  if (!ev) STOKER_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaError_t rec = cudaEventRecord(ev, core::cuda_stream(device_));
  if (rec != cudaSuccess) {
    cudaEventDestroy(ev);
    STOKER_CUDA_CHECK(rec);
  }
  std::lock_guard<std::mutex> lock(w.mu);
  w.pending.push_back({current_collective().seq, ev});
}

void NcclCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_usable("all_reduce");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclAllReduce(in.data(), out.data(), static_cast<size_t>(in.numel()),
                                  nccl_dtype(in.dtype()), nccl_op(op), comm_of(comm_),
                                  core::cuda_stream(device_)));
  track();
}

void NcclCommunicator::do_broadcast(const Tensor& t, int root) {
  check_usable("broadcast");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclBroadcast(t.data(), t.data(), static_cast<size_t>(t.numel()),
                                  nccl_dtype(t.dtype()), root, comm_of(comm_),
                                  core::cuda_stream(device_)));
  track();
}

void NcclCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  check_usable("all_gather");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()),
                                  nccl_dtype(in.dtype()), comm_of(comm_),
                                  core::cuda_stream(device_)));
  track();
}

void NcclCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_usable("reduce_scatter");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()),
                                      nccl_dtype(in.dtype()), nccl_op(op), comm_of(comm_),
                                      core::cuda_stream(device_)));
  track();
}

void NcclCommunicator::do_barrier() {
  check_usable("barrier");
  // NCCL has no barrier: a one-element all-reduce that every rank must join, then a wait (which
  // the watchdog's abort ends when the all-reduce does not complete in time).
  const Tensor one = Tensor::zeros({1}, DType::f32, device_);
  do_all_reduce(one, one, ReduceOp::sum);
  try {
    core::current_stream(device_).synchronize();
  } catch (const Error&) {
    check_usable("barrier");  // the watchdog's message is the cause
    throw;
  }
  check_usable("barrier");
}

}  // namespace stoker::dist
