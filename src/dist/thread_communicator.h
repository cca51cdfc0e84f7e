// ThreadCommunicator: ranks as threads of one process, on CPU tensors (tests, CPU training).
//
// The ranks of a ThreadGroup meet at a barrier for each collective: each posts its buffers and
// what it called, all check that they called the same collective (kind, dtype, element count,
// op, root — a mismatch is an error on every rank), then each reduces its own slice of the
// elements reading every rank's input directly (no copies) into a shared result, and after a
// second barrier copies the result into its output. Every rank therefore gets the same bits,
// reduced in rank order.
//
// Nothing waits forever: a rank that waits longer than `timeout_s` for the others throws an
// error naming the collective (sequence number, op, bytes, tag) and the ranks that did not
// arrive with the last collective each of them reached, and aborts the group; after abort() (called
// by a failing rank, or by run_ranks when a rank's function throws) every collective in progress or
// to come fails at once, naming the reason. A rank whose communicator is destroyed while others
// wait for it makes them fail the same way.
//
// Ownership: the ThreadGroup is shared (shared_ptr) by its communicators. Thread-safety: each
// rank's communicator is used by one thread; the group is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "stoker/dist/communicator.h"

namespace stoker::dist {

struct ThreadGroupOptions {
  // The collective timeout: the longest wait of a rank for the others in one collective.
  double timeout_s = 60.0;
  // Each rank's flight recorder (dist/flight_recorder.h): size, and where a failure writes it.
  FlightRecorderOptions flight_recorder{};
};

class ThreadGroup {
 public:
  explicit ThreadGroup(int world_size, ThreadGroupOptions options = {});
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int world_size() const;
  // Fails every collective in progress or to come with `reason` (the first reason sticks).
  void abort(const std::string& reason);
  bool aborted() const;

  struct State;  // private to the implementation

 private:
  friend class ThreadCommunicator;
  std::unique_ptr<State> state_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank);
  ~ThreadCommunicator() override;
  ThreadCommunicator(const ThreadCommunicator&) = delete;
  ThreadCommunicator& operator=(const ThreadCommunicator&) = delete;

  Device device() const override { return Device::cpu(); }
  std::string describe() const override;
  void abort(const std::string& reason) override;

  ThreadGroup& group() const { return *group_; }

 protected:
  void do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void do_broadcast(const Tensor& t, int root) override;
  void do_all_gather(const Tensor& in, const Tensor& out) override;
  void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void do_barrier() override;

 private:
  std::shared_ptr<ThreadGroup> group_;
};

// Runs fn(comm) for ranks 0..world_size-1, each on its own thread with its own
// ThreadCommunicator of one new group, and joins them. When a rank's fn throws, the group is
// aborted (the other ranks' collectives fail instead of waiting) and, after all threads have
// ended, the first error — the cause, not the aborts it provoked — is rethrown.
void run_ranks(int world_size, const std::function<void(Communicator&)>& fn,
               ThreadGroupOptions options = {});

}  // namespace stoker::dist
