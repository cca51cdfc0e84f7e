// OffloadedOptimizer: optimizer state and the update on the CPU, for models whose optimizer state
// does not fit (or is not worth keeping) in GPU memory. Inner optimizers (any optim::Optimizer,
// made by the factory) update pinned host copies of the fp32 values and gradients group by group,
// overlapping downloads, CPU updates and uploads; results equal the on-GPU optimizer's bits
// (except stochastic-rounding bf16), one host sync per group per step (no CUDA graph). Optional
// delayed update (OffloadOptions::delayed_update): THE WEIGHTS ARE ONE STEP STALE; flush() first.
// Ownership: holds pointers to the parameters (the model outlives this); owns the host copies,
// the inner optimizers and, delayed, a worker thread. Not thread-safe: call it from one thread.
// Details: docs/memory.md#offloading-the-state-to-the-cpu.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/optim/optimizer.h"

namespace stoker::optim {

struct OffloadOptions {
  // fp32 value bytes per group of parameters (pipelining granularity: smaller groups start
  // uploading sooner, larger ones cost fewer host waits).
  int64_t group_bytes = int64_t{32} << 20;
  // CPU threads of the update (a oneTBB arena of its own); 0: oneTBB's default (every core).
  // Fewer leave cores to a data loader's decode threads.
  int threads = 0;
  // Delayed parameter update (see above): step() returns before the CPU update, which runs in the
  // background during the next forward/backward; the weights are one step stale.
  bool delayed_update = false;
};

class OffloadedOptimizer : public Optimizer {
 public:
  // Builds one inner optimizer per group over its host shadows, e.g.
  //   [&](optim::NamedParameters p) { return std::make_unique<optim::AdamW>(p, opts); }
  using Factory = std::function<std::unique_ptr<Optimizer>(NamedParameters)>;
  OffloadedOptimizer(NamedParameters params, const Factory& make, OffloadOptions options = {});
  ~OffloadedOptimizer() override;

  std::string describe() const override;
  // The inner states under the non-offloaded names (host tensors, shared, not copies).
  std::vector<std::pair<std::string, Tensor>> state() override;
  // Also reloads the shadows from the parameters (a resume has just loaded the weights).
  void load_checkpoint_state(const TensorLoader& load) override;
  // Copies the parameters' current values into the host shadows (waits for the copies). Call it
  // after writing parameter values outside step() (loading weights into a model whose
  // optimizer exists already): otherwise the next step would update the old values.
  void reload_values();
  // Delayed mode: waits for the background update and applies it (then refreshes the half
  // compute copies); rethrows its error. Idempotent; a no-op in the exact mode.
  void flush() override;

  // Where the host spent the last step (wall-clock ms): waiting for gradients to arrive, and
  // updating on the CPU. Their sum is about the step's host time.
  // Delayed mode: the last completed background update's, plus how long the last step() waited
  // for it (background_wait_ms; 0 when it was done already).
  struct StepTiming {
    double download_wait_ms = 0;
    double update_ms = 0;
    double background_wait_ms = 0;
  };
  const StepTiming& last_step_timing() const { return timing_; }

  size_t groups() const { return groups_.size(); }
  Optimizer& inner(size_t group) { return *groups_[group].inner; }
  // Host bytes held for the offload: the inner states plus the pinned shadow values and
  // gradients.
  size_t host_bytes();
  bool delayed() const { return options_.delayed_update; }

 protected:
  void update() override;

 private:
  struct Group {
    std::vector<size_t> members;  // indices into device_/shadows_
    std::unique_ptr<Optimizer> inner;
    core::Event downloaded;  // CUDA: after this group's gradients reached the host
  };
  // Non-parameter state every inner holds its own copy of (AdamW's step_state): group 0's is
  // the one reported and loaded; the others are set from it before each step.
  void sync_shared_state();
  // Delayed mode: stage step t's gradients and hand update t to the worker.
  void update_delayed();
  // Gradients `from` (one per parameter, on the parameters' device) and `found_inf` (may be
  // undefined) into the host shadows, after the work queued so far on the current stream: on
  // CUDA on the copy stream, group by group (each group's `downloaded` event; the upload stream
  // waits for that work too); on the CPU at once. Returns the found_inf flag the CPU update
  // reads (a host copy where one is kept, else `found_inf` itself).
  Tensor download_gradients(const std::vector<Tensor>& from, const Tensor& found_inf);
  // The CPU update of every group (host waits for each group's download); uploads into
  // `upload_to` (per parameter) unless the step is skipped. Returns true when skipped.
  bool update_groups(const Tensor& flag, float lr, int64_t steps,
                     const std::vector<Tensor>& upload_to, StepTiming& timing);
  // Delayed mode: waits for the background update; applies it to the parameters when `apply`
  // (returns true then), otherwise drops it. Rethrows the background error.
  bool finish_pending(bool apply);

  OffloadOptions options_;
  std::vector<nn::Parameter*> device_;                   // trainable parameters, in order
  std::vector<std::unique_ptr<nn::Parameter>> shadows_;  // their host shadows
  std::vector<Group> groups_;
  std::vector<std::pair<Tensor, Tensor>> shared_state_;  // (group g's copy, group 0's)
  Tensor host_found_inf_;                                // CUDA: pinned copy of found_inf
  core::Event ready_, uploaded_;                         // CUDA: step start, last upload
  StepTiming timing_;
  struct Arena;                   // a oneTBB task arena (kept out of this header)
  std::unique_ptr<Arena> arena_;  // OffloadOptions::threads > 0
  core::Stream upload_stream_;    // CUDA: pinned -> device values
  // Delayed mode.
  struct Background;  // the worker thread and its hand-off
  std::unique_ptr<Background> background_;
  std::vector<Tensor> staging_;  // CUDA: per parameter, views of one flat device f32 buffer
  Tensor staged_found_inf_;      // CUDA: device copy of found_inf at step time
};

}  // namespace stoker::optim
