#include "stoker/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"
#include "stoker/core/output_path.h"
#include "stoker/core/stream.h"
#include "stoker/diag/replay_source.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/dist/local_grad_sync.h"
#include "stoker/nn/checkpoint.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/copy.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm_fp8.h"
#include "stoker/ops/reduce.h"
#include "stoker/ops/training.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/environment.h"
#include "stoker/train/run_lock.h"
#include "stoker/train/run_settings.h"
#include "stoker/train/safetensors.h"
#include "train/checkpoint_observer.h"
#include "train/diagnostics_observer.h"
#include "train/eta.h"
#include "train/log_printer.h"
#include "train/metrics_observer.h"
#include "train/progress_observer.h"
#include "train/step_graph.h"
#include "util/atomic_file.h"
#include "util/checksum.h"
#include "util/progress_bar.h"
#include "util/stop_signal.h"

namespace stoker::train {

namespace {
using Clock = std::chrono::steady_clock;

// The live Trainers, newest last, behind the allocator's out-of-memory hook (installed while
// at least one lives). The allocator stays ignorant of the train layer
// (docs/architecture.md#layers).
std::mutex g_trainers_mu;
std::vector<const Trainer*> g_trainers;
core::OutOfMemoryHook g_previous_hook;

std::string trainer_oom_context(Device device) {
  std::lock_guard<std::mutex> lock(g_trainers_mu);
  for (auto it = g_trainers.rbegin(); it != g_trainers.rend(); ++it) {
    const MemoryReport r = (*it)->memory_report();
    if (r.device != device) continue;
    const auto advice = memory_advice(r, (*it)->memory_settings());
    return format_memory_report(r) +
           (advice.empty() ? std::string()
                           : "ways to need less memory:\n" + format_memory_advice(advice));
  }
  return {};
}

void register_trainer(const Trainer* t) {
  std::lock_guard<std::mutex> lock(g_trainers_mu);
  if (g_trainers.empty()) g_previous_hook = core::set_out_of_memory_hook(trainer_oom_context);
  g_trainers.push_back(t);
}

void unregister_trainer(const Trainer* t) {
  std::lock_guard<std::mutex> lock(g_trainers_mu);
  g_trainers.erase(std::remove(g_trainers.begin(), g_trainers.end(), t), g_trainers.end());
  if (g_trainers.empty()) core::set_out_of_memory_hook(std::move(g_previous_hook));
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Version 2 adds the tensors' checksums (kChecksumsKey), "stoker.data" and this key; version 1
// files (without it) still resume, unchecked.
constexpr int kCheckpointVersion = 2;

// "stoker.data": the job's world size and the source's identity (known fields only).
std::string recorded_run_json(int world_size, const data::SourceIdentity& id) {
  nlohmann::json j = {{"world_size", world_size}};
  if (id.batch_size >= 0) j["batch_size"] = id.batch_size;
  if (id.seed) j["seed"] = std::to_string(*id.seed);
  if (id.samples >= 0) j["samples"] = id.samples;
  if (!id.fingerprint.empty()) j["fingerprint"] = id.fingerprint;
  if (!id.location.empty()) j["location"] = id.location;
  return j.dump();
}

void parse_recorded_run(const std::string& file, const std::string& text, int& world_size,
                        data::SourceIdentity& id) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) throw std::invalid_argument("not a JSON object");
    if (j.contains("world_size")) world_size = j.at("world_size").get<int>();
    if (j.contains("batch_size")) id.batch_size = j.at("batch_size").get<int64_t>();
    if (j.contains("seed")) id.seed = std::stoull(j.at("seed").get<std::string>());
    if (j.contains("samples")) id.samples = j.at("samples").get<int64_t>();
    if (j.contains("fingerprint")) id.fingerprint = j.at("fingerprint").get<std::string>();
    if (j.contains("location")) id.location = j.at("location").get<std::string>();
  } catch (const std::exception& e) {
    STOKER_THROW(file, ": metadata stoker.data = '", text, "' is not a valid record of the run (",
                 e.what(), "): the header is damaged");
  }
}

// Removes what killed checkpoint writes left in `dir`, saying so.
void remove_leftover_temporaries(const std::filesystem::path& dir) {
  const auto removed = util::remove_stale_temporaries(dir, ".safetensors");
  if (removed.empty()) return;
  std::string names;
  for (size_t i = 0; i < removed.size() && i < 3; ++i)
    names += (i ? ", " : "") + removed[i].filename().string();
  if (removed.size() > 3) names += core::detail::str(" and ", removed.size() - 3, " more");
  std::fprintf(stderr,
               "checkpoint: removed %zu temporary file%s in %s left by checkpoint writes of "
               "processes that no longer run (%s)\n",
               removed.size(), removed.size() == 1 ? "" : "s", dir.string().c_str(), names.c_str());
}

TrainerOptions effective_options(TrainerOptions options) {
  return options.environment_overrides ? apply_environment(std::move(options)) : options;
}

// A program's callback as an observer.
class LogCallbackObserver final : public StepObserver {
 public:
  explicit LogCallbackObserver(Trainer::Callback cb) : cb_(std::move(cb)) {}
  void on_log(const StepStats& st) override { cb_(st); }

 private:
  Trainer::Callback cb_;
};

class EvalCallbackObserver final : public StepObserver {
 public:
  explicit EvalCallbackObserver(Trainer::EvalCallback cb) : cb_(std::move(cb)) {}
  void on_eval(const EvalRecord& rec) override { cb_(rec); }

 private:
  Trainer::EvalCallback cb_;
};

}  // namespace

