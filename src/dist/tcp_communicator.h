// TcpCommunicator: ranks as processes on CPU tensors, over TCP (CPU runs under `stoker launch`
// or torchrun, and the launcher's end-to-end tests).
//
// The connections are the rendezvous' own (rank 0 in the middle, a star): for each collective
// every other rank sends rank 0 a header (sequence number, collective, dtype, element count,
// op, root) and its data; rank 0 checks that all called the same collective, reduces in rank
// order (fp32 accumulation for float dtypes, as ThreadCommunicator) and sends every rank its
// result, so all ranks get the same bits. Simple and slow (rank 0 moves world_size x the data):
// meant for correctness and small CPU jobs, not for speed.
//
// Nothing waits forever: each collective has `timeout_s`. Rank 0 sees every request, so when one
// does not come in time it names every rank that had not reached the collective (sequence
// number, op, bytes, tag) and reports that to the others; the other ranks wait `timeout_s` plus
// 2 s for that report, and when rank 0 itself does not answer they name rank 0. A peer that
// closed its connection
// (failed, exited) fails the collective at once on rank 0, and rank 0 then tells every other
// rank why (or its own exit closes their connections). abort() closes the connections.
//
// Ownership: owns its sockets. Not thread-safe.
#pragma once

#include <memory>
#include <string>

#include "dist/rendezvous.h"
#include "stoker/dist/communicator.h"

namespace stoker::dist {

struct TcpOptions {
  RendezvousOptions rendezvous;
  // The collective timeout: the longest wait for the other ranks in one collective.
  double timeout_s = 600.0;
  // The flight recorder (dist/flight_recorder.h): size, and where a failure writes it.
  FlightRecorderOptions flight_recorder{};
};

class TcpCommunicator final : public Communicator {
 public:
  // Joins the job through the rendezvous: every rank constructs one (collective). World size 1
  // meets nobody and binds no port.
  TcpCommunicator(int rank, int world_size, TcpOptions options = {});
  ~TcpCommunicator() override;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;

  Device device() const override { return Device::cpu(); }
  std::string describe() const override;
  void abort(const std::string& reason) override;

 protected:
  void do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void do_broadcast(const Tensor& t, int root) override;
  void do_all_gather(const Tensor& in, const Tensor& out) override;
  void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void do_barrier() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::dist
