#include "stoker/train/trainer.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "diag/replay_source.h"
#include "dist/local_grad_sync.h"
#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/core/stream.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/containers.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "stoker/train/checkpoint_files.h"
#include "train/checkpoint_observer.h"
#include "train/diagnostics_observer.h"
#include "train/eta.h"
#include "train/log_printer.h"
#include "train/metrics_observer.h"
#include "train/oom_registry.h"
#include "train/precision_setup.h"
#include "train/progress_observer.h"
#include "train/step_graph.h"
#include "train/trainer_impl.h"
#include "util/progress_bar.h"
#include "util/stop_signal.h"

namespace stoker::train {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
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

Trainer::Impl::Impl(Trainer& self, nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer,
                    TrainerOptions options)
    : model_(model), loss_(loss), optimizer_(optimizer), options_(std::move(options)), self_(self) {
  STOKER_CHECK(options_.grad_accum_steps >= 1, "TrainerOptions: grad_accum_steps ",
               options_.grad_accum_steps, " must be >= 1");
  STOKER_CHECK(options_.log_interval >= 1, "TrainerOptions: log_interval ", options_.log_interval,
               " must be >= 1");
  STOKER_CHECK(options_.clip_grad_norm >= 0.0f, "TrainerOptions: clip_grad_norm ",
               options_.clip_grad_norm, " must be >= 0 (0 disables clipping)");
  if (options_.cuda_graph) check_graph_options(options_, optimizer, model.device());
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
  STOKER_CHECK(!params_.empty(), "Trainer: the model ", model_.describe(), " has no parameters");
  scaler_ = apply_precision(options_.precision, options_.scaler, model_, loss_, optimizer_);
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
  register_trainer(&self_);
}

Trainer::Impl::~Impl() { unregister_trainer(&self_); }

const diag::Diagnostics* Trainer::Impl::diagnostics() const {
  return diag_ ? &diag_->diagnostics() : nullptr;
}

void Trainer::Impl::add_observer(StepObserver& observer) { observers_.push_back(&observer); }

void Trainer::Impl::add_log_callback(Callback cb) {
  owned_observers_.push_back(std::make_unique<LogCallbackObserver>(std::move(cb)));
  observers_.push_back(owned_observers_.back().get());
}

void Trainer::Impl::add_eval_callback(EvalCallback cb) {
  owned_observers_.push_back(std::make_unique<EvalCallbackObserver>(std::move(cb)));
  observers_.push_back(owned_observers_.back().get());
}

template <typename Event>
void Trainer::Impl::notify(Event&& event, bool erase_bar) {
  for (size_t i = 0; i < observers_.size(); ++i) {
    if (erase_bar && i == builtin_observers_) bar_->clear();
    event(*observers_[i]);
  }
}

void Trainer::Impl::phase(diag::Phase p) {
  if (capturing_) return;  // a CUDA graph's step: one span to the diagnostics
  notify([p](StepObserver& o) { o.on_phase(p); });
}

void Trainer::Impl::micro_step(const data::Batch& batch, int k) {
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

void Trainer::Impl::apply_step(int micro, int k, bool want_norm) {
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

bool Trainer::Impl::main_rank() const { return sync_->rank() == 0; }

int Trainer::Impl::world_size() const { return sync_->world_size(); }

dist::Communicator* Trainer::Impl::communicator() const { return sync_->communicator(); }

void Trainer::Impl::ensure_step_state() {
  const Device device = model_.device();
  if (!monitor_.defined() || monitor_.device() != device)
    monitor_ = ops::loss_monitor_create(device);
  if (!step_loss_.defined() || step_loss_.device() != device)
    step_loss_ = Tensor::zeros({}, DType::f32, device);
}

void Trainer::Impl::run_step(data::BatchSource& train, bool& epoch_done, int64_t& samples) {
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

void Trainer::Impl::train_step(std::span<const data::Batch> micro_batches) {
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

size_t Trainer::Impl::cuda_graph_nodes() const { return graph_ ? graph_->node_count() : 0; }

void Trainer::Impl::eager_step(std::span<const data::Batch> batches, int micro, int k,
                               bool want_norm) {
  for (int i = 0; i < micro; ++i) {
    sync_->set_sync(i == micro - 1);
    micro_step(batches[static_cast<size_t>(i)], k);
  }
  apply_step(micro, k, want_norm);
}

StepStats Trainer::Impl::log_window(int64_t epoch, int64_t samples, double seconds, int64_t steps) {
  const ops::LossMonitorState s = ops::loss_monitor_read(monitor_, /*reset=*/true);
  if (s.first_bad_step >= 0 && !options_.continue_on_nan) {
    STOKER_THROW("training stopped: the loss became NaN/Inf at step ", s.first_bad_step,
                 s.last_finite_step >= 0 ? fmt::format(" (last finite loss {:g} at step {})",
                                                       s.last_finite_loss, s.last_finite_step)
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
    const Tensor v = Tensor::from_floats(values, {static_cast<int64_t>(values.size())}, DType::f32,
                                         comm->device());
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

EvalRecord Trainer::Impl::evaluate_in_fit(data::BatchSource& validation, int64_t epoch) {
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

FitResult Trainer::Impl::fit(data::BatchSource& source, int64_t epochs,
                             data::BatchSource* validation) {
  STOKER_CHECK(epochs >= 0, "Trainer::fit: epochs ", epochs, " must be >= 0");
  STOKER_CHECK(options_.checkpoint_interval >= 0 && options_.checkpoint_interval_seconds >= 0 &&
                   options_.keep_last >= 0,
               "TrainerOptions: checkpoint_interval ", options_.checkpoint_interval,
               ", checkpoint_interval_seconds ", options_.checkpoint_interval_seconds,
               " and keep_last ", options_.keep_last, " must be >= 0");
  STOKER_CHECK(options_.evaluation.every_steps >= 0 && options_.evaluation.max_samples >= 0,
               "TrainerOptions::evaluation: every_steps ", options_.evaluation.every_steps,
               " and max_samples ", options_.evaluation.max_samples, " must be >= 0");
  if (resumed_) resumed_->check_run(source, world_size());
  const std::optional<TrainingCheckpoint> resumed = resumed_;  // taken apart below
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
  const int64_t first_epoch = resumed ? resumed->position.epoch : 0;
  // A resumed run is positioned before anything else (not at the start of its epoch below), so
  // that the steps it has left and the schedule's rebase are known before the first step.
  const bool positioned_first = resumed && first_epoch < epochs;
  if (positioned_first)
    resumed->position_source(train, world_size(), options_.grad_accum_steps,
                             main_rank() && !options_.quiet);
  plan_fit(train, epochs, positioned_first);
  stop_requested_ = false;
  // A run owns its outputs (train/run_lock.h): rank 0 locks them for the fit, before its first
  // step (a program that locked them already shares its lock).
  std::vector<std::shared_ptr<RunLock>> output_locks;
  if (main_rank() && !options_.checkpoint_dir.empty()) {
    core::check_output_dir(options_.checkpoint_dir, "TrainerOptions::checkpoint_dir");
    output_locks.push_back(RunLock::acquire(
        RunLock::dir_lock_path(options_.checkpoint_dir),
        "TrainerOptions::checkpoint_dir " + options_.checkpoint_dir.string(), "checkpoint_dir"));
  }
  if (main_rank() && !options_.metrics_path.empty()) {
    core::check_output_path(options_.metrics_path, "TrainerOptions::metrics_path");
    output_locks.push_back(RunLock::acquire(
        RunLock::file_lock_path(options_.metrics_path),
        "TrainerOptions::metrics_path " + options_.metrics_path.string(), "metrics_path"));
  }
  // Preemption: the stop signals only set a flag, read after each step (see log_window).
  std::optional<util::StopSignalGuard> signals;
  if (!options_.stop_signals.empty()) signals.emplace(options_.stop_signals);
  watching_signals_ = signals.has_value();
  stop_signal_ = 0;
  notify([&](StepObserver& o) {
    o.on_fit_begin({.trainer = self_,
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
                    .resumed = resumed.has_value(),
                    .resumed_from = resumed ? resumed->path : std::filesystem::path(),
                    .resumed_evaluated = resumed && resumed->evaluated_step == step_});
  });
  auto window_start = start;
  double window_eval_s = 0;  // evaluation inside the window: not the steps' time
  int64_t window_samples = 0, window_steps = 0;
  int64_t epoch_now = first_epoch;
  // The evaluation at the resumed step is done when the checkpoint says so (it was written after
  // it); one that was due there but came after the checkpoint runs first.
  evaluated_step_ = resumed ? resumed->evaluated_step : -1;
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
  if (resumed && step_ > 0) {
    const int64_t every = options_.evaluation.every_steps;
    const bool at_epoch_end = resumed->position.batch == 0;
    const bool due = every > 0 ? step_ % every == 0 : at_epoch_end;
    if (due) evaluate_now(first_epoch > 0 && at_epoch_end ? first_epoch - 1 : first_epoch);
  }

  for (int64_t epoch = first_epoch; epoch < epochs && !stop; ++epoch) {
    epoch_now = epoch;
    if (!(positioned_first && epoch == first_epoch))  // else positioned above
      train.start_epoch(epoch);
    positioned = true;
    resumed_.reset();
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
          // Where fit() ends when no epoch ran (a resumed run that is complete): where it resumed.
          positioned || !resumed ? std::nullopt : std::optional(resumed->position);
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
  resumed_.reset();
  result.steps = step_;
  result.seconds = seconds_since(start);
  result.eval_seconds = fit_eval_s_;
  if (!result.log.empty()) result.final_loss = result.log.back().loss;
  notify([&](StepObserver& o) { o.on_fit_end(result); }, /*erase_bar=*/true);
  return result;
}

}  // namespace stoker::train
