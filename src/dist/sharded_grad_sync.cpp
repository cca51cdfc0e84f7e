#include "stoker/dist/grad_sync.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"

namespace stoker::dist {

BucketedGradSync::BucketLayout ShardedGradSync::sharded_layout(const Communicator& comm) {
  // Every rank's slice of a bucket has the same length and starts 64-byte aligned.
  return {.bucket_multiple = comm.world_size() * kBucketAlignElements, .values_in_buckets = true};
}

ShardedGradSync::ShardedGradSync(Communicator& comm, nn::Module& model, GradSyncOptions options)
    : BucketedGradSync("ShardedGradSync", comm, &model, model.named_parameters(),
                       std::move(options), sharded_layout(comm)) {
  set_shard_sizes();
}

ShardedGradSync::ShardedGradSync(Communicator& comm,
                                 std::vector<std::pair<std::string, nn::Parameter*>> params,
                                 GradSyncOptions options)
    : BucketedGradSync("ShardedGradSync", comm, nullptr, std::move(params), std::move(options),
                       sharded_layout(comm)) {
  set_shard_sizes();
}

void ShardedGradSync::set_shard_sizes() {
  for (int b = 0; b < num_buckets(); ++b)
    mutable_info(b).shard_elements = bucket(b).elements / world_size();
}

std::string ShardedGradSync::describe() const {
  return fmt::format("sharded (ZeRO-1) over {} rank{}: {}", world_size(),
                     world_size() == 1 ? "" : "s", describe_buckets("reduce-scatter"));
}

std::vector<Tensor> ShardedGradSync::step_gradients() const {
  std::vector<Tensor> out;
  const int64_t r = rank();
  for (const Bucket& b : buckets()) {
    const int64_t n = b.info.shard_elements;
    out.push_back(b.grads.slice(r * n, (r + 1) * n));
  }
  return out;
}

Tensor ShardedGradSync::total_norm(std::span<const Tensor> grads) {
  // sqrt(sum over ranks of local_norm^2): the l2 norm of the vector of local norms, computed
  // the same way on every rank from the same gathered values (identical bits everywhere).
  const Tensor local = ops::l2_norm(grads);
  const Tensor all = Tensor::empty({world_size()}, DType::f32, comm().device());
  comm().all_gather(local.reshape({1}), all);
  return ops::l2_norm(all);
}

void ShardedGradSync::agree_on_overflow(const Tensor& found_inf) {
  comm().all_reduce(found_inf, ReduceOp::max);
}

void ShardedGradSync::check_optimizer(const optim::Optimizer& optimizer) const {
  const void* over = optimizer.sharded_over();
  STOKER_CHECK_HINT(
      over == static_cast<const GradSync*>(this),
      "build the optimizer as dist::ShardedOptimizer(sync, factory) over this ShardedGradSync",
      "the gradient synchronization \"", describe(),
      "\" averages only this rank's gradient slices, but the optimizer ", optimizer.describe(),
      over ? " is a ShardedOptimizer over another ShardedGradSync" : " updates whole parameters");
}

std::vector<std::pair<std::string, nn::Parameter*>> ShardedGradSync::shard_parameters() {
  if (shards_.empty()) {
    const int64_t r = rank();
    for (const Bucket& b : buckets()) {
      const int64_t n = b.info.shard_elements;
      auto p = std::make_unique<nn::Parameter>(b.values.slice(r * n, (r + 1) * n));
      p->set_grad_storage(b.grads.slice(r * n, (r + 1) * n));
      shards_.push_back(std::move(p));
    }
  }
  std::vector<std::pair<std::string, nn::Parameter*>> out;
  for (size_t i = 0; i < shards_.size(); ++i)
    out.emplace_back("zero1.bucket" + std::to_string(i), shards_[i].get());
  return out;
}

void ShardedGradSync::gather_parameters() {
  const int64_t r = rank();
  for (size_t i = 0; i < buckets().size(); ++i) {
    const Bucket& b = buckets()[i];
    const int64_t n = b.info.shard_elements;
    const CollectiveTag tag(comm(), "zero1 weights bucket", static_cast<int64_t>(i));
    comm().all_gather(b.values.slice(r * n, (r + 1) * n), b.values);
  }
  for (const auto& [name, p] : parameters()) p->value_changed();
}

void ShardedGradSync::reduce(const Bucket& b) {
  // Rank r receives the average of slice r only (in place, as NCCL allows).
  const int64_t n = b.info.shard_elements, r = rank();
  compression().encode(b.grads, b.wire);
  const Tensor wire_slice = b.wire.slice(r * n, (r + 1) * n);
  comm().reduce_scatter(b.wire, wire_slice, ReduceOp::avg);
  compression().decode(wire_slice, b.grads.slice(r * n, (r + 1) * n));
}

}  // namespace stoker::dist
