// ReplicatedGradSync: data-parallel gradient averaging, overlapped with backward
// (docs/distributed.md#gradient-synchronization). Every bucket (dist/bucketed_grad_sync.h) is
// all-reduced (avg) on the comm stream as soon as backward has written it, so after finish()
// every rank holds the whole averaged gradient, in the parameters' own gradients (views into
// the buckets).
//
// The averaged gradients are bit-identical on all ranks (each backend reduces in one order and
// hands every rank the same result), so clipping, the fp16 loss scaler's overflow check and the
// optimizer take the same decisions everywhere without further communication: step_gradients()
// are the parameters' gradients, total_norm() is ops::l2_norm, agree_on_overflow() does nothing,
// and any optim::Optimizer over the same parameters applies them.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/dist/bucketed_grad_sync.h"

namespace stoker::dist {

class ReplicatedGradSync final : public BucketedGradSync {
 public:
  // All parameters of `model` (named as in weight files); also broadcasts its buffers.
  ReplicatedGradSync(Communicator& comm, nn::Module& model, GradSyncOptions options = {});
  ReplicatedGradSync(Communicator& comm, std::vector<std::pair<std::string, nn::Parameter*>> params,
                     GradSyncOptions options = {});

  std::string describe() const override;
  std::vector<Tensor> step_gradients() const override;
  Tensor total_norm(std::span<const Tensor> grads) override;

 protected:
  void reduce(const Bucket& b) override;
};

}  // namespace stoker::dist
