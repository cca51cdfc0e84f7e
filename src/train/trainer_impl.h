// Trainer::Impl: the Trainer's state and the steps of its loop. include/stoker/train/trainer.h
// is the public face (its methods forward here); the loop is in trainer.cpp, checkpoints in
// trainer_checkpoint.cpp, the schedule in trainer_schedule.cpp, evaluation in evaluation.cpp,
// the CUDA-graph step in step_graph.cpp and the memory report in memory_report.cpp.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "stoker/train/trainer.h"

namespace stoker::train {

struct Trainer::Impl {
  Impl(Trainer& self, nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer,
       TrainerOptions options);
  ~Impl();

  // The public methods (documented in stoker/train/trainer.h).
  FitResult fit(data::BatchSource& train, int64_t epochs, data::BatchSource* validation = nullptr);
  EvalResult evaluate(data::BatchSource& data, int64_t max_samples = 0);

  void save_checkpoint(const std::filesystem::path& path, const data::BatchSource* source) const;
  void resume(const std::filesystem::path& path);
  std::optional<std::filesystem::path> resume_latest(const std::filesystem::path& dir);

  int64_t step() const { return step_; }
  int64_t samples_seen() const { return samples_seen_; }
  void request_stop() { stop_requested_ = true; }
  size_t cuda_graph_nodes() const;
  const amp::GradScaler* scaler() const { return scaler_.get(); }

  void train_step(std::span<const data::Batch> micro_batches);

  MemoryReport memory_report() const;
  MemorySettings memory_settings() const;

  const diag::Diagnostics* diagnostics() const;

  void add_observer(StepObserver& observer);
  void add_log_callback(Callback cb);
  void add_eval_callback(EvalCallback cb);

  // The loop's parts.
  void run_step(data::BatchSource& train, bool& epoch_done, int64_t& samples);
  // Forward, loss and backward of one micro-batch of k; accumulates its loss.
  void micro_step(const data::Batch& batch, int k);
  // Unscale, (norm, clip), schedule, optimizer, zero_grad, scaler update, loss monitor after
  // `micro` of k micro-batches ran.
  void apply_step(int micro, int k, bool want_norm);
  void ensure_step_state();
  // Around a step: the first one measures the activation peak (memory_report).
  bool begin_memory_measure();
  void end_memory_measure(bool measuring);
  // The log line's numbers over the window of `steps` steps (reads the device; on every rank).
  StepStats log_window(int64_t epoch, int64_t samples, double seconds, int64_t steps);
  // Evaluates on `validation` inside fit() and hands the record to the observers.
  EvalRecord evaluate_in_fit(data::BatchSource& validation, int64_t epoch);
  // Every observer's `event`: the Trainer's own, then the program's (before which the
  // progress bar is erased when `erase_bar`).
  template <typename Event>
  void notify(Event&& event, bool erase_bar = false);
  // The step enters phase `p` (diagnostics).
  void phase(diag::Phase p);
  // Rank 0 of a data-parallel job, or a single process: the one that prints and saves.
  bool main_rank() const;
  int world_size() const;
  // The job's communicator (nullptr: a single process).
  dist::Communicator* communicator() const;
  // save_checkpoint; `position`: where the run stands when the source cannot say (a fit() that
  // ran no epoch).
  void write_checkpoint(const std::filesystem::path& path, const data::BatchSource* source,
                        std::optional<CheckpointPosition> position = std::nullopt) const;

  nn::Module& model_;
  nn::Loss& loss_;
  optim::Optimizer& optimizer_;
  TrainerOptions options_;
  std::vector<nn::Parameter*> params_;
  // Observers: the Trainer's own first (owned, builtin_observers_ of them), then the program's.
  std::unique_ptr<util::ProgressBar> bar_;
  std::vector<std::unique_ptr<StepObserver>> owned_observers_;
  std::vector<StepObserver*> observers_;
  size_t builtin_observers_ = 0;
  DiagnosticsObserver* diag_ = nullptr;         // one of owned_observers_, when diagnostics are on
  std::unique_ptr<dist::GradSync> local_sync_;  // when options_.grad_sync is null
  dist::GradSync* sync_ = nullptr;              // options_.grad_sync or local_sync_

