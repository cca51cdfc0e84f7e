// GradSync: how a training step's gradients become the gradients the optimizer applies — the
// only thing the Trainer calls about data parallelism
// (docs/architecture.md#gradient-synchronization). Three implementations:
//
//   LocalGradSync       one process: the gradients are used as backward left them
//                       (dist/local_grad_sync.h; the Trainer's default)
//   ReplicatedGradSync  data parallelism: bucketed all-reduce (avg) overlapped with backward;
//                       every rank ends with the whole averaged gradient
//                       (dist/replicated_grad_sync.h)
//   ShardedGradSync     ZeRO-1: bucketed reduce-scatter overlapped with backward; each rank ends
//                       with its slice of every bucket averaged, for a dist::ShardedOptimizer
//                       (dist/sharded_grad_sync.h)
//
// A step, as the Trainer runs it: set_sync(false) on every micro-step but the last (or a
// no_sync() scope), backward, finish(), then step_gradients() — unscaled by the fp16 scaler,
// whose overflow flag agree_on_overflow() makes the same on every rank, clipped with
// total_norm() — then the optimizer. Without the Trainer, do the same.
//
// Ownership: an implementation borrows the parameters (and the communicator); they must outlive
// it. Not thread-safe (one per rank).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/tensor.h"
#include "stoker/dist/communicator.h"
#include "stoker/nn/parameter.h"

namespace stoker::optim {
class Optimizer;
}  // namespace stoker::optim

namespace stoker::dist {

class GradSync {
 public:
  virtual ~GradSync() = default;
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // "local", "replicated over 4 ranks: all-reduce of 3 buckets (25.00 MiB), bf16 on the wire",
  // "sharded (ZeRO-1) over 4 ranks: ...".
  virtual std::string describe() const = 0;

  // The group the gradients are averaged over; nullptr for a single process.
  virtual Communicator* communicator() const = 0;
  // This process's rank and the number of ranks (0 and 1 without a communicator).
  int rank() const;
  int world_size() const;

  // Whether the next backward's gradients are synchronized (true) or only accumulated locally
  // (accumulation micro-steps). finish() turns it back on.
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  // A scope in which backward passes do not communicate.
  class NoSync {
   public:
    explicit NoSync(GradSync& s) : s_(s), previous_(s.sync()) { s_.set_sync(false); }
    ~NoSync() { s_.set_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradSync& s_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // After the last backward of a step: completes the synchronization (the current stream waits
  // for it on the device, no host sync), so that step_gradients() are ready for the optimizer.
  // Resets for the next step (sync on), also when it throws.
  void finish();

  // The gradients this rank unscales, clips and takes the norm of before the optimizer step:
  // every requires_grad parameter's gradient in registration order (local, replicated), or this
  // rank's slice of each bucket (sharded). Views, not copies.
  virtual std::vector<Tensor> step_gradients() const = 0;
  // The L2 norm of the whole gradient given this rank's step_gradients(): a device scalar, no
  // host sync. A collective when sharded (every rank calls it).
  virtual Tensor total_norm(std::span<const Tensor> grads) = 0;
  // Makes the fp16 scaler's overflow flag (a device f32 scalar) the same on every rank before the
  // optimizer reads it: a collective when sharded (max over the ranks), nothing otherwise (the
  // gradients, and so the flags, are already identical everywhere).
  virtual void agree_on_overflow(const Tensor& found_inf) {}

  // Throws, with a hint, when `optimizer` cannot apply this synchronization's gradients: a
  // dist::ShardedOptimizer needs the ShardedGradSync it was built over, and that one needs it.
  virtual void check_optimizer(const optim::Optimizer& optimizer) const;

  // Copies rank `root`'s parameter values (and the model's buffers, when built from a Module)
  // to every rank. Nothing for a single process.
  virtual void broadcast_parameters(int root = 0) = 0;

  // The parameters that require gradients, named, in registration order.
  virtual std::vector<std::pair<std::string, nn::Parameter*>> parameters() const = 0;

 protected:
  GradSync() = default;
  // finish() without the reset of sync().
  virtual void finish_step() = 0;

 private:
  bool sync_ = true;
};

}  // namespace stoker::dist