Trainer::Trainer(nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer,
                 TrainerOptions options)
    : model_(model),
      loss_(loss),
      optimizer_(optimizer),
      options_(effective_options(std::move(options))) {
  STOKER_CHECK(options_.grad_accum_steps >= 1, "TrainerOptions: grad_accum_steps ",
               options_.grad_accum_steps, " must be >= 1");
  STOKER_CHECK(options_.log_interval >= 1, "TrainerOptions: log_interval ", options_.log_interval,
               " must be >= 1");
  STOKER_CHECK(options_.clip_grad_norm >= 0.0f, "TrainerOptions: clip_grad_norm ",
               options_.clip_grad_norm, " must be >= 0 (0 disables clipping)");
  // cuda_graph: refused now rather than after the warm-up steps.
  STOKER_CHECK(!options_.cuda_graph || optimizer.supports_device_lr(),
               "TrainerOptions::cuda_graph: ", optimizer.describe(),
               " cannot read its learning rate on the device, which a replayed step needs; use "
               "SGD, LARS or AdamW with f32 state, or turn the option off");
  STOKER_CHECK(!options_.cuda_graph || options_.cuda_graph_warmup >= 1,
               "TrainerOptions: cuda_graph_warmup ", options_.cuda_graph_warmup,
               " must be >= 1 (the first step plans the GEMMs with host syncs, which a capture "
               "cannot hold)");
  STOKER_CHECK(!options_.cuda_graph || model.device().is_cuda(),
               "TrainerOptions::cuda_graph: the model is on ", model.device().str(),
               "; CUDA graphs need a CUDA device (move the model first, or turn the option off "
               "for CPU training)");
  STOKER_CHECK(options_.activation_checkpoint_every >= 0,
               "TrainerOptions: activation_checkpoint_every ", options_.activation_checkpoint_every,
               " must be >= 0 (0 disables checkpointing)");
  if (options_.activation_checkpoint_every > 0) {
    auto* seq = dynamic_cast<nn::Sequential*>(&model_);
    STOKER_CHECK(seq != nullptr,
                 "TrainerOptions::activation_checkpoint_every needs a Sequential model of blocks; ",
                 model_.describe(), " is not one (wrap its blocks in nn::Checkpoint instead)");
    nn::checkpoint_every(*seq, options_.activation_checkpoint_every);
  }
  if (options_.selective_recompute) nn::set_selective_recompute(model_, true);
  params_ = model_.parameters();
  if (!options_.grad_sync) local_sync_ = std::make_unique<dist::LocalGradSync>(model_);
  sync_ = options_.grad_sync ? options_.grad_sync : local_sync_.get();
  sync_->check_optimizer(optimizer_);  // a ShardedOptimizer goes with its ShardedGradSync only
  // Under mixed precision, layers that make activations from integer inputs (Embedding) emit
  // the compute dtype, so everything after them computes in half precision too.
  nn::set_compute_dtype(model_, amp::compute_dtype(options_.precision));
  // Precision::fp8: the Linear layers' GEMMs on FP8 tensor cores (refused on GPUs without).
  if (options_.precision == amp::Precision::fp8) {
    STOKER_CHECK(ops::fp8_gemm_supported(model_.device()),
                 "Trainer: Precision::fp8 needs FP8 tensor cores (compute capability 8.9 or newer: "
                 "Ada, Hopper), and ",
                 core::describe_device(model_.device()),
                 " has none; train in bf16 there (--precision bf16)");
    STOKER_CHECK(nn::set_linear_fp8(model_, true) > 0,
                 "Trainer: Precision::fp8 runs the "
                 "nn::Linear layers in FP8, and ",
                 model_.describe(), " has none; train in bf16 (the rest of fp8 is bf16)");
  }
  STOKER_CHECK(!params_.empty(), "Trainer: the model ", model_.describe(), " has no parameters");
  if (options_.precision == amp::Precision::fp16) {
    scaler_ = std::make_unique<amp::GradScaler>(model_.device(), options_.scaler);
    // The loss scale multiplies the loss gradient in fp32 inside the loss's backward kernel,
    // before it is rounded to f16, and never leaves the device.
    loss_.set_grad_scale(scaler_->scale());
    optimizer_.set_found_inf(scaler_->found_inf());
  } else {
    loss_.set_grad_scale(Tensor());  // a loss reused from an fp16 Trainer
  }
  // The Trainer's own observers, in the order they see each event.
  bar_ =
      std::make_unique<util::ProgressBar>(options_.progress_bar && !options_.quiet && main_rank());
  const auto own = [&](std::unique_ptr<StepObserver> o) {
    observers_.push_back(o.get());
    owned_observers_.push_back(std::move(o));
  };
  if (options_.diagnostics.enabled) {
    auto d = std::make_unique<DiagnosticsObserver>(options_.diagnostics, model_.device(), *bar_);
    diag_ = d.get();
    own(std::move(d));
  }
  own(std::make_unique<LogPrinter>(*bar_));
  if (!options_.metrics_path.empty()) own(std::make_unique<MetricsObserver>(options_.metrics_path));
  if (!options_.checkpoint_dir.empty())
    own(std::make_unique<CheckpointObserver>(options_.checkpoint_dir, options_.checkpoint_interval,
                                             options_.checkpoint_interval_seconds,
                                             options_.keep_last));
  own(std::make_unique<ProgressObserver>(*bar_));
  builtin_observers_ = observers_.size();
  register_trainer(this);
}

Trainer::~Trainer() { unregister_trainer(this); }

const diag::Diagnostics* Trainer::diagnostics() const {
  return diag_ ? &diag_->diagnostics() : nullptr;
}

void Trainer::add_observer(StepObserver& observer) { observers_.push_back(&observer); }

void Trainer::add_log_callback(Callback cb) {
  owned_observers_.push_back(std::make_unique<LogCallbackObserver>(std::move(cb)));
  observers_.push_back(owned_observers_.back().get());
}

void Trainer::add_eval_callback(EvalCallback cb) {
  owned_observers_.push_back(std::make_unique<EvalCallbackObserver>(std::move(cb)));
  observers_.push_back(owned_observers_.back().get());
}

template <typename Event>
void Trainer::notify(Event&& event, bool erase_bar) {
  for (size_t i = 0; i < observers_.size(); ++i) {
    if (erase_bar && i == builtin_observers_) bar_->clear();
    event(*observers_[i]);
  }
}

void Trainer::phase(diag::Phase p) {
  if (capturing_) return;  // a CUDA graph's step: one span to the diagnostics
  notify([p](StepObserver& o) { o.on_phase(p); });
}

MemorySettings Trainer::memory_settings() const {
  return {
      .mixed_precision = options_.precision != amp::Precision::fp32,
      .activation_checkpointing = options_.activation_checkpoint_every > 0,
      .low_precision_optimizer_state = optimizer_.state_format().dtype != optim::StateDType::f32,
      .grad_accum_steps = options_.grad_accum_steps};
}

MemoryReport Trainer::memory_report() const {
  MemoryReport r;
  r.device = model_.device();
  for (const nn::Parameter* p : params_) {
    r.parameters += p->value().nbytes();
    if (p->compute_copy().defined()) r.compute_copies += p->compute_copy().nbytes();
    // The gradient is f32 of the value's shape (read without grad(), which may clear it).
    if (p->requires_grad) r.gradients += p->value().nbytes();
  }
  // By where the state lives: an offloaded optimizer's is host memory, not the device's.
  optimizer_.flush();  // nothing may still be writing the state read below
  for (const auto& [name, t] : optimizer_.state())
    (t.device() == r.device ? r.optimizer_state : r.optimizer_state_host) += t.nbytes();
  r.input_batch = last_batch_bytes_;
  r.activations_peak = activations_peak_;
  r.loader_pinned = core::pinned_memory_stats().current_bytes;
  r.allocator = core::memory_stats(r.device);
  return r;
}

bool Trainer::begin_memory_measure() {
  if (memory_measured_) return false;
  core::reset_peak_memory(model_.device());
  return true;
}

void Trainer::end_memory_measure(bool measuring) {
  if (!measuring) return;
  const core::MemoryStats st = core::memory_stats(model_.device());
  activations_peak_ = st.peak_bytes > st.current_bytes ? st.peak_bytes - st.current_bytes : 0;
  memory_measured_ = true;
}

void Trainer::micro_step(const data::Batch& batch, int k) {
  const Device device = model_.device();
  STOKER_CHECK(batch.input.device() == device, "Trainer: the batch is on ",
               batch.input.device().str(), " but the model is on ", device.str(),
               "; create the data source with .device = ", device.str());
  phase(diag::Phase::forward);
  Tensor x = batch.input;
  const DType compute = amp::compute_dtype(options_.precision);
  if (core::is_float(x.dtype()) && x.dtype() != compute) {
    Tensor cast = Tensor::empty(x.shape(), compute, x.device());
    ops::cast(cast, x);
    x = cast;
  }
  last_batch_bytes_ =
      (batch.input.defined() ? batch.input.nbytes() : 0) +
      (batch.target.defined() && batch.target.device() == device ? batch.target.nbytes() : 0);
  const Tensor y = model_.forward(x);
  const float scale = 1.0f / static_cast<float>(k);
  Tensor l, dy;
  if (loss_.fuses_backward()) {  // one pass gives both (its time counts as forward)
    nn::Loss::ForwardBackward r = loss_.forward_backward(y, batch.target, scale);
    l = std::move(r.loss);
    dy = std::move(r.grad);
    phase(diag::Phase::backward);
  } else {
    l = loss_.forward(y, batch.target);
    phase(diag::Phase::backward);
    dy = loss_.backward(scale);
  }
  model_.backward(dy);
  ops::axpy(step_loss_, 1.0f / static_cast<float>(k), l);
}

