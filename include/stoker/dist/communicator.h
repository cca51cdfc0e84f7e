// Communicator: the collectives data parallelism needs, over one group of ranks: NCCL (GPU
// tensors), threads of one process and TCP processes (CPU tensors). Every rank calls the same
// collectives in the same order; a mismatch or a silent rank is an error (checks, timeouts, NCCL's
// watchdog). Each collective gets a sequence number and a flight-recorder entry; on a GPU it is
// enqueued on the current stream without waiting. Results are the same bits on every rank.
// Ownership: owned by its user (one per rank). Not thread-safe: one thread per rank.
// Details: docs/distributed.md#hangs-and-the-flight-recorder.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/core/tensor.h"

namespace stoker::dist {

// enqueued: handed to the backend (NCCL: queued on a stream); started: running (NCCL: the one
// before it completed); completed; failed: threw, timed out or was aborted.
enum class CollectiveState : uint8_t { enqueued, started, completed, failed };
const char* collective_state_name(CollectiveState s);

struct CollectiveRecord {
  static constexpr size_t kTagBytes = 48;

  uint64_t seq = 0;     // 1 for the communicator's first collective
  const char* op = "";  // "all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"
  DType dtype = DType::u8;
  int64_t numel = 0;                  // elements of the input (0 for barrier)
  int64_t bytes = 0;                  // bytes of the input
  const char* reduce_op = "";         // "sum", ... for all_reduce and reduce_scatter, "" otherwise
  int root = -1;                      // broadcast's root, -1 otherwise
  std::array<char, kTagBytes> tag{};  // the caller's tag (truncated), "" when none
  CollectiveState state = CollectiveState::enqueued;
  int64_t enqueue_ns = 0, start_ns = 0, end_ns = 0;  // steady clock (now_ns()); 0: not yet

  std::string_view tag_view() const { return std::string_view(tag.data()); }
  // "collective #5 all_reduce(f32 x 1000, sum, 4000 bytes, tag 'grad_sync bucket 0')"
  std::string str() const;
};

struct FlightRecorderOptions {
  size_t entries = 2048;  // collectives kept (the last ones); >= 1
  // Where a failing collective (or dump_flight_recorder()) writes rank<r>.json; empty: the
  // environment variable STOKER_FLIGHT_RECORDER, and no file when that is unset too.
  std::string dir{};
};

class FlightRecorder;  // dist/flight_recorder.h (private)

// avg = sum / world_size (integers: truncated); float dtypes reduce in fp32 and round once.
enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // Where the tensors of the collectives must live (cpu for the CPU backends, cuda:N for NCCL).
  virtual Device device() const = 0;
  // "nccl rank 0/8 on cuda:0", "threads rank 2/4", ...
  virtual std::string describe() const = 0;

  // out = op over every rank's `in` (same dtype and element count; out may be in).
  void all_reduce(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum);
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce(t, t, op); }
  // Every rank's `t` receives the bytes of rank `root`'s `t`.
  void broadcast(const Tensor& t, int root = 0);
  // out[r * n, (r + 1) * n) = rank r's `in` (n = in.numel()).
  void all_gather(const Tensor& in, const Tensor& out);
  // out = chunk `rank()` of op over every rank's `in` (in.numel() = world_size * out.numel()).
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum);
  // Returns when every rank has called barrier(). On a GPU it also waits for the work queued on
  // the current stream (a host sync).
  void barrier();

  // Makes this rank's collectives, in progress or to come, fail (and, where the backend can,
  // the other ranks' too) instead of waiting for peers: what a rank calls when it fails.
  virtual void abort(const std::string& reason) = 0;

  // The last sequence number given to a collective (0 before the first). Safe to read from any
  // thread.
  uint64_t last_seq() const { return seq_->load(std::memory_order_relaxed); }
  // The counter last_seq() reads, shared so that a reader may outlive the communicator
  // (PeerWatch answers with it when a rank's watchdog asks which ranks are behind).
  std::shared_ptr<const std::atomic<uint64_t>> seq_counter() const { return seq_; }
  // The record of the last collectives (dist/flight_recorder.h, private to the library and its
  // tests).
  const FlightRecorder& flight_recorder() const;
  // Writes the flight recorder (with `reason`) to `path`, or, when empty, to <dir>/rank<r>.json
  // of the backend's FlightRecorderOptions (or $STOKER_FLIGHT_RECORDER); returns the path
  // written, "" when no place is configured. Throws when the file cannot be written.
  std::string dump_flight_recorder(const std::string& reason = "requested",
                                   const std::string& path = "") const;

  // The tag the next collectives are recorded with ("" for none; truncated to 47 bytes).
  // CollectiveTag sets it for a scope.
  void set_collective_tag(std::string_view tag);
  std::string_view collective_tag() const { return std::string_view(tag_.data()); }

 protected:
  Communicator(int rank, int world_size);

  // Backends' constructors: the recorder's size and where its file goes.
  void configure_flight_recorder(const FlightRecorderOptions& options);
  // True when a collective is complete as its do_*() returns (CPU backends). NCCL answers false
  // and marks completions itself (mark_collective_ended).
  virtual bool completes_on_return() const { return true; }
  // The collective being issued (its sequence number, op, tag), for the backends' messages.
  const CollectiveRecord& current_collective() const { return current_; }
  void mark_collective_started(uint64_t seq, int64_t t_ns);
  void mark_collective_ended(uint64_t seq, CollectiveState state, int64_t t_ns);
  // Writes the file for a failure (best effort: a write error goes to stderr); no-op without a
  // configured place.
  void dump_flight_recorder_on_failure(const std::string& reason) const noexcept;

  virtual void do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  virtual void do_broadcast(const Tensor& t, int root) = 0;
  virtual void do_all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  virtual void do_barrier() = 0;

 private:
  void check_tensor(const char* op, const char* name, const Tensor& t) const;
  // Numbers and records the collective, runs `issue` (a do_*() call), records the outcome.
  template <class F>
  void issue(const char* op, const Tensor* t, const char* reduce_op, int root, F&& f);

  int rank_;
  int world_size_;
  // Written by the rank's thread only.
  std::shared_ptr<std::atomic<uint64_t>> seq_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::array<char, CollectiveRecord::kTagBytes> tag_{};
  CollectiveRecord current_;
  std::unique_ptr<FlightRecorder> recorder_;
  FlightRecorderOptions recorder_options_;
};

// Tags the collectives issued on `comm` in this scope (restores the previous tag when it ends):
//   dist::CollectiveTag tag(comm, "grad_sync bucket", b);   // "grad_sync bucket 3"
class CollectiveTag {
 public:
  CollectiveTag(Communicator& comm, std::string_view tag);
  CollectiveTag(Communicator& comm, std::string_view what, int64_t index);
  ~CollectiveTag();
  CollectiveTag(const CollectiveTag&) = delete;
  CollectiveTag& operator=(const CollectiveTag&) = delete;

 private:
  Communicator& comm_;
  std::array<char, CollectiveRecord::kTagBytes> previous_{};
};

}  // namespace stoker::dist
