// OffloadedOptimizer: optimizer state and the update on the CPU, for models whose optimizer
// state does not fit (or is not worth keeping) in GPU memory.
//
// How: every trainable parameter gets a host shadow — an nn::Parameter whose fp32 value and
// gradient are pinned host buffers (the value starts as a copy of the device value). The inner
// optimizers — any optim::Optimizer (AdamW, SGD, in any StateFormat), made by the factory — are
// built over the shadows, so their state lives in host memory and their update runs on the CPU
// (oneTBB tasks, AVX2/FMA loops: ops/cpu). A step:
//   1. an event on the parameters' current stream; the copy stream waits for it, then copies
//      found_inf and every gradient down (device -> pinned), group by group, one event each;
//   2. for each group in parameter order: the host waits for that group's event, the group's
//      inner optimizer updates its shadows, and the updated values are queued up (pinned ->
//      device) at once on the optimizer's upload stream — so group i's upload and the later
//      groups' downloads run while the host updates group i+1 (downloads and uploads on two
//      streams: the GPU's two copy engines work at the same time);
//   3. the current stream waits on an event after the last upload, and the parameters' half
//      compute copies are refreshed as after any step (on the current stream).
// Why the shadows are safe to reuse: the next step's downloads wait for an event recorded on
// the current stream after it waited for this step's uploads, so when the host has waited for
// a group's download, that group's previous upload (which read the shadow values) is done.
// Groups hold consecutive parameters up to OffloadOptions::group_bytes of fp32 values (a larger
// parameter is a group of its own); each has its own inner optimizer.
//
// Results: the inner update is the CPU backend's, whose arithmetic is the GPU kernels'
// (ops/optim.h), so f32 and bf16 (round-to-nearest) state give the same bits as the same optimizer
// on the GPU. found_inf (set_found_inf, a device flag) is copied down with the gradients and skips
// the step on the host, as the CPU backend does; AdamW's step count does not advance on a skipped
// step. int8_blockwise state is quantized per parameter, and a parameter is never split between
// groups, so its codes are the non-offloaded ones too. Not bit-identical: bf16 state with
// stochastic rounding (each group numbers its draws from its own first element, with the same
// seed in every group: the same statistics, other bits).
//
// Limits (honest): the host waits for each group's download (a host sync per group per step,
// counted by core::host_sync_count), so a step with an offloaded optimizer cannot be captured
// in a CUDA graph; the current stream waits for all uploads before anything that follows
// step(), so the next forward does not start while late groups are still uploading (no
// per-layer waits), and the host is inside step() until the last group is updated, so the
// next forward is launched only then. Host memory: per parameter 8 bytes of pinned shadow
// (value and gradient) plus the inner state. The device keeps the fp32 values, gradients and
// compute copies as before.
//
// DELAYED PARAMETER UPDATE (OffloadOptions::delayed_update, off by default): THE WEIGHTS ARE ONE
// STEP STALE. The forward of step t+1 reads the weights after update t-1, not t, as in the
// ZeRO-Offload paper's "delayed parameter update" (DeepSpeed's delay). In exchange, step() does
// not wait for the CPU update: at step t it
//   1. waits (host) for the background update of step t-1, makes the current stream wait for its
//      last upload and applies it (device copy into the parameters; half copies refreshed);
//   2. copies this step's gradients and found_inf into a flat device staging buffer on the
//      current stream (the next backward may overwrite the gradients at once);
//   3. hands update t to a worker thread owned by this object: the copy stream downloads the
//      staging buffer group by group, the worker updates each group on the CPU as it arrives and
//      uploads it (upload stream) into the group's part of the same staging buffer, which it has
//      just finished reading (so the mode costs 4 bytes per parameter of device memory);
//   4. returns. lr, found_inf and the step count of update t are those given at step t.
// So the update (download, CPU update, upload) runs while the next forward and backward run.
// flush() completes and applies the pending update (idempotent); state(), checkpoint_state(),
// state_bytes() and host_bytes() flush first, so checkpoints hold consistent weights and state.
// load_checkpoint_state() and reload_values() wait for the pending update and drop it (the
// weights just written win). Training with a flush in between (a checkpoint, an evaluation, the
// Trainer's first-step memory report) applies one update a step early: results depend on where
// flushes happen, and a resumed run matches a run that flushed at the checkpoint. An exception
// inside the background update (CUDA or CPU) is kept and rethrown by the next step() or flush()
// as a stoker::Error naming the offloaded update; that update is then lost (reload a
// checkpoint). The destructor waits for a pending update (and applies nothing). inner(g) is the
// worker's while an update is pending: flush() before reading it.
//
// The shadows are copies: weights written into the parameters after construction (loading a
// checkpoint or weights) reach them through reload_values(), which load_checkpoint_state()
// calls (a Trainer resume loads the weights first, then the optimizer state).
//
// Checkpoints: state() and checkpoint_state() use the names of the non-offloaded optimizer
// ("<param>.exp_avg", ..., AdamW's "step_state" once), so an offloaded checkpoint resumes a
// run on the GPU and the reverse. state() tensors are host tensors; state_bytes() counts host
// memory (host_bytes() adds the shadows). On a CPU model the same happens without copies
// between devices (the shadows are still separate buffers).
//
// Ownership: holds pointers to the parameters (the model outlives this); owns the shadows and
// the inner optimizers (and, delayed, the worker thread). Not thread-safe: call it from one
// thread (the worker is internal).
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