  int64_t step_ = 0;
  // The checkpoint resume() restored, until the next fit() continues from it (its position,
  // the run it checks the source against, the evaluation done at its step).
  std::optional<TrainingCheckpoint> resumed_;
  // Progress in samples and the schedule's clock (TrainerOptions::schedule). Rebased (after an
  // elastic resume): the schedule's position after a step is schedule_pos0_ + (samples_seen_ -
  // schedule_samples0_) * schedule_rate_, the rate set at fit()'s start from the samples left.
  int64_t samples_seen_ = 0;
  int64_t step_samples_ = 0;    // the step being done (every rank's), for its learning rate
  int64_t schedule_batch_ = 0;  // global batch of the run's first segment (0: not known yet)
  bool schedule_rebased_ = false;
  double schedule_pos0_ = 0;
  int64_t schedule_samples0_ = 0;
  double schedule_rate_ = 0;
  // The learning rate of the step being done (after step_samples_ is set).
  float scheduled_lr() const;
  // The schedule's position after the steps done so far (the checkpoint records it).
  double schedule_position() const;
  // fit(): whether max_steps is reached (in samples when rebased).
  bool max_steps_reached() const;
  // fit(): after the source is positioned, the steps it ends at and the schedule's rebase.
  void plan_fit(const data::BatchSource& train, int64_t epochs, bool positioned_first);
  Tensor monitor_;                           // loss monitor on the device
  Tensor step_loss_;                         // rank-0 f32 accumulator of the current step's loss
  Tensor grad_norm_;                         // rank-0 f32, the last step's total gradient norm
  std::unique_ptr<amp::GradScaler> scaler_;  // fp16 only
  std::unique_ptr<StepGraph> graph_;         // TrainerOptions::cuda_graph, from the first capture
  bool capturing_ = false;                   // inside the graph's capture: no phase marks
  int graph_warm_steps_ = 0;                 // eager steps run before the first capture
  bool graph_eager_ = false;  // a captured step kept what it allocated: not replayable, eager
  // TrainerOptions::cuda_graph: runs one optimizer step on `batches` (`micro` of k
  // micro-batches) as the graph when it can, else eagerly; returns false when it ran eagerly.
  bool graph_step(std::span<const data::Batch> batches, int micro, int k, bool want_norm);
  // The steps run and the batches' micro-steps, eagerly.
  void eager_step(std::span<const data::Batch> batches, int micro, int k, bool want_norm);
  uint64_t window_max_syncs_ = 0;  // see StepStats::host_syncs_per_step
  double window_data_wait_s_ = 0;  // see StepStats::data_wait_share
  bool memory_measured_ = false;   // the first step's activation peak is known
  bool memory_printed_ = false;    // fit() printed the report
  size_t activations_peak_ = 0;
  size_t last_batch_bytes_ = 0;  // input + target of the last micro-batch on the device
  // The fit() in progress: its start, first step and end, and evaluation's wall time.
  std::chrono::steady_clock::time_point fit_start_{};
  int64_t fit_first_step_ = 0;
  int64_t fit_total_steps_ = -1;
  double fit_eval_s_ = 0.0;
  // The step of the last evaluation inside fit() (-1: none), recorded in checkpoints.
  int64_t evaluated_step_ = -1;
  bool stop_requested_ = false;  // request_stop()
  // TrainerOptions::stop_signals inside fit(): whether they are watched, and the one the job
  // agreed to stop on (0: none yet).
  bool watching_signals_ = false;
  int stop_signal_ = 0;

  Trainer& self_;  // what observers' events name
};

}  // namespace stoker::train
