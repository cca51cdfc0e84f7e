// ShardedOptimizer: ZeRO-1 — each data-parallel rank keeps the optimizer state (any element-wise
// optimizer and StateFormat, made by the factory) of its slice of every ShardedGradSync bucket,
// updates it, and all-gathers the updated slices: f32/bf16 state gives the unsharded run's bits
// (without clipping). LARS (needs_whole_parameters) is refused. checkpoint_state() is a
// collective and saves under the unsharded names; state() is this rank's shard.
// Ownership: borrows the sync (it must outlive this); owns the inner optimizer.
// Not thread-safe (one per rank).
// Details: docs/distributed.md#zero-1-optimizer-state-sharded-over-the-ranks.
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
