#include "stoker/dist/grad_reducer.h"

#include <algorithm>
#include <unordered_set>

#include "stoker/core/error.h"
#include "stoker/ops/copy.h"
#include "stoker/ops/reduce.h"

namespace stoker::dist {

namespace {
// Each gradient view starts on a 64-byte boundary of its bucket (vectorized kernels, cuBLASLt);
// the padding stays zero and is averaged along.
constexpr int64_t kAlignElements = 16;

int64_t align_up(int64_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }
}  // namespace

const char* compression_name(GradCompression c) {
  switch (c) {
    case GradCompression::none:
      return "none";
    case GradCompression::bf16:
      return "bf16";
    case GradCompression::fp16:
      return "fp16";
  }
  return "?";
}

GradReducer::GradReducer(Communicator& comm, nn::Module& model, GradReducerOptions options)
    : comm_(comm), options_(std::move(options)), model_(&model) {
  build(model.named_parameters());
}

GradReducer::GradReducer(Communicator& comm,
                         std::vector<std::pair<std::string, nn::Parameter*>> params,
                         GradReducerOptions options)
    : comm_(comm), options_(std::move(options)) {
  build(std::move(params));
}

GradReducer::~GradReducer() {
  if (self_) *self_ = nullptr;
}

void GradReducer::build(std::vector<std::pair<std::string, nn::Parameter*>> params) {
  STOKER_CHECK(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0,
               "GradReducerOptions: bucket_bytes (", options_.bucket_bytes,
               ") and first_bucket_bytes (", options_.first_bucket_bytes, ") must be positive");
  device_ = comm_.device();
  std::unordered_set<nn::Parameter*> seen;
  for (const auto& [name, p] : params) {
    STOKER_CHECK(p != nullptr, "GradReducer: parameter '", name, "' is null");
    STOKER_CHECK(seen.insert(p).second, "GradReducer: parameter '", name,
                 "' is listed twice (shared parameters are not supported)");
    STOKER_CHECK(p->device() == device_, "GradReducer: parameter '", name, "' is on ",
                 p->device().str(), " but the communicator (", comm_.describe(), ") works on ",
                 device_.str(), "; move the model before building the reducer");
    all_params_.push_back(p);
    if (p->requires_grad) slots_.push_back({name, p, -1, false});
  }
  STOKER_CHECK(!slots_.empty(), "GradReducer: no parameter requires a gradient");

  // Reverse registration order: backward produces the last layers' gradients first.
  std::reverse(slots_.begin(), slots_.end());
  int64_t cap = options_.first_bucket_bytes;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    if (buckets_.empty() || buckets_.back().info.bytes >= cap) {
      if (!buckets_.empty()) cap = options_.bucket_bytes;
      buckets_.emplace_back();
    }
    Bucket& b = buckets_.back();
    Slot& s = slots_[static_cast<size_t>(i)];
    s.bucket = static_cast<int>(buckets_.size()) - 1;
    b.slots.push_back(i);
    b.info.parameters.push_back(s.name);
    b.info.elements += align_up(s.param->numel());
    b.info.bytes = b.info.elements * static_cast<int64_t>(sizeof(float));
  }

  // ZeRO-1: every rank's slice of a bucket has the same length and starts 64-byte aligned.
  const bool shard = options_.shard_optimizer_state;
  const int64_t world = comm_.world_size();
  if (shard) {
    for (Bucket& b : buckets_) {
      const int64_t unit = world * kAlignElements;
      b.info.elements = (b.info.elements + unit - 1) / unit * unit;
      b.info.bytes = b.info.elements * static_cast<int64_t>(sizeof(float));
      b.info.shard_elements = b.info.elements / world;
    }
  }

  // The buffers, and every gradient re-pointed into its bucket (keeping what it held); under
  // ZeRO-1 the values too.
  for (Bucket& b : buckets_) {
    b.buffer = Tensor::zeros({b.info.elements}, DType::f32, device_);
    if (shard) b.values = Tensor::zeros({b.info.elements}, DType::f32, device_);
    if (options_.compression != GradCompression::none) {
      b.wire = Tensor::empty(
          {b.info.elements},
          options_.compression == GradCompression::bf16 ? DType::bf16 : DType::f16, device_);
    }
    if (device_.is_cuda()) {
      b.ready = core::Event::create(device_);
      b.done = core::Event::create(device_);
    }
    int64_t offset = 0;
    for (int i : b.slots) {
      nn::Parameter* p = slots_[static_cast<size_t>(i)].param;
      const Tensor view = b.buffer.slice(offset, offset + p->numel()).reshape(p->shape());
      ops::copy(view, p->grad());
      p->set_grad_storage(view);
      if (shard)
        p->set_value_storage(b.values.slice(offset, offset + p->numel()).reshape(p->shape()));
      b.info.offsets.push_back(offset);
      b.info.shapes.push_back(p->shape());
      offset += align_up(p->numel());
    }
    b.pending = static_cast<int>(b.slots.size());
  }

