#include "stoker/dist/grad_sync.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/ops/elementwise.h"

namespace stoker::dist {

ReplicatedGradSync::ReplicatedGradSync(Communicator& comm, nn::Module& model,
                                       GradSyncOptions options)
    : BucketedGradSync("ReplicatedGradSync", comm, &model, model.named_parameters(),
                       std::move(options), {}) {}

ReplicatedGradSync::ReplicatedGradSync(Communicator& comm,
                                       std::vector<std::pair<std::string, nn::Parameter*>> params,
                                       GradSyncOptions options)
    : BucketedGradSync("ReplicatedGradSync", comm, nullptr, std::move(params), std::move(options),
                       {}) {}

std::string ReplicatedGradSync::describe() const {
  return fmt::format("replicated over {} rank{}: {}", world_size(), world_size() == 1 ? "" : "s",
                     describe_buckets("all-reduce"));
}

std::vector<Tensor> ReplicatedGradSync::step_gradients() const {
  std::vector<Tensor> grads;
  for (const auto& [name, p] : parameters()) grads.push_back(p->grad());
  return grads;
}

Tensor ReplicatedGradSync::total_norm(std::span<const Tensor> grads) { return ops::l2_norm(grads); }

void ReplicatedGradSync::reduce(const Bucket& b) {
  compression().encode(b.grads, b.wire);
  comm().all_reduce(b.wire, ReduceOp::avg);
  compression().decode(b.wire, b.grads);
}

}  // namespace stoker::dist
