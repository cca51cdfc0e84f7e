// Trainer: the training loop — micro-batches, exact gradient accumulation, clipping, the
// optimizer step, the learning-rate schedule, logging, evaluation, checkpoints and resume —
// composed from a model, a loss and an optimizer. What a step does and what the loop promises:
// docs/long_runs.md#what-the-trainer-does-in-a-step; checkpoints: docs/checkpointing.md.
//
// Ownership: the model, loss and optimizer are borrowed and must outlive the Trainer; its own
// state lives in Trainer::Impl (private). Thread-safety: none (one thread drives it).
#pragma once

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/amp/precision.h"
#include "stoker/core/allocator.h"
#include "stoker/core/device.h"
#include "stoker/data/batch_source.h"
#include "stoker/diag/report.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/module.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/step_observer.h"
#include "stoker/train/training_checkpoint.h"

// Where a training run's memory goes: a report by category, and ranked advice for when it does
namespace stoker::train {

struct MemoryReport {
  Device device;
  size_t parameters = 0;
  size_t compute_copies = 0;
  size_t gradients = 0;
  size_t optimizer_state = 0;
  size_t optimizer_state_host = 0;  // offloaded optimizer state (host memory; not in persistent())
  size_t input_batch = 0;
  size_t activations_peak = 0;
  size_t loader_pinned = 0;
  size_t workspaces = 0;
  core::MemoryStats allocator;  // memory_stats(device) when the report was made

  // What the run holds between steps (the categories that count in allocator.current_bytes).
  // The input batch is left out: it may be a view of the user's dataset, or already freed.
  size_t persistent() const { return parameters + compute_copies + gradients + optimizer_state; }
  // allocator.current_bytes - persistent() (negative if the categories overcount).
  int64_t unattributed() const {
    return static_cast<int64_t>(allocator.current_bytes) - static_cast<int64_t>(persistent());
  }
};

// What the run could change to need less memory, with the bytes it would roughly save.
struct MemoryAdvice {
  std::string action;  // "enable activation checkpointing (TrainerOptions::...)"
  size_t saves_bytes;  // estimate
};

// The setting the advice depends on (what is already on is not advised again).
struct MemorySettings {
  bool mixed_precision = false;  // bf16/fp16 compute
  bool activation_checkpointing = false;
  bool low_precision_optimizer_state = false;
  int grad_accum_steps = 1;
};

// Advice ranked by estimated savings, largest first: activation checkpointing (about half the
// activations), halving the micro-batch with twice the accumulation (half the activations and
// batch), bf16 compute (half the activations), 8-bit optimizer state (about 72 % of it), on a
// GPU offloading the optimizer state to the CPU (all of it, for step time).
std::vector<MemoryAdvice> memory_advice(const MemoryReport& r, const MemorySettings& s);

// A multi-line table: one line per category with bytes and share of the allocator's current
// bytes, the allocator's current/peak/reserved, and the unattributed rest.
std::string format_memory_report(const MemoryReport& r);
// "1. enable ... (saves ~1.2 GiB)" lines.
std::string format_memory_advice(const std::vector<MemoryAdvice>& advice);

}  // namespace stoker::train

namespace stoker::dist {
class GradSync;
}  // namespace stoker::dist

namespace stoker::util {
class ProgressBar;  // util/progress_bar.h (private)
}  // namespace stoker::util

namespace stoker::diag {
class Diagnostics;  // diag/diagnostics.h (private)
}  // namespace stoker::diag