void Trainer::apply_step(int micro, int k, bool want_norm) {
  // Data parallelism: the last buckets' reductions (or, when the last micro-step ran without
  // sync, all of them) are launched and the compute stream waits for them on the device.
  if (sync_->communicator()) phase(diag::Phase::comm);
  sync_->finish();
  phase(diag::Phase::optimizer);
  // What this rank updates: every gradient, or (ZeRO-1) this rank's slices of them.
  const std::vector<Tensor> grads = sync_->step_gradients();
  if (micro < k) {
    // The epoch ended inside an accumulation group: rescale so the update is the mean over the
    // micro-batches that ran.
    const float fix = static_cast<float>(k) / static_cast<float>(micro);
    for (const Tensor& g : grads) ops::scale(g, fix);
    ops::scale(step_loss_, fix);
  }
  if (scaler_) {
    scaler_->unscale(grads);  // before clipping: the norm is of the true gradients
    sync_->agree_on_overflow(scaler_->found_inf());
  }
  if (options_.clip_grad_norm > 0.0f || want_norm) {
    const Tensor norm = sync_->total_norm(grads);
    if (graph_ && grad_norm_.defined()) {
      // The graph's step writes the tensor made before its capture (it frees what it
      // allocates); eager steps beside it write there too, so logs read one place.
      ops::copy(grad_norm_, norm);
    } else {
      grad_norm_ = norm;
    }
    if (options_.clip_grad_norm > 0.0f)
      ops::clip_by_total_norm(grads, grad_norm_, options_.clip_grad_norm);
  }
  if (options_.schedule) optimizer_.set_lr(scheduled_lr());
  // With a graph the optimizer reads the learning rate on the device; an eager step writes it
  // there too (a replay's is written by StepGraph before its launch).
  if (graph_ && !capturing_) ops::fill(graph_->lr(), static_cast<double>(optimizer_.lr()));
  optimizer_.step();  // skipped on the device when the scaler found an overflow
  optimizer_.zero_grad();
  if (scaler_) scaler_->update();
  ops::loss_monitor_update(monitor_, step_loss_, step_,
                           capturing_ ? graph_->step_number() : Tensor());
  ++step_;
}

bool Trainer::main_rank() const { return sync_->rank() == 0; }

int Trainer::world_size() const { return sync_->world_size(); }

dist::Communicator* Trainer::communicator() const { return sync_->communicator(); }

void Trainer::ensure_step_state() {
  const Device device = model_.device();
  if (!monitor_.defined() || monitor_.device() != device)
    monitor_ = ops::loss_monitor_create(device);
  if (!step_loss_.defined() || step_loss_.device() != device)
    step_loss_ = Tensor::zeros({}, DType::f32, device);
}

void Trainer::run_step(data::BatchSource& train, bool& epoch_done, int64_t& samples) {
  const int k = options_.grad_accum_steps;
  const bool measuring = begin_memory_measure();
  notify([&](StepObserver& o) { o.on_step_begin(step_); });
  ops::fill(step_loss_, 0.0);
  int micro = 0;
  int64_t step_samples = 0;
  std::vector<data::Batch> held;  // cuda_graph: the step runs once all its batches are here
  for (; micro < k; ++micro) {
    data::Batch batch;
    if (micro > 0) phase(diag::Phase::data);
    const auto wait_start = Clock::now();
    const bool got = train.next(batch);
    window_data_wait_s_ += seconds_since(wait_start);
    if (!got) {
      epoch_done = true;
      break;
    }
    step_samples += batch.size;
    if (options_.cuda_graph) {
      held.push_back(std::move(batch));
      continue;
    }
    sync_->set_sync(micro == k - 1);
    micro_step(batch, k);
  }
  samples += step_samples;
  if (micro == 0) {
    notify([](StepObserver& o) { o.on_step_skipped(); });
    return;
  }
  const bool logs_now = (step_ + 1) % options_.log_interval == 0 || epoch_done;
  // Every rank's batches of a step have the same size (sharded, full batches).
  step_samples_ = step_samples * world_size();
  if (options_.cuda_graph)
    graph_step(held, micro, k, options_.log_grad_norm && logs_now);
  else
    apply_step(micro, k, options_.log_grad_norm && logs_now);
  samples_seen_ += step_samples_;
  const StepEnd end{.step = step_,
                    .epoch = std::max<int64_t>(0, train.epoch()),
                    .samples = step_samples,
                    .epoch_done = epoch_done};
  notify([&](StepObserver& o) { o.on_step_end(end); });
  end_memory_measure(measuring);
  if (!memory_printed_ && memory_measured_ && !options_.quiet && main_rank()) {
    bar_->clear();
    std::printf("%s", format_memory_report(memory_report()).c_str());
    std::fflush(stdout);
  }
  memory_printed_ = memory_printed_ || memory_measured_;
}

void Trainer::train_step(std::span<const data::Batch> micro_batches) {
  STOKER_CHECK(!micro_batches.empty(), "Trainer::train_step: no micro-batches given");
  model_.set_training(true);
  ensure_step_state();
  ops::fill(step_loss_, 0.0);
  const bool measuring = begin_memory_measure();
  const int k = static_cast<int>(micro_batches.size());
  step_samples_ = 0;
  for (const data::Batch& b : micro_batches) step_samples_ += b.size * world_size();
  if (options_.cuda_graph)
    graph_step(micro_batches, k, k, /*want_norm=*/false);
  else
    eager_step(micro_batches, k, k, /*want_norm=*/false);
  samples_seen_ += step_samples_;
  end_memory_measure(measuring);
}

size_t Trainer::cuda_graph_nodes() const { return graph_ ? graph_->node_count() : 0; }

void Trainer::eager_step(std::span<const data::Batch> batches, int micro, int k, bool want_norm) {
  for (int i = 0; i < micro; ++i) {
    sync_->set_sync(i == micro - 1);
    micro_step(batches[static_cast<size_t>(i)], k);
  }
  apply_step(micro, k, want_norm);
}

bool Trainer::graph_step(std::span<const data::Batch> batches, int micro, int k, bool want_norm) {
  // Eager: the warm-up steps (cuBLASLt plans and autotunes each GEMM shape with host syncs, the
  // half compute copies are made), a partial accumulation group, an op-timed step (its ops are
  // timed one by one on the host's side).
  if (graph_warm_steps_ < options_.cuda_graph_warmup || micro < k ||
      core::op_listener() != nullptr) {
    ++graph_warm_steps_;
    eager_step(batches, micro, k, want_norm);
    return false;
  }
  if (graph_eager_) {  // a captured step kept tensors alive: not replayable (see below)
    eager_step(batches, micro, k, want_norm);
    return false;
  }
  if (!graph_) {
    STOKER_CHECK(world_size() == 1, "TrainerOptions::cuda_graph: this job has ", world_size(),
                 " ranks; the graph step is for one process (turn cuda_graph off for data "
                 "parallelism)");
    auto graph = std::make_unique<StepGraph>(model_.device());
    optimizer_.set_lr_tensor(graph->lr());  // throws for an optimizer that cannot
    graph_ = std::move(graph);
  }
  if (graph_->captured() && !graph_->matches(batches)) {  // another shape: this step eagerly
    eager_step(batches, micro, k, want_norm);
    return false;
  }
  if (options_.schedule) optimizer_.set_lr(scheduled_lr());
  const float lr = optimizer_.lr();
  if (graph_->matches(batches)) {  // the common case: one launch
    graph_->replay(batches, lr, step_);
    optimizer_.count_replayed_step();
    ++step_;
    return true;
  }
  // Capture (the first graph step, or the first after a resume): the norm every step when logs
  // or clipping want it (a graph cannot choose per step), in a tensor made before the capture.
  const bool norm = options_.clip_grad_norm > 0.0f || options_.log_grad_norm || want_norm;
  if (norm) {  // a tensor of the Trainer's own, made outside the capture (see apply_step)
    const Tensor last = grad_norm_;
    grad_norm_ = Tensor::zeros({}, DType::f32, model_.device());
    if (last.defined()) ops::copy(grad_norm_, last);
  }
  capturing_ = true;
  try {
    graph_->capture_and_run(batches, lr, step_,
                            [&](std::span<const data::Batch> b) { eager_step(b, k, k, norm); });
  } catch (...) {
    capturing_ = false;
    throw;
  }
  capturing_ = false;
  if (!graph_->held().empty()) {
    // The step ran (once, from its graph); replaying it would fail. Go on eagerly, once said.
    std::fprintf(stderr,
                 "stoker: warning: TrainerOptions::cuda_graph: the captured training step keeps "
                 "%s that it allocated alive after it ends (a module or loss holding a buffer "
                 "from one step to the next), so its graph cannot be replayed; training goes on "
                 "without the graph. Release such tensors by the end of backward, or allocate "
                 "them once outside the step\n",
                 graph_->held().c_str());
    graph_->reset();
    graph_eager_ = true;
  }
  return true;
}

