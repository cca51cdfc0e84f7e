#include "stoker/optim/offloaded_optimizer.h"

#include <oneapi/tbb/task_arena.h>

#include <fmt/format.h>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/tensor_copy.h"
#include "stoker/core/error.h"

namespace stoker::optim {

struct OffloadedOptimizer::Arena {
  explicit Arena(int threads) : arena(threads) {}
  tbb::task_arena arena;
};

// Delayed mode: one persistent worker thread (not one per step) and the hand-off of one update
// at a time. `busy` is true from submit() until the job has returned; everything the job
// writes (skipped, timing, error, the shadows and inner states) is read by the owner only after
// wait(), under the mutex.
struct OffloadedOptimizer::Background {
  std::mutex mutex;
  std::condition_variable cv;
  std::function<void()> job;
  bool busy = false, stop = false;
  bool pending = false;  // handed over and neither applied nor dropped yet (owner's flag)
  int64_t step = 0;      // 1-based number of the pending update, for error messages
  bool skipped = false;  // found_inf was set: nothing to apply
  std::exception_ptr error;
  StepTiming timing;
  std::thread thread;

  Background() : thread([this] { run(); }) {}
  ~Background() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void submit(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      job = std::move(f);
      busy = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return !busy; });
  }
  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stop || busy; });
      if (busy) {
        std::function<void()> f = std::move(job);
        lock.unlock();
        // Kept, never thrown here: the owner rethrows it from its next step() or flush().
        std::exception_ptr e;
        try {
          f();
        } catch (...) {
          e = std::current_exception();
        }
        lock.lock();
        error = e;
        busy = false;
        cv.notify_all();
      } else if (stop) {
        return;
      }
    }
  }
};

OffloadedOptimizer::~OffloadedOptimizer() {
  // A pending delayed update is waited for (its copies and CPU work use the buffers freed
  // below), not applied; the worker thread ends.
  if (background_) {
    background_->wait();
    background_.reset();
  }
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
  if (options_.delayed_update) {
    if (cuda) {
      // One flat buffer: gradients of step t go down from it, values of update t come back
      // into it (each group into the part it was downloaded from).
      int64_t total = 0;
      for (const nn::Parameter* p : device_) total += p->value().numel();
      const Tensor flat = Tensor::empty({total}, DType::f32, dev);
      int64_t offset = 0;
      for (const nn::Parameter* p : device_) {
        const int64_t n = p->value().numel();
        staging_.push_back(flat.slice(offset, offset + n).reshape(p->shape()));
        offset += n;
      }
      staged_found_inf_ = Tensor::empty({}, DType::f32, dev);
    } else {
      host_found_inf_ = Tensor::empty({}, DType::f32);  // found_inf's value at step time
    }
    background_ = std::make_unique<Background>();
  }
}

std::string OffloadedOptimizer::describe() const {
  return fmt::format("Offloaded({}, state and update on the CPU, {}{} of <= {}{})",
                     groups_[0].inner->describe(), groups_.size(),
                     groups_.size() == 1 ? " group" : " groups",
                     core::format_bytes(static_cast<size_t>(options_.group_bytes)),
                     options_.delayed_update ? ", delayed update: weights one step stale" : "");
}

std::vector<std::pair<std::string, Tensor>> OffloadedOptimizer::state() {
  flush();  // the state and the weights of the same step, and nothing writing them
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<std::string> seen;
  for (Group& g : groups_)
    for (auto& [name, t] : g.inner->state())
      if (seen.insert(name).second) out.emplace_back(name, t);
  return out;
}

void OffloadedOptimizer::load_checkpoint_state(const TensorLoader& load) {
  // Not flush(): the weights were loaded already (the Trainer loads them first); a pending
  // update must not overwrite them. It is waited for and dropped.
  finish_pending(/*apply=*/false);
  for (Group& g : groups_) g.inner->load_checkpoint_state(load);
  // A resume loads the weights too (the Trainer: before the optimizer state).
  reload_values();
}

