// NcclCommunicator: the GPU backend, one rank per GPU, over NCCL (single or multi-node).
//
// Rank 0 creates an NcclUniqueId and hands it to every rank (dist::init_from_env does this over
// the TCP rendezvous); each rank then joins with (id, rank, world_size, its device). Collectives
// are enqueued on the calling thread's current stream of the device (the gradient syncs use
// the comm stream) and return at once: no host synchronization, except barrier(), which waits.
// Dtypes map to NCCL's (f32, f16, bf16, i32, i64, u8); avg is ncclAvg.
//
// In a build without CUDA the class exists but its constructor and create_unique_id() throw.
// Failure: NCCL cannot time out a collective by itself, so each communicator runs a watchdog
// thread: after every collective it records a completion event on the stream (no host sync),
// and every NcclOptions::poll_interval_s the thread polls those events and
// ncclCommGetAsyncError. WatchdogPolicy (dist/watchdog_policy.h) decides: on an asynchronous
// error, or a collective not complete after NcclOptions::timeout_s, the watchdog calls
// ncclCommAbort, writes the flight recorder, prints the message on stderr, and the next call on
// the communicator throws it. NCCL cannot say which ranks had not reached the collective; on a
// timeout the watchdog asks the job's peer watch (NcclOptions::progress_query) for every rank's
// last sequence number and names the ranks behind it, or the ones that did not answer (a
// stopped process). abort() (ncclCommAbort) ends this rank's pending work. init_from_env's
// PeerWatch (dist/peer_watch.h) ends every surviving rank with a clear error as soon as a process
// of the job dies, under any launcher.
//
// Ownership: owns the ncclComm_t (destroyed with the communicator). Not thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "dist/peer_watch.h"
#include "stoker/dist/communicator.h"

namespace stoker::dist {

// NCCL's ncclUniqueId (NCCL_UNIQUE_ID_BYTES = 128), kept opaque so this header needs no NCCL.
struct NcclUniqueId {
  std::array<uint8_t, 128> bytes{};
};

struct NcclOptions {
  // The collective timeout: a collective not complete this long after it could start (the one
  // before it completed, or it was enqueued) aborts the communicator.
  double timeout_s = 600.0;
  double poll_interval_s = 0.1;  // how often the watchdog polls
  bool watchdog = true;          // false: no thread, no events (completions are not recorded)
  FlightRecorderOptions flight_recorder{};
  // Asks every rank how far it had got (PeerWatch::progress_query; init_from_env sets it). Empty:
  // a timeout says that the ranks behind are unknown.
  PeerWatch::ProgressQuery progress_query;
  // How long the watchdog waits for the answer: two of PeerWatch's 1 s answer windows (the ranks
  // that time out together ask together; the later asks wait for a second gather) and slack.
  double progress_timeout_s = 3.0;
};

class NcclCommunicator final : public Communicator {
 public:
  // A new id (rank 0), to be sent to every rank.
  static NcclUniqueId create_unique_id();
  // The NCCL version this process runs with ("2.28.3"); "not built" without CUDA.
  static std::string version();

  // Joins the clique of `id` as `rank` of `world_size` on `device` (a CUDA device). Collective:
  // every rank must construct it (ncclCommInitRank blocks until all have).
  NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, Device device,
                   NcclOptions options = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  Device device() const override { return device_; }
  std::string describe() const override;
  void abort(const std::string& reason) override;

  void* handle() const { return comm_; }  // ncclComm_t

 protected:
  void do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void do_broadcast(const Tensor& t, int root) override;
  void do_all_gather(const Tensor& in, const Tensor& out) override;
  void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void do_barrier() override;
  bool completes_on_return() const override { return false; }

 private:
  struct Watchdog;  // src/dist/cuda/nccl_communicator.cpp
  // Throws the watchdog's error, or the abort, before a collective.
  void check_usable(const char* op) const;
  // After a collective was enqueued: its completion event, for the watchdog.
  void track();

  Device device_;
  void* comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  NcclOptions options_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace stoker::dist