StepStats Trainer::log_window(int64_t epoch, int64_t samples, double seconds, int64_t steps) {
  const ops::LossMonitorState s = ops::loss_monitor_read(monitor_, /*reset=*/true);
  if (s.first_bad_step >= 0 && !options_.continue_on_nan) {
    STOKER_THROW("training stopped: the loss became NaN/Inf at step ", s.first_bad_step,
                 s.last_finite_step >= 0
                     ? core::detail::str(" (last finite loss ", s.last_finite_loss, " at step ",
                                         s.last_finite_step, ")")
                     : std::string(" (no finite loss yet)"),
                 ". Lower the learning rate, enable clip_grad_norm, check the inputs for NaN, "
                 "or set TrainerOptions::continue_on_nan");
  }
  if (scaler_) scaler_->check();
  StepStats st;
  st.step = step_;
  st.loss_scale = scaler_ ? scaler_->scale_value() : -1.0;
  st.epoch = epoch;
  st.loss = s.steps > 0 ? s.loss_sum / static_cast<double>(s.steps) : NAN;
  st.lr = optimizer_.lr();
  st.grad_norm = grad_norm_.defined() ? grad_norm_.item() : -1.0;
  st.ms_per_step = steps > 0 ? seconds * 1e3 / static_cast<double>(steps) : 0.0;
  st.samples_per_s = seconds > 0 ? static_cast<double>(samples) / seconds : 0.0;
  st.global_samples_per_s = st.samples_per_s;
  st.world_size = world_size();
  // Preemption: the stop signal this rank received (TrainerOptions::stop_signals), agreed on by
  // the job below: each rank counts in the slot of its signal, and any count stops every rank.
  const int received = watching_signals_ ? util::StopSignalGuard::received() : 0;
  int agreed = received;
  if (dist::Communicator* comm = communicator(); comm && st.world_size > 1) {
    // Every rank logs at the same steps, so this all-reduce pairs up across ranks.
    std::vector<float> values = {static_cast<float>(st.samples_per_s)};
    for (const int sig : options_.stop_signals) values.push_back(received == sig ? 1.0f : 0.0f);
    const Tensor v = Tensor::from_floats(values, {static_cast<int64_t>(values.size())},
                                         DType::f32, comm->device());
    comm->all_reduce(v, dist::ReduceOp::sum);
    const std::vector<float> sums = v.to_floats();
    st.global_samples_per_s = sums[0];
    for (size_t i = 0; i < options_.stop_signals.size() && agreed == 0; ++i)
      if (sums[i + 1] > 0) agreed = options_.stop_signals[i];
  }
  if (agreed != 0 && stop_signal_ == 0) stop_signal_ = agreed;
  st.host_syncs_per_step = static_cast<int64_t>(window_max_syncs_);
  st.data_wait_share = seconds > 0 ? std::min(1.0, window_data_wait_s_ / seconds) : 0.0;
  window_data_wait_s_ = 0;
  st.peak_memory_mib =
      static_cast<double>(core::memory_stats(model_.device()).peak_bytes) / (1024.0 * 1024.0);
  window_max_syncs_ = 0;
  st.elapsed_s = seconds_since(fit_start_);
  st.eval_share = st.elapsed_s > 0 ? std::min(1.0, fit_eval_s_ / st.elapsed_s) : 0.0;
  st.total_steps = fit_total_steps_;
  st.eta_s = seconds_left(step_, fit_first_step_, fit_total_steps_, st.elapsed_s);
  notify([&](StepObserver& o) { o.on_log(st); }, /*erase_bar=*/true);
  return st;
}

EvalRecord Trainer::evaluate_in_fit(data::BatchSource& validation, int64_t epoch) {
  const auto t0 = Clock::now();
  const EvalResult r = evaluate(validation, options_.evaluation.max_samples);
  EvalRecord rec;
  rec.step = step_;
  rec.epoch = epoch;
  rec.loss = r.loss;
  rec.accuracy = r.accuracy;
  rec.samples = r.samples;
  rec.seconds = seconds_since(t0);
  fit_eval_s_ += rec.seconds;
  rec.elapsed_s = seconds_since(fit_start_);
  rec.share = rec.elapsed_s > 0 ? std::min(1.0, fit_eval_s_ / rec.elapsed_s) : 0.0;
  model_.set_training(true);
  notify([&](StepObserver& o) { o.on_eval(rec); }, /*erase_bar=*/true);
  return rec;
}

