#include "stoker/optim/offloaded_optimizer.h"

#include <oneapi/tbb/task_arena.h>

#include <chrono>
#include <map>
#include <set>

#include "core/tensor_copy.h"
#include "stoker/core/error.h"

namespace stoker::optim {

struct OffloadedOptimizer::Arena {
  explicit Arena(int threads) : arena(threads) {}
  tbb::task_arena arena;
};

OffloadedOptimizer::~OffloadedOptimizer() {
  // The step's copies do not hold the pinned buffers (copy_bytes_unowned): let them finish
  // before the buffers go back to the pool. Downloads: the host waited for them, unless a step
  // threw midway.
  if (!device_.empty() && device_[0]->device().is_cuda()) {
    try {
      for (Group& g : groups_) g.downloaded.synchronize();
      upload_stream_.synchronize();
    } catch (...) {  // a destructor must not throw; a failed device is reported elsewhere
    }
  }
}

OffloadedOptimizer::OffloadedOptimizer(NamedParameters params, const Factory& make,
                                       OffloadOptions options)
    : Optimizer(std::move(params)), options_(options) {
  STOKER_CHECK(make != nullptr, "OffloadedOptimizer: no factory for the inner optimizer");
  STOKER_CHECK(options_.group_bytes > 0, "OffloadedOptimizer: OffloadOptions::group_bytes ",
               options_.group_bytes, " must be > 0 (32 MiB is a good default)");
  STOKER_CHECK(options_.threads >= 0, "OffloadedOptimizer: OffloadOptions::threads ",
               options_.threads, " must be >= 0 (0: every core)");
  if (options_.threads > 0) arena_ = std::make_unique<Arena>(options_.threads);
  const Device dev = params_[0].second->device();
  const bool cuda = dev.is_cuda();
  NamedParameters group_params;
  int64_t group_bytes = 0;
  std::vector<NamedParameters> grouped;
  std::vector<std::vector<size_t>> members;
  for (const auto& [name, p] : params_) {
    if (!p->requires_grad) continue;
    STOKER_CHECK(p->value().dtype() == DType::f32, "OffloadedOptimizer: parameter '", name, "' is ",
                 p->value().str(), "; master values must be f32");
    // The shadow: pinned f32 value (a copy of the device value) and pinned f32 gradient.
    const Tensor value = Tensor::empty_pinned(p->shape(), DType::f32);
    core::detail::copy_bytes(value, p->value());
    auto shadow = std::make_unique<nn::Parameter>(value);
    shadow->set_grad_storage(Tensor::empty_pinned(p->shape(), DType::f32));
    const int64_t bytes = static_cast<int64_t>(p->value().nbytes());
    if (!group_params.empty() && group_bytes + bytes > options_.group_bytes) {
      grouped.push_back(std::move(group_params));
      group_params.clear();
      group_bytes = 0;
    }
    if (group_params.empty()) members.emplace_back();
    group_params.emplace_back(name, shadow.get());
    members.back().push_back(device_.size());
    group_bytes += bytes;
    device_.push_back(p);
    shadows_.push_back(std::move(shadow));
  }
  STOKER_CHECK(!device_.empty(), "OffloadedOptimizer: no parameter requires a gradient");
  if (!group_params.empty()) grouped.push_back(std::move(group_params));
  // The initial values must be on the host before an inner optimizer or a step reads them.
  if (cuda) core::current_stream(dev).synchronize();

  for (size_t g = 0; g < grouped.size(); ++g) {
    Group group;
    group.members = std::move(members[g]);
    group.inner = make(std::move(grouped[g]));
    STOKER_CHECK(group.inner != nullptr, "OffloadedOptimizer: the factory returned no optimizer");
    STOKER_CHECK(group.inner->parameters().size() == group.members.size(),
                 "OffloadedOptimizer: the factory's optimizer ", group.inner->describe(),
                 " must take exactly the parameters it is given");
    if (cuda) group.downloaded = core::Event::create(dev);
    groups_.push_back(std::move(group));
  }
  set_state_format(groups_[0].inner->state_format());
  lr_ = groups_[0].inner->lr();

  // State that is not per parameter appears in every inner under the same name.
  std::map<std::string, Tensor> first;
  for (auto& [name, t] : groups_[0].inner->state()) first.emplace(name, t);
  for (size_t g = 1; g < groups_.size(); ++g)
    for (auto& [name, t] : groups_[g].inner->state()) {
      const auto it = first.find(name);
      if (it != first.end()) shared_state_.emplace_back(t, it->second);
    }

  if (cuda) {
    host_found_inf_ = Tensor::empty_pinned({}, DType::f32);
    ready_ = core::Event::create(dev);
    uploaded_ = core::Event::create(dev);
    upload_stream_ = core::Stream::create(dev);
  }
}

std::string OffloadedOptimizer::describe() const {
  return core::detail::str(
      "Offloaded(", groups_[0].inner->describe(), ", state and update on the CPU, ", groups_.size(),
      groups_.size() == 1 ? " group" : " groups",
      " of <= ", core::format_bytes(static_cast<size_t>(options_.group_bytes)), ")");
}

std::vector<std::pair<std::string, Tensor>> OffloadedOptimizer::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<std::string> seen;
  for (Group& g : groups_)
    for (auto& [name, t] : g.inner->state())
      if (seen.insert(name).second) out.emplace_back(name, t);
  return out;
}

