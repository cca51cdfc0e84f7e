// ShardedGradSync: ZeRO-1's gradient synchronization — the optimizer state is split across
// ranks (docs/distributed.md#zero-1-optimizer-state-sharded-over-the-ranks).
//
// Each bucket (dist/bucketed_grad_sync.h) is padded to a multiple of world_size x 16 elements
// and REDUCE-SCATTERED (avg) on the comm stream as soon as backward has written it, so after
// finish() rank r holds the averaged gradient of slice r of every bucket (the rest of the
// buffer keeps this rank's local gradients: read only the slices, step_gradients()). The
// parameters' fp32 values also move into one flat buffer per bucket (as views, with the
// gradients' layout), so an optimizer built over shard_parameters() — one Parameter per bucket,
// the rank's slice of values and gradients — updates contiguous slices with the usual
// multi-tensor kernels and keeps state for 1/world_size of the model; gather_parameters() then
// all-gathers the updated slices so every rank holds every weight. dist::ShardedOptimizer
// (dist/sharded_optimizer.h) packages this and is the only optimizer check_optimizer() accepts.
//
// The step's norm is global (total_norm(): this rank's slice norms all-gathered, then their
// norm) and the fp16 overflow flag is made global (agree_on_overflow(): an all-reduce max), so
// clipping and skipping an overflowed step agree on every rank. Accumulation (no_sync) is
// unchanged: the full local gradients accumulate in the buckets.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/dist/bucketed_grad_sync.h"

namespace stoker::dist {

class ShardedGradSync final : public BucketedGradSync {
 public:
  // All parameters of `model` (named as in weight files); also broadcasts its buffers.
  ShardedGradSync(Communicator& comm, nn::Module& model, GradSyncOptions options = {});
  ShardedGradSync(Communicator& comm, std::vector<std::pair<std::string, nn::Parameter*>> params,
                  GradSyncOptions options = {});

  std::string describe() const override;
  // This rank's gradient slices, one per bucket (averaged over ranks after finish()).
  std::vector<Tensor> step_gradients() const override;
  // sqrt(sum over ranks of local_norm^2); a collective: every rank calls it.
  Tensor total_norm(std::span<const Tensor> grads) override;
  // found_inf = max over ranks (an Inf lands in one rank's slice only); a collective.
  void agree_on_overflow(const Tensor& found_inf) override;
  // Accepts only a dist::ShardedOptimizer built over this sync.
  void check_optimizer(const optim::Optimizer& optimizer) const override;

  // One Parameter per bucket, named "zero1.bucket<b>", whose value and gradient are views of this
  // rank's slice of the bucket's value and gradient buffers (owned by the sync).
  std::vector<std::pair<std::string, nn::Parameter*>> shard_parameters();
  // All-gathers every bucket's value slices so that each rank holds every updated weight, and
  // marks the parameters' half compute copies stale. A collective, on the current stream.
  void gather_parameters();

 protected:
  void reduce(const Bucket& b) override;

 private:
  static BucketLayout sharded_layout(const Communicator& comm);
  void set_shard_sizes();

  std::vector<std::unique_ptr<nn::Parameter>> shards_;  // per bucket, made on demand
};

}  // namespace stoker::dist