FitResult Trainer::fit(data::BatchSource& source, int64_t epochs, data::BatchSource* validation) {
  STOKER_CHECK(epochs >= 0, "Trainer::fit: epochs ", epochs, " must be >= 0");
  STOKER_CHECK(options_.checkpoint_interval >= 0 && options_.checkpoint_interval_seconds >= 0 &&
                   options_.keep_last >= 0,
               "TrainerOptions: checkpoint_interval ", options_.checkpoint_interval,
               ", checkpoint_interval_seconds ", options_.checkpoint_interval_seconds,
               " and keep_last ", options_.keep_last, " must be >= 0");
  STOKER_CHECK(options_.evaluation.every_steps >= 0 && options_.evaluation.max_samples >= 0,
               "TrainerOptions::evaluation: every_steps ", options_.evaluation.every_steps,
               " and max_samples ", options_.evaluation.max_samples, " must be >= 0");
  if (resumed_) check_resumed_run(source);
  // The ablation trains on a replay of the first batch (which keeps the source's identity).
  std::optional<diag::ReplaySource> replay;
  if (options_.replay_first_batch) replay.emplace(source);
  data::BatchSource& train = replay ? *replay : source;
  const Device device = model_.device();
  model_.set_training(true);
  monitor_ = ops::loss_monitor_create(device);
  step_loss_ = Tensor::zeros({}, DType::f32, device);
  grad_norm_ = Tensor();
  window_max_syncs_ = 0;
  window_data_wait_s_ = 0;
  FitResult result;
  const auto start = Clock::now();
  fit_start_ = start;
  fit_first_step_ = step_;
  fit_eval_s_ = 0;
  {
    // An epoch that ends inside an accumulation group still makes a (smaller) step.
    const int64_t bpe = train.batches_per_epoch();
    const int64_t k = options_.grad_accum_steps;
    fit_total_steps_ = bpe >= 0 ? (bpe + k - 1) / k * epochs : -1;
    if (options_.max_steps >= 0)
      fit_total_steps_ = fit_total_steps_ < 0 ? options_.max_steps
                                              : std::min(fit_total_steps_, options_.max_steps);
  }
  const int64_t first_epoch = resumed_ ? resume_epoch_ : 0;
  const bool was_resumed = resumed_;
  // A resumed run is positioned before anything else (not at the start of its epoch below), so
  // that the steps it has left and the schedule's rebase are known before the first step.
  const bool positioned_first = resumed_ && resume_epoch_ < epochs;
  if (positioned_first) resume_position(train);
  plan_fit(train, epochs, positioned_first);
  stop_requested_ = false;
  // A run owns its outputs (train/run_lock.h): rank 0 locks them for the fit, before its first
  // step (a program that locked them already shares its lock).
  std::vector<std::shared_ptr<RunLock>> output_locks;
  if (main_rank() && !options_.checkpoint_dir.empty()) {
    core::check_output_dir(options_.checkpoint_dir, "TrainerOptions::checkpoint_dir");
    output_locks.push_back(
        RunLock::acquire(RunLock::dir_lock_path(options_.checkpoint_dir),
                         "TrainerOptions::checkpoint_dir " + options_.checkpoint_dir.string(),
                         "checkpoint_dir"));
  }
  if (main_rank() && !options_.metrics_path.empty()) {
    core::check_output_path(options_.metrics_path, "TrainerOptions::metrics_path");
    output_locks.push_back(
        RunLock::acquire(RunLock::file_lock_path(options_.metrics_path),
                         "TrainerOptions::metrics_path " + options_.metrics_path.string(),
                         "metrics_path"));
  }
  // Preemption: the stop signals only set a flag, read after each step (see log_window).
  std::optional<util::StopSignalGuard> signals;
  if (!options_.stop_signals.empty()) signals.emplace(options_.stop_signals);
  watching_signals_ = signals.has_value();
  stop_signal_ = 0;
  notify([&](StepObserver& o) {
    o.on_fit_begin({.trainer = *this,
                    .train = train,
                    .validation = validation,
                    .first_step = step_,
                    .first_epoch = first_epoch,
                    .epochs = epochs,
                    .total_steps = fit_total_steps_,
                    .model = model_.describe(),
                    .parameters = model_.parameter_count(),
                    .precision = std::string(amp::precision_name(options_.precision)),
                    .grad_accum_steps = options_.grad_accum_steps,
                    .world_size = world_size(),
                    .main_rank = main_rank(),
                    .communicator = communicator(),
                    .quiet = options_.quiet,
                    .resumed = resumed_,
                    .resumed_from = resumed_ ? resume_path_ : std::filesystem::path(),
                    .resumed_evaluated = resumed_ && resume_evaluated_step_ == step_});
  });
  auto window_start = start;
  double window_eval_s = 0;  // evaluation inside the window: not the steps' time
  int64_t window_samples = 0, window_steps = 0;
  int64_t epoch_now = first_epoch;
  // The evaluation at the resumed step is done when the checkpoint says so (it was written after
  // it); one that was due there but came after the checkpoint runs first.
  evaluated_step_ = resumed_ ? resume_evaluated_step_ : -1;
  bool positioned = false;  // the source was started or restored in this fit()
  bool stop = max_steps_reached() || stop_requested_;
  const auto log_now = [&](int64_t epoch) {
    result.log.push_back(log_window(epoch, window_samples,
                                    std::max(0.0, seconds_since(window_start) - window_eval_s),
                                    window_steps));
    window_start = Clock::now();
    window_eval_s = 0;
    window_samples = window_steps = 0;
  };
  const auto evaluate_now = [&](int64_t epoch) {
    if (!validation || evaluated_step_ == step_) return;
    evaluated_step_ = step_;
    const EvalRecord rec = evaluate_in_fit(*validation, epoch);
    window_eval_s += rec.seconds;
    result.evaluations.push_back(rec);
  };
  if (resumed_ && step_ > 0) {
    const int64_t every = options_.evaluation.every_steps;
    const bool due = every > 0 ? step_ % every == 0 : resume_batch_ == 0;  // an epoch's end
    if (due) evaluate_now(first_epoch > 0 && resume_batch_ == 0 ? first_epoch - 1 : first_epoch);
  }
  // Where fit() ends when no epoch runs (a resumed run that is complete): the resumed position.
  const CheckpointPosition resumed_position{resume_epoch_, resume_batch_, resume_progress_};

  for (int64_t epoch = first_epoch; epoch < epochs && !stop; ++epoch) {
    epoch_now = epoch;
    if (!(resumed_ && epoch == resume_epoch_))  // else positioned above (positioned_first)
      train.start_epoch(epoch);
    positioned = true;
    resumed_ = false;
    core::reset_peak_memory(device);  // the log's peak memory is per epoch
    notify([&](StepObserver& o) { o.on_epoch_begin(epoch); });
    bool epoch_done = false;
    while (!epoch_done && !stop) {
      const int64_t before = step_;
      const uint64_t syncs_before = core::host_sync_count();
      int64_t step_samples = 0;
      run_step(train, epoch_done, step_samples);
      window_samples += step_samples;
      window_max_syncs_ = std::max(window_max_syncs_, core::host_sync_count() - syncs_before);
      if (step_ == before) break;  // the epoch had no batch left
      ++window_steps;
      stop = max_steps_reached();
      // Preemption: one process stops after this step (its log line included); the ranks of a
      // job at the next log line, where they agree (log_window).
      if (watching_signals_ && world_size() == 1 && util::StopSignalGuard::received() != 0)
        stop = true;
      if (step_ % options_.log_interval == 0 || epoch_done || stop) log_now(epoch);
      stop = stop || stop_signal_ != 0;
      // A preempted run leaves the evaluation due here to its restart (not in its checkpoint).
      if (stop_signal_ == 0 && options_.evaluation.every_steps > 0 &&
          step_ % options_.evaluation.every_steps == 0)
        evaluate_now(epoch);
      const StepEnd done{
          .step = step_, .epoch = epoch, .samples = step_samples, .epoch_done = epoch_done};
      notify([&](StepObserver& o) { o.on_step_done(done); });
      stop = stop || stop_requested_;
    }
    if (window_steps > 0) log_now(epoch);  // the epoch ended between log lines: its tail
    if (options_.evaluation.every_steps == 0 && stop_signal_ == 0) evaluate_now(epoch);
    notify([&](StepObserver& o) { o.on_epoch_end(epoch); }, /*erase_bar=*/true);
    stop = stop || stop_requested_ || stop_signal_ != 0;
  }
  optimizer_.flush();  // a delayed (background) update reaches the weights before fit() returns
  if (stop_signal_ != 0) {
    // Preempted: a checkpoint of the step reached, under a periodic name (the run is not over;
    // retention counts it), from which the same command continues.
    if (!options_.checkpoint_dir.empty()) {
      result.stop_checkpoint = periodic_checkpoint_path(options_.checkpoint_dir, step_);
      write_checkpoint(result.stop_checkpoint, &train);
      if (options_.keep_last > 0 && main_rank())
        prune_checkpoints(options_.checkpoint_dir, options_.keep_last);
    }
  } else {
    evaluate_now(epoch_now);  // after fit()'s last step, unless that step was just evaluated
    if (!options_.checkpoint_dir.empty()) {
      const auto position =
          positioned || !was_resumed ? std::nullopt : std::optional(resumed_position);
      const auto write = [&](const std::filesystem::path& p) {
        write_checkpoint(p, &train, position);
      };
      // A full disk at the end must not lose the run: the final checkpoint then goes elsewhere,
      // named in the error (a collective write cannot be repeated by rank 0 alone).
      const std::filesystem::path final_path = final_checkpoint_path(options_.checkpoint_dir);
      if (optimizer_.checkpoint_is_collective()) {
        write(final_path);
      } else {
        write_or_fall_back(
            final_path, "the final checkpoint", {}, write,
            [](const std::filesystem::path& p) {
              return "the trained run is in " + p.string() + ": resume from it (--resume " +
                     p.string() + ") once there is room in the checkpoint folder";
            },
            "free disk space, or give --checkpoint-dir on another disk");
      }
    }
  }
  result.stop_signal = stop_signal_;
  watching_signals_ = false;
  resumed_ = false;
  result.steps = step_;
  result.seconds = seconds_since(start);
  result.eval_seconds = fit_eval_s_;
  if (!result.log.empty()) result.final_loss = result.log.back().loss;
  notify([&](StepObserver& o) { o.on_fit_end(result); }, /*erase_bar=*/true);
  return result;
}

EvalResult Trainer::evaluate(data::BatchSource& data, int64_t max_samples) {
  STOKER_CHECK(max_samples >= 0, "Trainer::evaluate: max_samples ", max_samples,
               " must be >= 0 (0: the whole source)");
  optimizer_.flush();  // evaluate the weights after the last step's update
  const bool was_training = model_.training();
  model_.set_training(false);
  nn::NoSaveScope no_save;  // no backward follows: keep no activations
  data.start_epoch(0);
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0, predictions = 0;
  bool classification = true;
  data::Batch batch;
  while ((max_samples == 0 || r.samples < max_samples) && data.next(batch)) {
    const Tensor y = model_.forward(batch.input);
    const Tensor l = loss_.forward(y, batch.target);
    loss_sum += l.item() * static_cast<double>(batch.size);
    classification = classification && loss_.predictions_are_scores() && y.rank() == 2 &&
                     (batch.target.dtype() == DType::i32 || batch.target.dtype() == DType::i64);
    if (classification) {
      const std::vector<float> logits = y.to_floats();
      const std::vector<float> target = batch.target.to_floats();
      const int64_t classes = y.size(1);
      for (int64_t i = 0; i < y.size(0); ++i) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (logits[i * classes + c] > logits[i * classes + best]) best = c;
        correct += best == static_cast<int64_t>(target[i]);
      }
      predictions += y.size(0);  // a language model predicts every position of a sample
    }
    r.samples += batch.size;
  }
  model_.set_training(was_training);
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    if (classification && predictions > 0)
      r.accuracy = static_cast<double>(correct) / static_cast<double>(predictions);
  }
  return r;
}

