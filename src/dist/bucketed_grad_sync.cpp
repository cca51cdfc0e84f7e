#include "stoker/dist/grad_sync.h"

#include <fmt/format.h>
#include <algorithm>
#include <unordered_set>

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"
#include "stoker/ops/layout.h"

namespace stoker::dist {

BucketedGradSync::BucketedGradSync(const char* kind, Communicator& comm, nn::Module* model,
                                   std::vector<std::pair<std::string, nn::Parameter*>> params,
                                   GradSyncOptions options, BucketLayout layout)
    : kind_(kind), comm_(comm), options_(std::move(options)), model_(model) {
  build(std::move(params), layout);
}

BucketedGradSync::~BucketedGradSync() {
  if (self_) *self_ = nullptr;
}

void BucketedGradSync::build(std::vector<std::pair<std::string, nn::Parameter*>> params,
                             BucketLayout layout) {
  STOKER_CHECK(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0,
               "GradSyncOptions: bucket_bytes (", options_.bucket_bytes,
               ") and first_bucket_bytes (", options_.first_bucket_bytes, ") must be positive");
  STOKER_CHECK(options_.compression != nullptr,
               "GradSyncOptions::compression is null; use dist::compression::none() for f32 on "
               "the wire");
  device_ = comm_.device();
  std::unordered_set<nn::Parameter*> seen;
  for (const auto& [name, p] : params) {
    STOKER_CHECK(p != nullptr, kind_, ": parameter '", name, "' is null");
    STOKER_CHECK(seen.insert(p).second, kind_, ": parameter '", name,
                 "' is listed twice (shared parameters are not supported)");
    STOKER_CHECK(p->device() == device_, kind_, ": parameter '", name, "' is on ",
                 p->device().str(), " but the communicator (", comm_.describe(), ") works on ",
                 device_.str(), "; move the model before building the gradient sync");
    all_params_.push_back(p);
    if (p->requires_grad) slots_.push_back({name, p, -1, false});
  }
  STOKER_CHECK(!slots_.empty(), kind_, ": no parameter requires a gradient");

  // Backward order: backward produces the last layers' gradients first.
  std::reverse(slots_.begin(), slots_.end());
  std::vector<BucketPlanEntry> entries;
  for (const Slot& s : slots_) entries.push_back({s.name, s.param->shape()});
  const std::vector<BucketInfo> plan =
      plan_buckets(entries, {.bucket_bytes = options_.bucket_bytes,
                             .first_bucket_bytes = options_.first_bucket_bytes,
                             .bucket_multiple = layout.bucket_multiple});

  // The buffers, and every gradient re-pointed into its bucket (keeping what it held); with
  // values_in_buckets the values too.
  int slot = 0;
  for (const BucketInfo& info : plan) {
    Bucket& b = buckets_.emplace_back();
    Progress& pr = progress_.emplace_back();
    b.info = info;
    b.grads = Tensor::zeros({info.elements}, DType::f32, device_);
    if (layout.values_in_buckets) b.values = Tensor::zeros({info.elements}, DType::f32, device_);
    b.wire = options_.compression->make_wire(b.grads);
    if (device_.is_cuda()) {
      pr.ready = core::Event::create(device_);
      pr.done = core::Event::create(device_);
    }
    for (size_t i = 0; i < info.parameters.size(); ++i, ++slot) {
      Slot& s = slots_[static_cast<size_t>(slot)];
      s.bucket = static_cast<int>(buckets_.size()) - 1;
      pr.slots.push_back(slot);
      nn::Parameter* p = s.param;
      const int64_t offset = info.offsets[i];
      const Tensor view = b.grads.slice(offset, offset + p->numel()).reshape(p->shape());
      ops::copy(view, p->grad());
      p->set_grad_storage(view);
      if (layout.values_in_buckets)
        p->set_value_storage(b.values.slice(offset, offset + p->numel()).reshape(p->shape()));
    }
    pr.pending = static_cast<int>(pr.slots.size());
  }

  self_ = std::make_shared<BucketedGradSync*>(this);
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    slots_[static_cast<size_t>(i)].param->add_grad_ready_hook([self = self_, i](nn::Parameter&) {
      if (*self) (*self)->on_ready(i);
    });
  }
  if (options_.broadcast_parameters) broadcast_from(0);
}

const BucketInfo& BucketedGradSync::bucket(int i) const {
  STOKER_CHECK(i >= 0 && i < num_buckets(), kind_, "::bucket(", i, "): there are ", num_buckets(),
               " buckets");
  return buckets_[static_cast<size_t>(i)].info;
}

std::string BucketedGradSync::describe_buckets(const std::string& collective) const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) bytes += b.info.bytes;
  return fmt::format("{} of {} bucket{} ({}), {} on the wire", collective, num_buckets(),
                     num_buckets() == 1 ? "" : "s", core::format_bytes(static_cast<size_t>(bytes)),
                     dtype_name(compression().wire_dtype()));
}