namespace stoker::train {

class DiagnosticsObserver;  // train/diagnostics_observer.h (private)

// What a log line reports, also handed to callbacks.
struct StepStats {
  int64_t step = 0;  // optimizer steps done
  int64_t epoch = 0;
  double loss = 0.0;  // mean step loss since the previous log
  float lr = 0.0f;
  double grad_norm = -1.0;  // total norm before clipping at the last step (-1: not computed)
  double ms_per_step = 0.0;
  double samples_per_s = 0.0;  // this rank's
  // Data parallelism: ranks in the job and the sum of every rank's samples/s (single process:
  // 1 and samples_per_s).
  int world_size = 1;
  double global_samples_per_s = 0.0;
  double loss_scale = -1.0;  // fp16: the loss scale at log time (-1: no scaler)
  // Most host<->device synchronizations made inside one training step of the window (fetching
  // the batches included; the log's own reads excluded). 0 on a GPU means the host never waited
  // for the device during the steps (core::host_sync_count).
  int64_t host_syncs_per_step = 0;
  // Peak tensor memory allocated on the model's device since this epoch began, in MiB
  // (core::memory_stats(device).peak_bytes; reset at each epoch start).
  double peak_memory_mib = 0.0;
  // Share of the window's wall time the training thread spent in BatchSource::next() (waiting
  // for, or assembling, batches). On a GPU it includes back-pressure: see docs/diagnostics.md.
  double data_wait_share = 0.0;
  // Wall seconds since this fit() began, and the share of them spent in evaluation.
  double elapsed_s = 0.0;
  double eval_share = 0.0;
  // Optimizer steps this fit() ends at (-1: unknown, a source of unknown length), and the
  // estimated seconds until then at this fit()'s pace so far, evaluation included (-1: unknown).
  int64_t total_steps = -1;
  double eta_s = -1.0;
};

// Evaluation inside fit(), on the validation source given to it. Evaluation runs between steps,
// in evaluation mode, and is timed as its own phase: it is left out of the log's ms/step and
// samples/s and reported as a share of the wall time (StepStats::eval_share, EvalRecord::share).
struct EvalOptions {
  // After every N-th optimizer step and after fit()'s last step; 0: after each epoch's last step
  // (and fit()'s last).
  int64_t every_steps = 0;
  // The first `max_samples` samples of the source's epoch 0 (in whole batches: rounded up to a
  // batch), the same ones each time; 0: all of it.
  int64_t max_samples = 0;
};

// One evaluation inside fit().
struct EvalRecord {
  int64_t step = 0;  // optimizer steps done
  int64_t epoch = 0;
  double loss = 0.0;
  double accuracy = -1.0;  // top-1 for class-index targets; -1 otherwise
  int64_t samples = 0;
  double seconds = 0.0;    // this evaluation's wall time
  double share = 0.0;      // evaluation's share of the fit's wall time so far
  double elapsed_s = 0.0;  // wall seconds since this fit() began
};

struct TrainerOptions {
  // fp32, or mixed precision: float batch inputs are cast to bf16/f16 before the forward, the
  // modules compute in that dtype with fp32 master weights and gradients; fp16 adds dynamic
  // loss scaling (the scale stays on the device; overflowed steps are skipped there).
  amp::Precision precision = amp::Precision::fp32;
  amp::GradScalerOptions scaler;  // used when precision == fp16
  int grad_accum_steps = 1;
  float clip_grad_norm = 0.0f;  // 0: no clipping
  // None: the optimizer's lr throughout. Else lr_at(step) before each optimizer step. After a
  // resume at another world size (elastic; also every later resume of such a run) the schedule
  // follows the run's own progress in samples instead: it spans the run's samples (those seen
  // and those this job has left), a step that ends at s of the run's S samples taking
  // lr_at(ceil(total_steps * s / S) - 1), so the last step takes lr_at(total_steps - 1) as the
  // uninterrupted run's does (LrSchedule::total_steps; a schedule without an end advances one
  // step per global batch of the run's first segment). Uninterrupted and same-world-size
  // resumed runs use lr_at(step) exactly.
  std::optional<optim::LrSchedule> schedule;
  int log_interval = 10;      // steps between log lines (and host syncs)
  bool log_grad_norm = true;  // compute the norm for logs even without clipping
  bool progress_bar = true;   // on stderr when it is a terminal
  // Empty: no checkpoints. Else fit() checks before its first step that rank 0 can write there
  // (core::check_output_dir: created when missing) and throws naming it otherwise.
  // Periodic checkpoints are step_<N>.safetensors, the one at the end last.safetensors
  // (train/checkpoint_files.h).
  std::filesystem::path checkpoint_dir;
  int64_t checkpoint_interval = 0;  // steps between checkpoints (0: only at the end)
  // Also a checkpoint when this many wall seconds have passed since the last one (0: off). It is
  // checked at log lines (every rank agrees through the log's all-reduce), so a checkpoint
  // follows the duration by at most log_interval steps.
  double checkpoint_interval_seconds = 0.0;
  // Retention: after each periodic checkpoint, all but the newest keep_last periodic ones are
  // removed; last.safetensors is always kept. 0: keep every one.
  int keep_last = 0;
  // One JSON object per log line and per evaluation, appended to this file by rank 0 (JSON
  // Lines, docs/long_runs.md#metrics); a resumed run continues the file of the run it resumes.
  // Empty: none. The folder is checked before the first step.
  std::filesystem::path metrics_path;
  // Evaluation inside fit() when it is given a validation source.
  EvalOptions evaluation;
  bool continue_on_nan = false;  // true: keep going after a non-finite loss
  // Stop after this many optimizer steps (-1: epochs). After an elastic resume (see
  // `schedule` below) it counts steps of the run's first global batch: the run stops once it
  // has seen the samples of max_steps such steps, as the uninterrupted run would.
  int64_t max_steps = -1;
  bool quiet = false;  // no log lines on stdout
  // Activation checkpointing for a Sequential model of blocks (a transformer's layers): k > 0
  // wraps children 0, k, 2k, ... in an nn::Checkpoint when the Trainer is built — each wrapped
  // block keeps only its input and re-runs its forward during backward (about one more forward
  // of those blocks per step). 1 checkpoints every block. The model is changed in place (names,
  // parameters and weight files stay the same); a model that is not a Sequential is an error.
  // 0: off.
  int activation_checkpoint_every = 0;
  // Selective recomputation in every Sequential of the model: outputs that are cheap to
  // rebuild (a GELU's output, dropout's) are not kept by the layer that consumes them and are
  // rebuilt in backward (one elementwise kernel each). Combines with checkpointing.
  bool selective_recompute = false;
  // How gradients are synchronized: this rank's dist::ReplicatedGradSync or ShardedGradSync,
  // built over the same model (borrowed; it must outlive the Trainer). nullptr: a single
  // process (the Trainer makes its own dist::LocalGradSync).
  dist::GradSync* grad_sync = nullptr;
  // Step breakdown, GPU monitor, verdict reports, traces, baseline cards (off by default),
  // attached to fit() as a step observer.
  diag::DiagnosticsOptions diagnostics;
  // Ablation: fit() trains on its source's first batch, replayed for every step of the
  // source's epoch length (diag::ReplaySource): the step without the input pipeline.
  bool replay_first_batch = false;
  // The training step as a CUDA graph (core::CudaGraph): after `cuda_graph_warmup` eager steps
  // (cuBLASLt plans its GEMMs, the half compute copies are made), the step is captured once and
  // then replayed with one launch per step while its batches keep their shapes — what takes a
  // small model's kernel-launch overhead away (a launch-bound verdict). The optimizer reads its
  // learning rate on the device (SGD, LARS, AdamW; not over compact optimizer state, which is
  // refused when the Trainer is built). Steps that cannot replay run eagerly, with the same
  // results: a batch of another shape (the last, partial one), a partial accumulation group, the
  // diagnostics' op-timed steps. With the graph the step's phases are one span to the diagnostics.
  // One CUDA device, one process (no gradient sync across ranks). Memory the step allocates stays
  // reserved by the graph, and core::memory_stats does not count it (CUDA's graph allocations
  // bypass stoker's allocator): core::graph_memory_stats does. Off by default.
  bool cuda_graph = false;
  int cuda_graph_warmup = 2;
  // Preemption: while fit() runs, the first of these signals ends it after the step being
  // done, as reaching max_steps would, but without the evaluation due: the step's log line is
  // written, then a checkpoint (step_<N>.safetensors, when checkpoint_dir is set), and fit()
  // returns with FitResult::stop_signal set; the caller says where and exits (128 + signal). A
  // second one ends the process at once, as the signal would. The ranks of a data-parallel job
  // agree at log lines (in the log's all-reduce, no collective of its own), so every rank stops
  // at the same step, within log_interval steps of the signal. A signal the program handles
  // itself, or ignores, is left alone. Empty: signals keep their default action.
  std::vector<int> stop_signals = {SIGTERM, SIGINT, SIGUSR1};
  // The program's settings that define the run (train/run_settings.h), recorded in every
  // checkpoint; resume() states each changed one on stderr and refuses (ChangedRunError, before
  // anything is loaded) those whose rule says so. Empty: nothing compared.
  std::vector<RunSetting> run_settings;
};

struct FitResult {
  int64_t steps = 0;
  double final_loss = 0.0;  // mean loss of the last logged window
  double seconds = 0.0;
  std::vector<StepStats> log;           // every logged line
  std::vector<EvalRecord> evaluations;  // every evaluation inside fit()
  double eval_seconds = 0.0;            // their wall time
  // Diagnostics (when enabled): every printed report, and the report over the whole fit.
  std::vector<diag::Report> reports;
  diag::Report diagnosis;
  // Preemption (TrainerOptions::stop_signals): the signal that ended the fit after `steps`
  // (0: none), and the checkpoint then written (empty: no checkpoint_dir).
  int stop_signal = 0;
  std::filesystem::path stop_checkpoint;
};

struct EvalResult {
  double loss = 0.0;  // mean over batches weighted by batch size
  // Top-1 for class-index targets, over the rows of the model's [N, classes] output (a
  // language model's [B*T, V]: next-token accuracy); -1 otherwise.
  double accuracy = -1.0;
  int64_t samples = 0;
};

class StepGraph;

class Trainer {
 public:
  Trainer(nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer,
          TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains for `epochs` epochs (or until options.max_steps). Continues from the position a
  // resume() restored. With `validation`, evaluates on it as options.evaluation says (borrowed
  // for the call).
  FitResult fit(data::BatchSource& train, int64_t epochs, data::BatchSource* validation = nullptr);
  // Loss (and accuracy for classification) over epoch 0 of `data` in evaluation mode: all of
  // it, or its first `max_samples` samples in whole batches (0: all).
  EvalResult evaluate(data::BatchSource& data, int64_t max_samples = 0);

  // Writes a training checkpoint (atomic, version 2). `source` supplies the data position and
  // identity (nullptr: none recorded). In a data-parallel job only rank 0 writes: call it on
  // every rank (a ZeRO-1 optimizer gathers its state from every rank here; other ranks return).
  // Temporaries that dead checkpoint writers left in the folder
  // ("*.safetensors.tmp.<pid>.<n>" of a pid that no longer runs) are removed first, with one
  // line on stderr.
  void save_checkpoint(const std::filesystem::path& path, const data::BatchSource* source) const;
  // Restores model, optimizer, generators and position from a checkpoint; the next fit()
  // continues from there. Every tensor is checked against its checksum before anything is
  // changed (version 1 files, which have none, load unchecked). Errors name the file and the
  // tensor that is damaged or does not fit. The recorded world size and data identity are
  // compared by the next fit(), against the source it is given: the source is not known here.
  void resume(const std::filesystem::path& path);
  // Resumes from the newest checkpoint of `dir` (train/checkpoint_files.h) and returns its path;
  // none there: returns nothing and changes nothing. A newest one that fails its checks (a
  // damaged file) is named on stderr and the one before it is tried; when every one fails, the
  // error names them all. Changed settings that are refused (ChangedRunError) end it at once.
  std::optional<std::filesystem::path> resume_latest(const std::filesystem::path& dir);

  int64_t step() const;
  // Samples (every rank's) the optimizer steps so far consumed, resumed runs included.
  int64_t samples_seen() const;
  // Ends the fit() in progress after the step being done, as reaching max_steps would (the
  // window's log line, the evaluation due, the final checkpoint): for observers (early
  // stopping). In a data-parallel job every rank must request it at the same step — decide
  // from numbers every rank shares. Reset when the next fit() begins.
  void request_stop();
  // TrainerOptions::cuda_graph: the nodes of the captured step (0: none captured yet).
  size_t cuda_graph_nodes() const;
  // The fp16 loss scaler (nullptr for fp32/bf16).
  const amp::GradScaler* scaler() const;

  // One optimizer step over `micro_batches` (gradient accumulation across them, each a mean
  // loss scaled by 1/k), with precision, loss scaling, clipping, schedule and the loss monitor
  // as in fit() but no logging and no data source: for custom loops and benchmarks. It makes
  // no host synchronization, so on a GPU a whole step can be captured into a CUDA graph.
  void train_step(std::span<const data::Batch> micro_batches);

  // Where the model's device memory goes now (activations_peak: measured during the first
  // step; 0 before it). No host synchronization.
  MemoryReport memory_report() const;
  // What the advice of memory_advice() takes as already applied.
  MemorySettings memory_settings() const;

  // The diagnostics of this Trainer (nullptr unless enabled).
  const diag::Diagnostics* diagnostics() const;

  // Attaches `observer` to every later fit() (train/step_observer.h), after the Trainer's own
  // and those added before it. Borrowed: it must outlive the Trainer's fits.
  void add_observer(StepObserver& observer);
  using Callback = std::function<void(const StepStats&)>;
  // Called after each log line (an observer's on_log).
  void add_log_callback(Callback cb);
  using EvalCallback = std::function<void(const EvalRecord&)>;
  // Called after each evaluation inside fit() (an observer's on_eval).
  void add_eval_callback(EvalCallback cb);

 private:
  struct Impl;  // src/train/trainer_impl.h
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::train

// The environment variables that change a Trainer's run, read in this one place (nowhere else in
// the library reads them), so that `stoker doctor` can diagnose a program built on the Trainer
// without changing it:
namespace stoker::train {

// `options` with the variables above applied; throws naming the variable when a value is
// malformed (a flag that is not 0/1, a number that is not an integer or is negative).
TrainerOptions apply_environment(TrainerOptions options);

// Why TrainerOptions::cuda_graph cannot run for this optimizer on this device in a job of
// `world_size` processes — empty when it can. The example trainers capture their step whenever
// it is empty (fast by default) and name the reason otherwise.
std::string cuda_graph_blocker(const optim::Optimizer& optimizer, Device device, int world_size);

}  // namespace stoker::train
