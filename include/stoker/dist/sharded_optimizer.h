// ShardedOptimizer: ZeRO-1 — optimizer state sharded across data-parallel ranks, each rank
// keeping the state (AdamW moments, SGD momentum, in any optim::StateFormat) of 1/world_size of
// the model, with the same update as the unsharded optimizer.
//
// How: the ShardedGradSync (dist/sharded_grad_sync.h) reduce-scatters each gradient bucket, so
// rank r holds the averaged gradient of slice r of every bucket, and keeps the parameters' fp32
// values in flat buffers with the buckets' layout. The inner optimizer — any element-wise
// optim::Optimizer, made by the factory — is built over sync.shard_parameters(): one parameter
// per bucket, this rank's contiguous slice, so the existing multi-tensor kernels update the
// slices. An optimizer that needs whole parameters (optim::LARS: norms over each tensor;
// Optimizer::needs_whole_parameters) is refused with an error. After the
// inner update the sync all-gathers the updated slices (on the current stream) and the half compute
// copies of every parameter are refreshed as after any step. Why a wrapper and not an option on
// Optimizer: optim sits below dist in the layers, and wrapping keeps AdamW/SGD and their kernels
// untouched.
//
// Equivalence with the unsharded data-parallel update: f32 and bf16 (round-to-nearest) state
// updates are element-wise, and the CPU backends' reduce-scatter adds the ranks in the same
// order as their all-reduce, so the weights are bit-identical — without clipping. With clipping
// the global norm is the norm of the per-rank slice norms (another summation order), equal
// within float rounding. int8_blockwise state quantizes blocks of the slices instead of blocks of
// each parameter, and stochastic rounding draws per slice element: the same statistics, not the
// same bits. NCCL's reduce-scatter and all-reduce may order a sum of more than 2 ranks
// differently.
//
// The sync is taken by type: only a ShardedGradSync slices the gradients this way, so building
// one over a ReplicatedGradSync does not compile. The Trainer (TrainerOptions::grad_sync = the
// same sync; GradSync::check_optimizer refuses any other) unscales and clips the slices only
// (step_gradients()), with a global norm (total_norm()) and, under fp16, an all-reduce (max) of
// the scaler's found_inf (agree_on_overflow()), so every rank skips an overflowed step. Without
// the Trainer: backward, sync.finish(), then the same on sync.step_gradients(), then step().
//
// Checkpoints: checkpoint_state() is a collective (every rank calls it; the Trainer does, and
// rank 0 writes) that all-gathers the slices. f32 and bf16 state comes back under the unsharded
// names and shapes ("<param>.exp_avg"), so a ZeRO-1 checkpoint resumes an unsharded run and the
// reverse, at any world size. 8-bit state (blocks of slices) is stored per bucket, gathered
// ("zero1.bucket<b>.exp_avg.codes" / ".absmax", world_size slices end to end) and resumes only
// with the same world size and bucket sizes. load_checkpoint_state() takes each rank's slice from
// the file (no communication). During a save each rank briefly holds the full gathered state.
// state() and state_bytes() are this rank's shard only (the memory report's optimizer state).
//
// Ownership: borrows the sync (it must outlive this); owns the inner optimizer. Not
// thread-safe (one per rank).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/dist/grad_sync.h"
#include "stoker/optim/optimizer.h"

namespace stoker::dist {

class ShardedOptimizer : public optim::Optimizer {
 public:
  // Builds the inner optimizer over the shard parameters, e.g.
  //   [&](optim::NamedParameters p) { return std::make_unique<optim::AdamW>(p, opts); }
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(optim::NamedParameters)>;
  ShardedOptimizer(ShardedGradSync& sync, const Factory& make);

  std::string describe() const override;
  // This rank's shard state ("zero1.bucket<b>.exp_avg", ..., AdamW's "step_state").
  std::vector<std::pair<std::string, Tensor>> state() override;
  std::vector<std::pair<std::string, Tensor>> checkpoint_state() override;
  bool checkpoint_is_collective() const override { return true; }
  void load_checkpoint_state(const TensorLoader& load) override;
  // Its sync (as a const GradSync*): what ShardedGradSync::check_optimizer looks for.
  const void* sharded_over() const override { return static_cast<const GradSync*>(&sync_); }

  optim::Optimizer& inner() { return *inner_; }
  ShardedGradSync& sync() { return sync_; }

 protected:
  void update() override;

 private:
  void load_slices(const TensorLoader& load);

  ShardedGradSync& sync_;
  std::unique_ptr<optim::Optimizer> inner_;
};

}  // namespace stoker::dist