void BucketedGradSync::broadcast_parameters(int root) { broadcast_from(root); }

void BucketedGradSync::broadcast_from(int root) {
  for (nn::Parameter* p : all_params_) {
    comm_.broadcast(p->value(), root);
    p->value_changed();
  }
  if (model_) {
    model_->visit_buffers("", [&](const std::string&, Tensor& t) { comm_.broadcast(t, root); });
  }
}

void BucketedGradSync::on_ready(int slot) {
  if (!sync()) return;  // accumulation micro-step: the gradient stays local
  Slot& s = slots_[static_cast<size_t>(slot)];
  STOKER_CHECK(!s.ready, kind_, ": the gradient of '", s.name,
               "' became ready twice in one synchronized backward: either the parameter is used "
               "by two modules (shared parameters are not supported) or finish() was not called "
               "after the previous backward");
  s.ready = true;
  if (--progress_[static_cast<size_t>(s.bucket)].pending == 0) launch_in_order();
}

void BucketedGradSync::launch_in_order() {
  while (next_bucket_ < num_buckets() &&
         progress_[static_cast<size_t>(next_bucket_)].pending == 0) {
    launch(next_bucket_++);
  }
}

void BucketedGradSync::launch(int index) {
  if (order_stale_) {
    launch_order_.clear();
    order_stale_ = false;
  }
  const Bucket& b = buckets_[static_cast<size_t>(index)];
  Progress& pr = progress_[static_cast<size_t>(index)];
  // A gradient zeroed lazily and not written since (an unused parameter) becomes real zeros
  // before the buffer is sent; for the others this is a no-op.
  for (int i : pr.slots) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    STOKER_CHECK(s.param->grad().same_storage(b.grads), kind_, ": the gradient of '", s.name,
                 "' no longer lives in its bucket (the parameter was moved with to(), or its "
                 "gradient re-pointed, after the gradient sync was built); build the sync last");
    STOKER_CHECK(!b.values.defined() || s.param->value().same_storage(b.values), kind_,
                 ": the value of '", s.name,
                 "' no longer lives in its bucket (the parameter was moved with to(), or its value "
                 "re-pointed, after the gradient sync was built); build the sync last");
  }
  const bool gpu = device_.is_cuda();
  const core::Stream comm_stream = gpu ? core::comm_stream(device_) : core::Stream();
  if (gpu) {
    pr.ready.record(core::current_stream(device_));  // the gradients are written up to here
    pr.ready.block(comm_stream);
  }
  {
    core::StreamGuard on_comm(comm_stream);
    const CollectiveTag tag(comm_, "grad_sync bucket", index);  // in the flight recorder
    // The op timing's events bracket the reduction on the comm stream (core/op_listener.h).
    const core::OpScope timed(core::kGradSyncBucketOp, device_,
                              {0, static_cast<double>(b.grads.nbytes()), b.grads.dtype()});
    reduce(b);
    if (gpu) pr.done.record(comm_stream);
  }
  launch_order_.push_back(index);
  if (on_bucket_launch_) on_bucket_launch_(index);
}

void BucketedGradSync::finish_step() {
  struct ResetOnExit {
    BucketedGradSync* s;
    ~ResetOnExit() { s->reset_step(); }
  } reset{this};
  if (sync() && !options_.allow_unused_parameters) {
    std::vector<std::string> missing;
    for (const Slot& s : slots_)
      if (!s.ready) missing.push_back(s.name);
    if (!missing.empty()) {
      std::string names;
      for (size_t i = 0; i < missing.size() && i < 10; ++i) names += (i ? ", " : "") + missing[i];
      if (missing.size() > 10) names += fmt::format(" and {} more", missing.size() - 10);
      STOKER_CHECK_HINT(
          false,
          "set requires_grad = false on parameters that are not trained (before building the "
          "gradient sync), or GradSyncOptions::allow_unused_parameters = true if they are unused "
          "only in some steps",
          kind_, ": ", missing.size(), " of ", slots_.size(),
          " parameters that require a gradient did not receive one in this backward: ", names);
    }
  }
  // Remaining buckets (unused parameters, or a step whose last backward ran without sync).
  while (next_bucket_ < num_buckets()) launch(next_bucket_++);
  if (device_.is_cuda()) {
    const core::Stream current = core::current_stream(device_);
    for (const Progress& pr : progress_) pr.done.block(current);
  }
  ++steps_;
}

std::vector<std::pair<std::string, nn::Parameter*>> BucketedGradSync::parameters() const {
  std::vector<std::pair<std::string, nn::Parameter*>> out;
  for (auto it = slots_.rbegin(); it != slots_.rend(); ++it) out.emplace_back(it->name, it->param);
  return out;
}

void BucketedGradSync::reset_step() {
  for (Slot& s : slots_) s.ready = false;
  for (Progress& pr : progress_) pr.pending = static_cast<int>(pr.slots.size());
  next_bucket_ = 0;
  order_stale_ = true;
}

}  // namespace stoker::dist