void OffloadedOptimizer::reload_values() {
  finish_pending(/*apply=*/false);  // the values written outside win over a pending update
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

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

bool OffloadedOptimizer::update_groups(const Tensor& flag, float lr, int64_t steps,
                                       const std::vector<Tensor>& upload_to, StepTiming& timing) {
  const bool cuda = device_[0]->device().is_cuda();
  bool skipped = false;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    const auto t0 = Clock::now();
    if (cuda) g.downloaded.synchronize();
    const auto t1 = Clock::now();
    timing.download_wait_ms += ms_between(t0, t1);
    if (gi == 0) skipped = flag.defined() && *flag.data<float>() != 0.0f;
    g.inner->set_lr(lr);
    g.inner->set_found_inf(flag);
    g.inner->set_steps(steps);
    // The shadows have no compute copies: nothing refreshed by the inner step.
    if (arena_)
      arena_->arena.execute([&] { g.inner->step(); });
    else
      g.inner->step();
    timing.update_ms += ms_between(t1, Clock::now());
    if (skipped || upload_to.empty()) continue;  // values unchanged: nothing to upload
    if (cuda) {
      core::StreamGuard on_upload(upload_stream_);
      for (size_t i : g.members)
        core::detail::copy_bytes_unowned(upload_to[i], shadows_[i]->value());
    } else {
      for (size_t i : g.members) core::detail::copy_bytes(upload_to[i], shadows_[i]->value());
    }
  }
  return skipped;
}

void OffloadedOptimizer::flush() {
  if (!finish_pending(/*apply=*/true)) return;
  nn::refresh_compute_copies(device_);  // as Optimizer::step() does after an update
}

bool OffloadedOptimizer::finish_pending(bool apply) {
  if (!background_) return false;
  Background& bg = *background_;
  // Reached from the worker itself (an out-of-memory hook inside the CPU update asking for a
  // memory report): waiting would wait for itself.
  if (std::this_thread::get_id() == bg.thread.get_id()) return false;
  bg.wait();
  if (!bg.pending) return false;
  bg.pending = false;
  const bool cuda = device_[0]->device().is_cuda();
  if (bg.error) {
    const std::exception_ptr e = bg.error;
    bg.error = nullptr;
    // The failed update may have left copies in flight that read or write the staging buffer
    // the next step fills: let them end first.
    if (cuda) {
      try {
        for (Group& g : groups_) g.downloaded.synchronize();
        upload_stream_.synchronize();
      } catch (...) {  // the device failed: the error below says what the update hit first
      }
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      STOKER_THROW("OffloadedOptimizer: the offloaded (delayed, background) update of step ",
                   bg.step, " failed: ", x.what(),
                   ". That update is lost and the optimizer state may be partly updated: "
                   "resume from a checkpoint");
    } catch (...) {
    }
    STOKER_THROW("OffloadedOptimizer: the offloaded (delayed, background) update of step ", bg.step,
                 " failed with an unknown exception; resume from a checkpoint");
  }
  const double waited = timing_.background_wait_ms;
  timing_ = bg.timing;
  timing_.background_wait_ms = waited;
  if (bg.skipped) return false;  // nothing uploaded (the worker waited for every download)
  if (cuda) {
    // Stream order: the current stream waits for the last upload (also when the update is
    // dropped: the next step's staging copy overwrites the buffer the uploads write), then
    // copies each group's updated values from the staging buffer into the parameters.
    const core::Stream current = core::current_stream(device_[0]->device());
    uploaded_.block(current);
    if (!apply) return false;
    for (size_t i = 0; i < device_.size(); ++i)
      core::detail::copy_bytes_unowned(device_[i]->value(), staging_[i]);
  } else {
    if (!apply) return false;
    for (size_t i = 0; i < device_.size(); ++i)
      core::detail::copy_bytes(device_[i]->value(), shadows_[i]->value());
  }
  return true;
}