  self_ = std::make_shared<GradReducer*>(this);
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    slots_[static_cast<size_t>(i)].param->add_grad_ready_hook([self = self_, i](nn::Parameter&) {
      if (*self) (*self)->on_ready(i);
    });
  }
  if (options_.broadcast_parameters) broadcast_parameters(0);
}

const BucketInfo& GradReducer::bucket(int i) const {
  STOKER_CHECK(i >= 0 && i < num_buckets(), "GradReducer::bucket(", i, "): there are ",
               num_buckets(), " buckets");
  return buckets_[static_cast<size_t>(i)].info;
}

void GradReducer::broadcast_parameters(int root) {
  for (nn::Parameter* p : all_params_) {
    comm_.broadcast(p->value(), root);
    p->value_changed();
  }
  if (model_) {
    model_->visit_buffers("", [&](const std::string&, Tensor& t) { comm_.broadcast(t, root); });
  }
}

void GradReducer::on_ready(int slot) {
  if (!sync_) return;  // accumulation micro-step: the gradient stays local
  Slot& s = slots_[static_cast<size_t>(slot)];
  STOKER_CHECK(!s.ready, "GradReducer: the gradient of '", s.name,
               "' became ready twice in one synchronized backward: either the parameter is used "
               "by two modules (shared parameters are not supported) or finish() was not called "
               "after the previous backward");
  s.ready = true;
  if (--buckets_[static_cast<size_t>(s.bucket)].pending == 0) launch_in_order();
}

void GradReducer::launch_in_order() {
  while (next_bucket_ < num_buckets() && buckets_[static_cast<size_t>(next_bucket_)].pending == 0) {
    launch(next_bucket_++);
  }
}

void GradReducer::launch(int index) {
  if (order_stale_) {
    launch_order_.clear();
    order_stale_ = false;
  }
  Bucket& b = buckets_[static_cast<size_t>(index)];
  // A gradient zeroed lazily and not written since (an unused parameter) becomes real zeros
  // before the buffer is sent; for the others this is a no-op.
  for (int i : b.slots) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    STOKER_CHECK(s.param->grad().same_storage(b.buffer), "GradReducer: the gradient of '", s.name,
                 "' no longer lives in its bucket (the parameter was moved with to(), or its "
                 "gradient re-pointed, after the reducer was built); build the reducer last");
    STOKER_CHECK(!options_.shard_optimizer_state || s.param->value().same_storage(b.values),
                 "GradReducer (ZeRO-1): the value of '", s.name,
                 "' no longer lives in its bucket (the parameter was moved with to(), or its value "
                 "re-pointed, after the reducer was built); build the reducer last");
  }
  const bool gpu = device_.is_cuda();
  const core::Stream comm_stream = gpu ? core::comm_stream(device_) : core::Stream();
  if (gpu) {
    b.ready.record(core::current_stream(device_));  // the gradients are written up to here
    b.ready.block(comm_stream);
  }
  {
    core::StreamGuard on_comm(comm_stream);
    if (options_.shard_optimizer_state) {
      // ZeRO-1: rank r receives the average of slice r only (in place, as NCCL allows).
      const int64_t n = b.info.shard_elements, r = comm_.rank();
      if (b.wire.defined()) {
        ops::cast(b.wire, b.buffer);
        const Tensor wire_shard = b.wire.slice(r * n, (r + 1) * n);
        comm_.reduce_scatter(b.wire, wire_shard, ReduceOp::avg);
        ops::cast(b.buffer.slice(r * n, (r + 1) * n), wire_shard);
      } else {
        comm_.reduce_scatter(b.buffer, b.buffer.slice(r * n, (r + 1) * n), ReduceOp::avg);
      }
    } else if (b.wire.defined()) {
      ops::cast(b.wire, b.buffer);
      comm_.all_reduce(b.wire, ReduceOp::avg);
      ops::cast(b.buffer, b.wire);
    } else {
      comm_.all_reduce(b.buffer, ReduceOp::avg);
    }
    if (gpu) b.done.record(comm_stream);
  }
  launch_order_.push_back(index);
  if (options_.on_bucket_launch) options_.on_bucket_launch(index);
}

