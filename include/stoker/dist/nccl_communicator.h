// NcclCommunicator: the GPU backend, one rank per GPU, over NCCL (single or multi-node).
//
// Rank 0 creates an NcclUniqueId and hands it to every rank (dist::init_from_env does this over
// the TCP rendezvous); each rank then joins with (id, rank, world_size, its device). Collectives
// are enqueued on the calling thread's current stream of the device (the gradient syncs use
// the comm stream) and return at once: no host synchronization, except barrier(), which waits.
// Dtypes map to NCCL's (f32, f16, bf16, i32, i64, u8); avg is ncclAvg.
//
// In a build without CUDA the class exists but its constructor and create_unique_id() throw.
// Failure: NCCL cannot time out a collective whose peer died; abort() (ncclCommAbort) ends this
// rank's pending work. init_from_env's PeerWatch (dist/peer_watch.h) ends every surviving rank
// with a clear error as soon as a process of the job dies, under any launcher.
//
// Ownership: owns the ncclComm_t (destroyed with the communicator). Not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "stoker/dist/communicator.h"

namespace stoker::dist {

// NCCL's ncclUniqueId (NCCL_UNIQUE_ID_BYTES = 128), kept opaque so this header needs no NCCL.
struct NcclUniqueId {
  std::array<uint8_t, 128> bytes{};
};

class NcclCommunicator final : public Communicator {
 public:
  // A new id (rank 0), to be sent to every rank.
  static NcclUniqueId create_unique_id();
  // The NCCL version this process runs with ("2.28.3"); "not built" without CUDA.
  static std::string version();

  // Joins the clique of `id` as `rank` of `world_size` on `device` (a CUDA device). Collective:
  // every rank must construct it (ncclCommInitRank blocks until all have).
  NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, Device device);
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

 private:
  Device device_;
  void* comm_ = nullptr;
  bool aborted_ = false;
};

}  // namespace stoker::dist