void Trainer::save_checkpoint(const std::filesystem::path& path,
                              const data::BatchSource* source) const {
  write_checkpoint(path, source);
}

void Trainer::write_checkpoint(const std::filesystem::path& path, const data::BatchSource* source,
                               std::optional<CheckpointPosition> position) const {
  if (!main_rank() && !optimizer_.checkpoint_is_collective()) return;  // rank 0 writes
  optimizer_.flush();  // weights and optimizer state of the same step
  std::vector<NamedTensor> tensors;
  model_.visit_parameters("", [&](const std::string& n, nn::Parameter& p) {
    tensors.push_back({"model." + n, p.value()});
  });
  model_.visit_buffers("", [&](const std::string& n, Tensor& t) {
    tensors.push_back({"buffer." + n, t});
  });
  // A sharded (ZeRO-1) optimizer gathers its state here: every rank takes part, rank 0 writes.
  for (auto& [n, t] : optimizer_.checkpoint_state()) tensors.push_back({"optim." + n, t});
  if (optimizer_.checkpoint_is_collective() && !main_rank()) return;
  if (scaler_)
    for (auto& [n, t] : scaler_->state()) tensors.push_back({"scaler." + n, t});

  nlohmann::json gens = nlohmann::json::object();
  model_.visit_generators("", [&](const std::string& n, Generator& g) {
    gens[n] = {std::to_string(g.seed()), std::to_string(g.offset())};
  });
  // The position in the epoch, also as its world-size-independent progress (elastic resume).
  int64_t epoch = 0, batch = 0, progress = -1;
  if (position) {
    epoch = position->epoch;
    batch = position->batch;
    progress = position->progress;
  } else if (source) {
    epoch = std::max<int64_t>(0, source->epoch());
    batch = source->batch_index();
    progress = source->epoch_progress();
    if (source->batches_per_epoch() >= 0 && batch >= source->batches_per_epoch()) {
      ++epoch;
      batch = 0;
      progress = 0;
    }
  }
  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  std::filesystem::create_directories(dir);
  remove_leftover_temporaries(dir);
  // save_safetensors adds the tensors' checksums (kChecksumsKey).
  save_safetensors(
      path, tensors,
      {{"stoker.kind", "training-checkpoint"},
       {"stoker.checkpoint_version", std::to_string(kCheckpointVersion)},
       {"stoker.data",
        recorded_run_json(world_size(), source ? source->identity() : data::SourceIdentity{})},
       {"stoker.step", std::to_string(step_)},
       {"stoker.epoch_progress", std::to_string(progress)},
       {"stoker.epoch", std::to_string(epoch)},
       {"stoker.batch_index", std::to_string(batch)},
       {"stoker.optimizer_steps", std::to_string(optimizer_.steps())},
       {"stoker.evaluated_step", std::to_string(evaluated_step_)},
       {"stoker.generators", gens.dump()},
       {"stoker.model", model_.describe()},
       {"stoker.optimizer", optimizer_.describe()},
       // The run's progress in samples and the schedule's clock (elastic resume), and what
       // defines the run (compared by resume(): train/run_settings.h).
       {"stoker.samples_seen", std::to_string(samples_seen_)},
       {"stoker.schedule",
        nlohmann::json{{"position", schedule_position()},
                       {"total_steps", options_.schedule ? options_.schedule->total_steps : -1},
                       {"global_batch", schedule_batch_},
                       {"rebased", schedule_rebased_}}
            .dump()},
       {"stoker.run", nlohmann::json{{"grad_accum_steps", options_.grad_accum_steps}}.dump()},
       {"stoker.settings", run_settings_json(options_.run_settings)}});
}