void OffloadedOptimizer::load_checkpoint_state(const TensorLoader& load) {
  for (Group& g : groups_) g.inner->load_checkpoint_state(load);
  // A resume loads the weights too (the Trainer: before the optimizer state).
  reload_values();
}

void OffloadedOptimizer::reload_values() {
  for (size_t i = 0; i < device_.size(); ++i)
    core::detail::copy_bytes(shadows_[i]->value(), device_[i]->value());
  const Device dev = device_[0]->device();
  if (dev.is_cuda()) core::current_stream(dev).synchronize();
}

size_t OffloadedOptimizer::host_bytes() {
  size_t bytes = state_bytes();
  for (const auto& s : shadows_) bytes += 2 * s->value().nbytes();
  return bytes;
}

void OffloadedOptimizer::sync_shared_state() {
  for (auto& [mine, canonical] : shared_state_) core::detail::copy_bytes(mine, canonical);
}

void OffloadedOptimizer::update() {
  const Device dev = device_[0]->device();
  const bool cuda = dev.is_cuda();
  std::vector<Tensor> grads;
  grads.reserve(device_.size());
  for (nn::Parameter* p : device_) grads.push_back(p->grad());  // before the event: may memset
  sync_shared_state();

  Tensor flag = found_inf_;
  core::Stream copy;
  if (cuda) {
    // Downloads: after everything queued so far on the current stream (backward, unscale,
    // clipping), on the copy stream, group by group.
    const core::Stream current = core::current_stream(dev);
    copy = core::copy_stream(dev);
    ready_.record(current);
    ready_.block(copy);
    // Uploads run on their own stream, so they overlap the downloads still in flight (separate
    // copy engines). They too wait for the work before the step (the backward reads the values
    // they overwrite); host waits on the downloads imply that already, the event makes it plain.
    ready_.block(upload_stream_);
    core::StreamGuard on_copy(copy);
    if (found_inf_.defined()) {
      core::detail::copy_bytes_unowned(host_found_inf_, found_inf_);
      flag = host_found_inf_;
    }
    for (Group& g : groups_) {
      // Unowned: the shadows live as long as this, and the destructor waits for the copies.
      for (size_t i : g.members) core::detail::copy_bytes_unowned(shadows_[i]->grad(), grads[i]);
      g.downloaded.record(copy);
    }
  } else {
    for (size_t i = 0; i < device_.size(); ++i)
      core::detail::copy_bytes(shadows_[i]->grad(), grads[i]);
  }

  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  timing_ = {};
  bool skipped = false;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    const auto t0 = Clock::now();
    if (cuda) g.downloaded.synchronize();
    const auto t1 = Clock::now();
    timing_.download_wait_ms += ms(t0, t1);
    if (gi == 0) skipped = flag.defined() && *flag.data<float>() != 0.0f;
    g.inner->set_lr(lr_);
    g.inner->set_found_inf(flag);
    g.inner->set_steps(steps_);
    // The shadows have no compute copies: nothing refreshed by the inner step.
    if (arena_)
      arena_->arena.execute([&] { g.inner->step(); });
    else
      g.inner->step();
    timing_.update_ms += ms(t1, Clock::now());
    if (skipped) continue;  // values unchanged: nothing to upload
    if (cuda) {
      core::StreamGuard on_upload(upload_stream_);
      for (size_t i : g.members)
        core::detail::copy_bytes_unowned(device_[i]->value(), shadows_[i]->value());
    } else {
      for (size_t i : g.members)
        core::detail::copy_bytes(device_[i]->value(), shadows_[i]->value());
    }
  }
  if (cuda) {
    uploaded_.record(upload_stream_);
    uploaded_.block(core::current_stream(dev));
  }
  ++steps_;
}

}  // namespace stoker::optim