Tensor OffloadedOptimizer::download_gradients(const std::vector<Tensor>& from,
                                              const Tensor& found_inf) {
  const Device dev = device_[0]->device();
  if (!dev.is_cuda()) {
    for (size_t i = 0; i < device_.size(); ++i)
      core::detail::copy_bytes(shadows_[i]->grad(), from[i]);
    if (!found_inf.defined() || !host_found_inf_.defined()) return found_inf;
    core::detail::copy_bytes(host_found_inf_, found_inf);  // delayed: its value at step time
    return host_found_inf_;
  }
  // After everything queued so far on the current stream (backward, unscale, clipping, the
  // delayed mode's staging copies). Uploads run on their own stream, so they overlap the
  // downloads still in flight (separate copy engines); they too wait for that work (the
  // backward reads the values they overwrite) — host waits on the downloads imply it already,
  // the event makes it plain.
  const core::Stream copy = core::copy_stream(dev);
  ready_.record(core::current_stream(dev));
  ready_.block(copy);
  ready_.block(upload_stream_);
  core::StreamGuard on_copy(copy);
  Tensor flag;
  if (found_inf.defined()) {
    core::detail::copy_bytes_unowned(host_found_inf_, found_inf);
    flag = host_found_inf_;
  }
  for (Group& g : groups_) {
    // Unowned: the shadows live as long as this, and the destructor waits for the copies.
    for (size_t i : g.members) core::detail::copy_bytes_unowned(shadows_[i]->grad(), from[i]);
    g.downloaded.record(copy);
  }
  return flag;
}

void OffloadedOptimizer::update_delayed() {
  const Device dev = device_[0]->device();
  const bool cuda = dev.is_cuda();
  // 1. Update t-1 reaches the parameters (Optimizer::step() then refreshes the half copies).
  const auto t0 = Clock::now();
  finish_pending(/*apply=*/true);
  timing_.background_wait_ms = ms_between(t0, Clock::now());

  // 2. This step's gradients and found_inf, captured on the current stream.
  std::vector<Tensor> grads;
  grads.reserve(device_.size());
  for (nn::Parameter* p : device_) grads.push_back(p->grad());  // may memset (current stream)
  Tensor found_inf = found_inf_;
  if (cuda) {
    for (size_t i = 0; i < device_.size(); ++i)
      core::detail::copy_bytes_unowned(staging_[i], grads[i]);
    if (found_inf_.defined()) {
      core::detail::copy_bytes_unowned(staged_found_inf_, found_inf_);
      found_inf = staged_found_inf_;
    }
  }
  // 3. Downloads (on the copy stream after the staging copies, on CUDA).
  const Tensor flag = download_gradients(cuda ? staging_ : grads, found_inf);

  // The worker: CPU update group by group, uploads into the staging buffer (CUDA; on the CPU
  // the next step copies the shadows into the parameters).
  Background& bg = *background_;
  bg.pending = true;
  bg.step = steps_ + 1;
  bg.skipped = false;
  bg.timing = {};
  const float lr = lr_;
  const int64_t steps = steps_;
  bg.submit([this, flag, lr, steps, cuda] {
    sync_shared_state();
    StepTiming timing;
    const bool skipped =
        update_groups(flag, lr, steps, cuda ? staging_ : std::vector<Tensor>{}, timing);
    if (cuda) uploaded_.record(upload_stream_);
    background_->skipped = skipped;
    background_->timing = timing;
  });
  ++steps_;  // 4. no wait
}

void OffloadedOptimizer::update() {
  if (options_.delayed_update) {
    update_delayed();
    return;
  }
  const Device dev = device_[0]->device();
  const bool cuda = dev.is_cuda();
  std::vector<Tensor> grads;
  grads.reserve(device_.size());
  for (nn::Parameter* p : device_) grads.push_back(p->grad());  // before the event: may memset
  sync_shared_state();

  const Tensor flag = download_gradients(grads, found_inf_);

  std::vector<Tensor> upload_to;
  upload_to.reserve(device_.size());
  for (nn::Parameter* p : device_) upload_to.push_back(p->value());
  timing_ = {};
  update_groups(flag, lr_, steps_, upload_to, timing_);
  if (cuda) {
    uploaded_.record(upload_stream_);
    uploaded_.block(core::current_stream(dev));
  }
  ++steps_;
}

}  // namespace stoker::optim