void Trainer::resume(const std::filesystem::path& path) {
  // The loaded weights leave the half copies stale, which a replay would not see: capture again
  // after an eager step.
  if (graph_) graph_->reset();
  graph_warm_steps_ = 0;
  graph_eager_ = false;
  const SafetensorsReader reader(path);
  const std::string file = path.string();
  const auto& meta = reader.metadata();
  auto meta_int = [&](const std::string& key) -> int64_t {
    const auto it = meta.find(key);
    STOKER_CHECK(it != meta.end(), file, " is not a stoker training checkpoint (no ", key,
                 " in its metadata); to load weights only, use SafetensorsReader");
    try {
      return std::stoll(it->second);
    } catch (const std::exception&) {
      STOKER_THROW(file, ": metadata ", key, " = '", it->second, "' is not an integer");
    }
  };
  // Everything is read and checked before anything changes: a damaged or foreign file leaves
  // this Trainer as it was.
  const int64_t step = meta_int("stoker.step");
  const int64_t epoch = meta_int("stoker.epoch");
  const int64_t batch = meta_int("stoker.batch_index");
  const int64_t progress =
      meta.count("stoker.epoch_progress") ? meta_int("stoker.epoch_progress") : -1;
  const int64_t optimizer_steps = meta_int("stoker.optimizer_steps");
  const int64_t evaluated_step =
      meta.count("stoker.evaluated_step") ? meta_int("stoker.evaluated_step") : -1;
  const int64_t version =
      meta.count("stoker.checkpoint_version") ? meta_int("stoker.checkpoint_version") : 1;
  STOKER_CHECK_HINT(version >= 1 && version <= kCheckpointVersion,
                    "resume it with the (newer) stoker build that wrote it", "checkpoint ", file,
                    " has version ", version, "; this build reads versions 1 to ",
                    kCheckpointVersion);
  int recorded_world = -1;
  data::SourceIdentity recorded;
  if (const auto it = meta.find("stoker.data"); it != meta.end())
    parse_recorded_run(file, it->second, recorded_world, recorded);
  // The run's progress and settings (older checkpoints: derived, or not compared).
  int64_t samples_seen =
      meta.count("stoker.samples_seen") ? meta_int("stoker.samples_seen") : int64_t{-1};
  double schedule_pos = static_cast<double>(step);
  int64_t schedule_batch = 0;
  bool schedule_rebased = false;
  int recorded_accum = -1;
  std::map<std::string, std::string> recorded_settings;
  try {
    if (const auto it = meta.find("stoker.schedule"); it != meta.end()) {
      const nlohmann::json j = nlohmann::json::parse(it->second);
      schedule_pos = j.at("position").get<double>();
      schedule_batch = j.at("global_batch").get<int64_t>();
      schedule_rebased = j.at("rebased").get<bool>();
    }
    if (const auto it = meta.find("stoker.run"); it != meta.end())
      recorded_accum = nlohmann::json::parse(it->second).at("grad_accum_steps").get<int>();
  } catch (const std::exception& e) {
    STOKER_THROW(file,
                 ": metadata stoker.schedule or stoker.run is not a valid record of the run (",
                 e.what(), "): the header is damaged");
  }
  if (const auto it = meta.find("stoker.settings"); it != meta.end())
    recorded_settings = parse_run_settings(file, it->second);
  const int world = world_size();
  const int64_t b = recorded.batch_size;
  const int64_t k_then = recorded_accum > 0 ? recorded_accum : options_.grad_accum_steps;
  const int w_then = recorded_world > 0 ? recorded_world : world;
  if (samples_seen < 0 && b > 0) samples_seen = step * b * k_then * w_then;
  if (schedule_batch <= 0 && b > 0) schedule_batch = b * k_then * w_then;
  // Settings that break the run's meaning are refused before anything is loaded (every
  // checkpoint of the run would refuse the same way: no fallback to an older one).
  const GlobalBatches batches{.then = b > 0 && recorded_accum > 0 ? b * k_then * w_then : -1,
                              .now = b > 0 ? b * options_.grad_accum_steps * world : -1,
                              .world_then = w_then,
                              .world_now = world};
  const SettingsComparison changes =
      compare_run_settings(recorded_settings, options_.run_settings, batches);
  if (!changes.refusal.empty())
    throw ChangedRunError(core::detail::str("checkpoint ", file, ": ", changes.refusal),
                          core::detail::where(__FILE__, __LINE__), changes.hint);
  const std::string damaged_hint =
      "an earlier step_N.safetensors of the run (TrainerOptions::checkpoint_interval) or a copy "
      "of this file resumes instead";
  STOKER_CHECK_HINT(version < 2 || reader.has_checksums(), damaged_hint, "checkpoint ", file,
                    " is version ", version, " but has no ", kChecksumsKey,
                    ": the header is damaged");
  for (const std::string& name : reader.names()) {
    const SafetensorsReader::ChecksumCheck c = reader.check_checksum(name);
    STOKER_CHECK_HINT(c.ok(), damaged_hint, "checkpoint ", file, ": tensor ", name,
                      " fails its checksum (stored ", util::checksum_hex(c.expected), ", computed ",
                      util::checksum_hex(c.computed),
                      "): the file is damaged; resume from an earlier checkpoint");
  }
  nlohmann::json gens;
  try {
    gens = nlohmann::json::parse(meta.count("stoker.generators") ? meta.at("stoker.generators")
                                                                 : std::string("{}"));
  } catch (const nlohmann::json::exception& e) {
    STOKER_THROW(file, ": metadata stoker.generators is not valid JSON (", e.what(), ")");
  }
  model_.visit_generators("", [&](const std::string& n, Generator&) {
    STOKER_CHECK(gens.contains(n) && gens[n].is_array() && gens[n].size() == 2 &&
                     gens[n][0].is_string() && gens[n][1].is_string(),
                 file, ": no saved position for generator '", n, "'");
  });

  step_ = step;
  resume_epoch_ = epoch;
  resume_batch_ = batch;
  optimizer_.set_steps(optimizer_steps);
  model_.visit_parameters("", [&](const std::string& n, nn::Parameter& p) {
    reader.load_into("model." + n, p.value());
    p.value_changed();
  });
  model_.visit_buffers(
      "", [&](const std::string& n, Tensor& t) { reader.load_into("buffer." + n, t); });
  optimizer_.load_checkpoint_state(
      [&](const std::string& n, Device device) { return reader.load("optim." + n, device); });
  const std::vector<std::string> names = reader.names();
  const bool has_scaler = scaler_ && !scaler_->state().empty() &&
                          std::find(names.begin(), names.end(),
                                    "scaler." + scaler_->state().front().first) != names.end();
  // A checkpoint of another precision (allowed, with a note) has no loss scale: fp16 starts
  // from the scaler's initial one.
  if (has_scaler) {
    std::vector<std::pair<std::string, Tensor>> sstate;
    for (auto& [n, t] : scaler_->state())
      sstate.emplace_back(n, reader.load("scaler." + n, t.device()));
    scaler_->load_state(sstate);
  }
  model_.visit_generators("", [&](const std::string& n, Generator& g) {
    try {
      g = Generator(std::stoull(gens[n][0].get<std::string>()),
                    std::stoull(gens[n][1].get<std::string>()));
    } catch (const std::exception&) {
      STOKER_THROW(file, ": the saved position of generator '", n, "' is not two integers");
    }
  });
  for (nn::Parameter* p : params_) p->zero_grad();
  resume_path_ = path;
  resume_evaluated_step_ = evaluated_step;
  resume_world_size_ = recorded_world;
  resume_progress_ = progress;
  resume_identity_ = recorded;
  resume_accum_ = recorded_accum;
  samples_seen_ = std::max<int64_t>(0, samples_seen);
  schedule_batch_ = schedule_batch;
  schedule_rebased_ = schedule_rebased || (recorded_world > 0 && recorded_world != world);
  schedule_pos0_ = schedule_rebased_ ? schedule_pos : static_cast<double>(step);
  schedule_samples0_ = samples_seen_;
  schedule_rate_ = 0;  // set by the next fit() (plan_fit)
  resumed_ = true;
  if (main_rank()) {
    for (const std::string& note : changes.notes)
      std::fprintf(stderr, "resume: %s\n", note.c_str());
    if (scaler_ && !has_scaler)
      std::fprintf(stderr,
                   "resume: %s holds no fp16 loss scale (written in another precision); the "
                   "scale starts again from its initial value\n",
                   file.c_str());
  }
}

std::optional<std::filesystem::path> Trainer::resume_latest(const std::filesystem::path& dir) {
  std::vector<std::string> unreadable;
  const std::vector<CheckpointFile> files = list_checkpoints(dir, &unreadable);
  for (const std::string& u : unreadable)
    std::fprintf(stderr, "checkpoint: left out, its header cannot be read: %s\n", u.c_str());
  STOKER_CHECK_HINT(!files.empty() || unreadable.empty(),
                    "copy the folder again from where it was written, or start a new run in an "
                    "empty folder",
                    "no checkpoint of ", dir.string(), " can be resumed: ", unreadable.size(),
                    " file", unreadable.size() == 1 ? " has" : "s have",
                    " a checkpoint's name but no readable header (named above)");
  std::string failures;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      resume(it->path);
      return it->path;
    } catch (const ChangedRunError&) {
      throw;  // the run's settings changed: an older checkpoint would refuse the same way
    } catch (const Error& e) {
      std::fprintf(stderr, "checkpoint: %s does not resume (%s)%s\n", it->path.string().c_str(),
                   e.what(), std::next(it) != files.rend() ? "; trying the one before it" : "");
      failures += core::detail::str("\n  ", it->path.string(), ": ", e.what());
    }
  }
  if (files.empty()) return std::nullopt;
  STOKER_CHECK_HINT(false, "start a new run in another folder, or copy the checkpoints again",
                    "none of the ", files.size(), " checkpoints of ", dir.string(),
                    " resumes:", failures);
  return std::nullopt;
}

void Trainer::resume_position(data::BatchSource& train) {
  const int world = world_size();
  const bool elastic = resume_world_size_ >= 0 && resume_world_size_ != world;
  // Inside an epoch, continue from its progress whenever it was recorded: at the same world size
  // that is the exact position too, and an epoch that was itself continued (after an earlier
  // elastic resume) is not the plain epoch restore() would give.
  if (resume_batch_ == 0 || resume_progress_ < 0) {
    train.restore(resume_epoch_, resume_batch_);  // same world size: check_resumed_run said so
  } else if (!elastic && !train.continue_epoch(resume_epoch_, resume_progress_)) {
    train.restore(resume_epoch_, resume_batch_);  // a source that cannot continue epochs
  } else if (elastic) {
    STOKER_CHECK_HINT(
        train.continue_epoch(resume_epoch_, resume_progress_),
        core::detail::str(
            "resume with ", resume_world_size_,
            " ranks as the run that wrote it, or from a checkpoint at an epoch's end"),
        "checkpoint ", resume_path_.string(), ": the data source (", train.kind(),
        ") cannot continue epoch ", resume_epoch_, " of a run of ", resume_world_size_,
        " ranks on ", world, " ranks (BatchSource::continue_epoch)");
  }
  if (!elastic || !main_rank() || options_.quiet) return;
  const int64_t b = train.identity().batch_size;
  const int64_t k = options_.grad_accum_steps;
  const int64_t k_then = resume_accum_ > 0 ? resume_accum_ : k;
  std::printf(
      "resume: %s was written by %d rank%s, this job has %d. %s; the epochs after it are those "
      "of a %d-rank run. The per-rank batch%s is kept and grad_accum_steps is %lld, so the global "
      "batch is %s (the learning-rate schedule follows the samples seen, see below).\n",
      resume_path_.string().c_str(), resume_world_size_, resume_world_size_ == 1 ? "" : "s", world,
      resume_batch_ == 0
          ? core::detail::str("It starts at the beginning of epoch ", resume_epoch_).c_str()
          : core::detail::str("Epoch ", resume_epoch_,
                              " continues with the samples the old ranks had not delivered (",
                              resume_progress_, " of its order were), shared by ", world, " ranks")
                .c_str(),
      world, b >= 0 ? core::detail::str(" (", b, ")").c_str() : "", static_cast<long long>(k),
      b >= 0
          ? core::detail::str(world * b * k, " (was ", resume_world_size_ * b * k_then, ")").c_str()
          : core::detail::str(world * k, "/", resume_world_size_ * k_then, " of the old one")
                .c_str());
  std::fflush(stdout);
}

