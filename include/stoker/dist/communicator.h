// Communicator: the collectives data parallelism needs, over one group of ranks
// (docs/architecture.md#data-parallelism).
//
// Backends: NcclCommunicator (GPU tensors, the real engine), ThreadCommunicator (ranks as threads
// of one process, CPU tensors: tests and CPU training) and TcpCommunicator (ranks as processes,
// CPU tensors over the rendezvous' sockets: CPU runs under `stoker launch`). Every rank must call
// the same collectives in the same order with the same shapes and dtypes; a mismatch or a rank
// that stops answering is an error on the others (ThreadCommunicator and TcpCommunicator check
// and time out; NCCL hangs until the launcher stops the job).
//
// Streams: on a GPU, a collective is enqueued on the calling thread's current stream of the
// communicator's device (core::current_stream) and returns without waiting for it; the
// bucketed gradient syncs make the comm stream current around their launches. CPU backends run
// synchronously.
// Results are the same on every rank, bit for bit (each backend reduces in one fixed order).
//
// Buffers: `in` and `out` may be the same tensor (in place). all_gather's `out` holds world_size
// copies of `in`'s element count, rank after rank; reduce_scatter's `out` holds in.numel() /
// world_size elements: rank r receives chunk r of the reduction. Tensors must live on device().
//
// Ownership: a Communicator is owned by its user (one per rank). Not thread-safe: one thread
// per rank issues its collectives.
#pragma once

#include <string>

#include "stoker/core/tensor.h"

namespace stoker::dist {

// avg = sum / world_size (integers: truncated); float dtypes reduce in fp32 and round once.
enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

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

 protected:
  Communicator(int rank, int world_size);

  virtual void do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  virtual void do_broadcast(const Tensor& t, int root) = 0;
  virtual void do_all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual void do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) = 0;
  virtual void do_barrier() = 0;

 private:
  void check_tensor(const char* op, const char* name, const Tensor& t) const;

  int rank_;
  int world_size_;
};

}  // namespace stoker::dist