void GradReducer::finish() {
  struct ResetOnExit {
    GradReducer* r;
    ~ResetOnExit() { r->reset_step(); }
  } reset{this};
  if (sync_ && !options_.allow_unused_parameters) {
    std::vector<std::string> missing;
    for (const Slot& s : slots_)
      if (!s.ready) missing.push_back(s.name);
    if (!missing.empty()) {
      std::string names;
      for (size_t i = 0; i < missing.size() && i < 10; ++i) names += (i ? ", " : "") + missing[i];
      if (missing.size() > 10) names += core::detail::str(" and ", missing.size() - 10, " more");
      STOKER_CHECK_HINT(
          false,
          "set requires_grad = false on parameters that are not trained (before building the "
          "reducer), or GradReducerOptions::allow_unused_parameters = true if they are unused "
          "only in some steps",
          "GradReducer: ", missing.size(), " of ", slots_.size(),
          " parameters that require a gradient did not receive one in this backward: ", names);
    }
  }
  // Remaining buckets (unused parameters, or a step whose last backward ran without sync).
  while (next_bucket_ < num_buckets()) launch(next_bucket_++);
  if (device_.is_cuda()) {
    const core::Stream current = core::current_stream(device_);
    for (const Bucket& b : buckets_) b.done.block(current);
  }
  ++steps_;
}

std::vector<std::pair<std::string, nn::Parameter*>> GradReducer::parameters() const {
  std::vector<std::pair<std::string, nn::Parameter*>> out;
  for (auto it = slots_.rbegin(); it != slots_.rend(); ++it) out.emplace_back(it->name, it->param);
  return out;
}

namespace {
void check_sharded(bool sharded, const char* what) {
  STOKER_CHECK_HINT(sharded, "set GradReducerOptions::shard_optimizer_state = true",
                    "GradReducer::", what, " is for ZeRO-1, but this reducer does not shard");
}
}  // namespace

std::vector<std::pair<std::string, nn::Parameter*>> GradReducer::shard_parameters() {
  check_sharded(options_.shard_optimizer_state, "shard_parameters()");
  if (shards_.empty()) {
    const int64_t r = comm_.rank();
    for (const Bucket& b : buckets_) {
      const int64_t n = b.info.shard_elements;
      auto p = std::make_unique<nn::Parameter>(b.values.slice(r * n, (r + 1) * n));
      p->set_grad_storage(b.buffer.slice(r * n, (r + 1) * n));
      shards_.push_back(std::move(p));
    }
  }
  std::vector<std::pair<std::string, nn::Parameter*>> out;
  for (size_t i = 0; i < shards_.size(); ++i)
    out.emplace_back("zero1.bucket" + std::to_string(i), shards_[i].get());
  return out;
}

std::vector<Tensor> GradReducer::shard_gradients() const {
  check_sharded(options_.shard_optimizer_state, "shard_gradients()");
  std::vector<Tensor> out;
  const int64_t r = comm_.rank();
  for (const Bucket& b : buckets_) {
    const int64_t n = b.info.shard_elements;
    out.push_back(b.buffer.slice(r * n, (r + 1) * n));
  }
  return out;
}

Tensor GradReducer::global_grad_norm(std::span<const Tensor> shard_grads) {
  // sqrt(sum over ranks of local_norm^2): the l2 norm of the vector of local norms, computed
  // the same way on every rank from the same gathered values (identical bits everywhere).
  const Tensor local = ops::l2_norm(shard_grads);
  const Tensor all = Tensor::empty({comm_.world_size()}, DType::f32, device_);
  comm_.all_gather(local.reshape({1}), all);
  return ops::l2_norm(all);
}

void GradReducer::gather_parameters() {
  check_sharded(options_.shard_optimizer_state, "gather_parameters()");
  const int64_t r = comm_.rank();
  for (const Bucket& b : buckets_) {
    const int64_t n = b.info.shard_elements;
    comm_.all_gather(b.values.slice(r * n, (r + 1) * n), b.values);
  }
  for (const Slot& s : slots_) s.param->value_changed();
}

void GradReducer::reset_step() {
  for (Slot& s : slots_) s.ready = false;
  for (Bucket& b : buckets_) b.pending = static_cast<int>(b.slots.size());
  next_bucket_ = 0;
  sync_ = true;
  order_stale_ = true;
}

}  // namespace stoker::dist