float Trainer::scheduled_lr() const {
  if (!schedule_rebased_) return options_.schedule->lr_at(step_);
  // The step's learning rate is the schedule's at the step its end reaches (rounded up): an
  // uninterrupted run's step s ends at position s + 1 and takes lr_at(s); the last step of a
  // rebased run ends at the schedule's end and takes lr_at(total_steps - 1), as the
  // uninterrupted run's last step does. The small margin keeps rounding from moving a step.
  const double end =
      schedule_pos0_ +
      static_cast<double>(samples_seen_ + step_samples_ - schedule_samples0_) * schedule_rate_;
  int64_t at = static_cast<int64_t>(std::ceil(end - 1e-6)) - 1;
  const int64_t total = options_.schedule->total_steps;
  if (total > 0) at = std::min(at, total - 1);
  return options_.schedule->lr_at(std::max<int64_t>(0, at));
}

double Trainer::schedule_position() const {
  if (!schedule_rebased_) return static_cast<double>(step_);
  return schedule_pos0_ + static_cast<double>(samples_seen_ - schedule_samples0_) * schedule_rate_;
}

bool Trainer::max_steps_reached() const {
  if (options_.max_steps < 0) return false;
  // Rebased: the samples of max_steps steps of the run's first global batch.
  if (schedule_rebased_ && schedule_batch_ > 0)
    return samples_seen_ >= options_.max_steps * schedule_batch_;
  return step_ >= options_.max_steps;
}

void Trainer::plan_fit(const data::BatchSource& train, int64_t epochs, bool positioned_first) {
  const int world = world_size();
  const int64_t k = options_.grad_accum_steps;
  const int64_t b = train.identity().batch_size;
  const int64_t global = b > 0 ? b * k * world : -1;
  if (schedule_batch_ <= 0 && global > 0) schedule_batch_ = global;
  if (!schedule_rebased_) return;  // fit_total_steps_ as fit() counted it: by step
  // Every rank's samples left until the epochs end (the resumed epoch from where it now stands,
  // then whole epochs of this world size), and the steps they make.
  const int64_t bpe = train.batches_per_epoch();
  const int64_t first = positioned_first ? resume_epoch_ : 0;
  int64_t left = -1, steps_left = -1;
  if (bpe >= 0 && b > 0) {
    const int64_t first_left =
        positioned_first ? std::max<int64_t>(0, bpe - train.batch_index()) : bpe;
    const int64_t after = std::max<int64_t>(0, epochs - first - 1);
    const bool any = first < epochs;
    left = any ? (first_left + after * bpe) * b * world : 0;
    steps_left = any ? (first_left + k - 1) / k + after * ((bpe + k - 1) / k) : 0;
  }
  if (options_.max_steps >= 0 && schedule_batch_ > 0) {
    const int64_t to_max =
        std::max<int64_t>(0, options_.max_steps * schedule_batch_ - samples_seen_);
    if (left < 0 || to_max < left) {
      left = to_max;
      steps_left = global > 0 ? (to_max + global - 1) / global : -1;
    }
  }
  fit_total_steps_ = steps_left >= 0 ? step_ + steps_left : -1;
  // The schedule spans the run's samples: a step that ends at s of the run's S samples takes
  // it at total_steps * s / S (whatever the world size, and however the program spans it:
  // over its steps at this world size, or over steps of the first segment's batch). A schedule
  // without an end goes on at one of its steps per global batch of the run's first segment.
  schedule_pos0_ = schedule_position();
  schedule_samples0_ = samples_seen_;
  const int64_t total = options_.schedule ? options_.schedule->total_steps : -1;
  const bool spread = total > 0 && left > 0;
  if (spread) {
    const double run_samples = static_cast<double>(samples_seen_ + left);
    schedule_pos0_ = static_cast<double>(total) * static_cast<double>(samples_seen_) / run_samples;
    schedule_rate_ = static_cast<double>(total) / run_samples;
  } else {
    schedule_rate_ = schedule_batch_ > 0 ? 1.0 / static_cast<double>(schedule_batch_) : 0.0;
  }
  if (!main_rank() || options_.quiet) return;
  std::printf(
      "resume: the run has seen %lld samples; %s, so this job ends at step %s%s.\n",
      static_cast<long long>(samples_seen_),
      left >= 0
          ? core::detail::str(left, " are left (", steps_left, " steps of ", global, ")").c_str()
          : "the samples left are not known",
      fit_total_steps_ >= 0 ? std::to_string(fit_total_steps_).c_str() : "(unknown)",
      !options_.schedule ? ""
      : spread ? core::detail::str("; the learning-rate schedule continues from its step ",
                                   schedule_pos0_, " of ", total, " and reaches its end there")
                     .c_str()
               : core::detail::str("; the learning-rate schedule continues from its step ",
                                   schedule_pos0_, ", one step per ", schedule_batch_, " samples")
                     .c_str());
  std::fflush(stdout);
}

void Trainer::check_resumed_run(const data::BatchSource& source) const {
  const std::string ckpt = "checkpoint " + resume_path_.string();
  const std::string new_run = "or start a new run with another checkpoint_dir";
  const int world = world_size();
  // Another world size continues the epoch from its progress (resume_position), which a
  // checkpoint taken inside an epoch must have recorded.
  STOKER_CHECK_HINT(
      resume_world_size_ < 0 || resume_world_size_ == world || resume_batch_ == 0 ||
          resume_progress_ >= 0,
      core::detail::str("resume with ", resume_world_size_,
                        " ranks as the run that wrote it (stoker launch --nproc-per-node), or "
                        "from a checkpoint at an epoch's end, ",
                        new_run),
      ckpt, " was written by ", resume_world_size_, " rank", resume_world_size_ == 1 ? "" : "s",
      " inside epoch ", resume_epoch_, " without the epoch's progress (a source that cannot say ",
      "which samples it delivered, or an older build), so ", world, " rank", world == 1 ? "" : "s",
      " cannot continue it");
  const data::SourceIdentity now = source.identity();
  const data::SourceIdentity& then = resume_identity_;
  STOKER_CHECK_HINT(then.batch_size < 0 || now.batch_size < 0 || then.batch_size == now.batch_size,
                    core::detail::str("resume with batch size ", then.batch_size,
                                      " as the run that wrote it (--batch ", then.batch_size,
                                      " in the examples), ", new_run),
                    ckpt, ": the batch size differs: the run that wrote it took batches of ",
                    then.batch_size, " samples per rank, this one ", now.batch_size);
  STOKER_CHECK_HINT(
      !then.seed || !now.seed || *then.seed == *now.seed,
      core::detail::str("resume with seed ", then.seed.value_or(0),
                        " as the run that wrote it (--seed in the examples), ", new_run),
      ckpt, ": the data seed differs: the run that wrote it drew its order from seed ",
      then.seed.value_or(0), ", this one from seed ", now.seed.value_or(0));
  const auto where = [](const data::SourceIdentity& id) {
    return id.location.empty() ? std::string() : " at " + id.location;
  };
  const std::string same_data = "resume on the data the run was trained on, " + new_run;
  STOKER_CHECK_HINT(then.samples < 0 || now.samples < 0 || then.samples == now.samples, same_data,
                    ckpt, ": the dataset differs: the run that wrote it read ", then.samples,
                    " samples", where(then), ", this one ", now.samples, where(now));
  STOKER_CHECK_HINT(
      then.fingerprint.empty() || now.fingerprint.empty() || then.fingerprint == now.fingerprint,
      same_data, ckpt, ": the dataset differs: the run that wrote it read ", then.fingerprint,
      where(then), ", this one ", now.fingerprint, where(now));
}

}  // namespace stoker::train
