// Optimizers: SGD, AdamW and LARS over named parameters with PyTorch's (LARS: MLPerf's) update
// formulas, one multi-tensor launch per step on the GPU, and the LR schedules. The learning rate
// is a host value set before each step; state lives on the parameters' device in f32, bf16 or
// block-wise 8-bit codes (StateFormat; small tensors keep f32) and is named for checkpoints.
// `step()` skips itself on the device when the gradient scaler's found_inf flag is set.
// Not thread-safe.
// Details: docs/ops.md#optimizers-and-schedules, docs/memory.md#optimizer-state-formats.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/tensor.h"
#include "stoker/nn/module.h"
#include "stoker/ops/optim.h"

namespace stoker::optim {

using NamedParameters = std::vector<std::pair<std::string, nn::Parameter*>>;

// How optimizer state (moments, momentum) is stored; the update math is f32 regardless.
enum class StateDType {
  f32,             // 4 bytes per value per state (PyTorch's layout; bit-identical results)
  bf16,            // 2 bytes: round to nearest even, or stochastic rounding
  int8_blockwise,  // 1 byte + 4 bytes per `block` values: dynamic-map codes, absmax per block
};

struct StateFormat {
  StateDType dtype = StateDType::f32;
  int64_t block = 2048;                // int8_blockwise: values per absmax (256 or 2048 usual)
  int64_t min_quantized_numel = 4096;  // int8_blockwise: smaller parameters keep f32 state
  bool stochastic_rounding = false;    // bf16: stochastic instead of round-to-nearest stores
  uint64_t seed = 0;                   // Philox seed of the stochastic rounding
};

class Optimizer {
 public:
  explicit Optimizer(NamedParameters params);
  virtual ~Optimizer() = default;

  // Applies one update, then refreshes the parameters' half compute copies (mixed precision) in
  // one multi-tensor kernel, so the next forward reads updated weights without casting. AdamW
  // over f32 state writes the fresh copies of one half dtype in its update's pass instead (see
  // fused_compute_copies); the kernel then refreshes only the others.
  void step();
  void zero_grad();

  void set_lr(float lr) { lr_ = lr; }
  float lr() const { return lr_; }
  int64_t steps() const { return steps_; }

  // Steps captured in a CUDA graph (TrainerOptions::cuda_graph): the update reads its learning
  // rate from `lr` (a rank-0 f32 tensor on the parameters' device the caller writes before each
  // replay) instead of the host value, which a graph would freeze. Undefined: the host value.
  // Throws where the update cannot (supports_device_lr() is false).
  void set_lr_tensor(const Tensor& lr);
  virtual bool supports_device_lr() const { return false; }
  // A replay of a captured step ran the update on the device: advance the host's step count as
  // step() would have.
  void count_replayed_step() { ++steps_; }

  // A device flag (rank-0 f32): when non-zero at step time, the update is skipped on the
  // device and the step counter still advances on the host only if the caller says so.
  void set_found_inf(const Tensor& flag) { found_inf_ = flag; }

  // Named state tensors for checkpoints (device tensors, shared, not copies).
  virtual std::vector<std::pair<std::string, Tensor>> state();
  // Restores what state() returned (same names and shapes); throws naming a missing tensor.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);
  void set_steps(int64_t steps) { steps_ = steps; }

  // The state as a checkpoint stores it: state() here. An optimizer whose state is spread over
  // ranks (dist::ShardedOptimizer) gathers it instead; then checkpoint_is_collective() is true
  // and every rank must call checkpoint_state() together (only one needs to write the file).
  virtual std::vector<std::pair<std::string, Tensor>> checkpoint_state() { return state(); }
  virtual bool checkpoint_is_collective() const { return false; }
  // Restores from a checkpoint: `load(name, device)` returns the stored tensor `name` (a name
  // checkpoint_state() gave) on `device`, or throws. Here: every state() tensor by its name.
  using TensorLoader = std::function<Tensor(const std::string& name, Device device)>;
  virtual void load_checkpoint_state(const TensorLoader& load);

  // Completes any update still running in the background and applies it to the parameters;
  // the Trainer calls it before checkpoints, evaluation and at the end of fit(). A no-op for
  // optimizers that update synchronously (all but OffloadedOptimizer with delayed_update).
  virtual void flush() {}

  const NamedParameters& parameters() const { return params_; }
  virtual std::string describe() const = 0;

  // Whether the update needs each parameter whole — LARS's norms over a tensor — and so cannot
  // run over slices of parameters (dist::ShardedOptimizer refuses such an optimizer). False for
  // the element-wise updates (SGD, AdamW).
  virtual bool needs_whole_parameters() const { return false; }

  // The gradient synchronization whose gradient slices this optimizer updates, for an
  // optimizer whose state is sharded over ranks (dist::ShardedOptimizer returns its
  // dist::ShardedGradSync, as a const dist::GradSync*); nullptr for one that updates whole
  // parameters (all the others). An identity only, compared by GradSync::check_optimizer and
  // never dereferenced: optim sits below dist, so it cannot name the type.
  virtual const void* sharded_over() const { return nullptr; }

  // Bytes held by the optimizer's state (every tensor state() returns), on the parameters'
  // device: what the optimizer adds to the model's memory.
  size_t state_bytes();
  const StateFormat& state_format() const { return format_; }

 protected:
  // The parameters that take part (requires_grad), with value/grad tensor lists.
  void gather(std::vector<Tensor>& values, std::vector<Tensor>& grads) const;
  // Sets the storage of states made afterwards (validated); call before make_state.
  void set_state_format(const StateFormat& format);
  // Allocates a zero state per parameter in the state format (see StateFormat), named
  // "<param>.<suffix>" and registered for state()/load_state(). is_signed: the 8-bit map
  // (signed for moments that change sign, unsigned for exp_avg_sq).
  std::vector<ops::StateTensor>& make_state(const std::string& suffix, bool is_signed = true);
  // True when some state is not f32 (the compact ops/optim.h overloads run the update).
  bool compact_state() const { return format_.dtype != StateDType::f32; }
  // The values of a state list, for the f32 ops overloads.
  static std::vector<Tensor> values_of(const std::vector<ops::StateTensor>& states);
  // The storage arguments of this step (the rounding draws advance with each call to step()).
  ops::StateStorage storage_for_step() const;

  // The half compute copies an update writes in its own pass (ops::adamw_step's
  // compute_copies), one entry per gathered parameter: defined where the copy is fresh (a stale
  // one is cast whole by step()) and of the first such dtype. Those are marked written, and
  // step() refreshes only the others.
  std::vector<Tensor> fused_compute_copies();

  // The update itself (one multi-tensor launch), implemented by each optimizer.
  virtual void update() = 0;

  NamedParameters params_;
  float lr_ = 0.0f;
  int64_t steps_ = 0;
  Tensor found_inf_;
  Tensor lr_tensor_;  // set_lr_tensor
  StateFormat format_;
  // Each state kind ("exp_avg", ...) with one entry per trainable parameter, in one place so
  // that any later state handling (offload, sharding) sees all of it. A deque: references
  // to a kind stay valid as kinds are added.
  std::deque<std::pair<std::string, std::vector<ops::StateTensor>>> state_lists_;

 private:
  std::vector<const nn::Parameter*> copies_written_;  // by this step's update()
};

struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  StateFormat state{};  // storage of the momentum buffer
};

class SGD : public Optimizer {
 public:
  SGD(NamedParameters params, SgdOptions options = {});
  std::string describe() const override;
  // Unless the momentum buffer is in a compact format (its update takes the host's rate).
  bool supports_device_lr() const override { return momentum_ == nullptr || !compact_state(); }

 protected:
  void update() override;

 private:
  SgdOptions options_;
  std::vector<ops::StateTensor>* momentum_ = nullptr;
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  StateFormat state{};  // storage of exp_avg and exp_avg_sq
};

// The step count behind the bias corrections lives on the device and advances only when the
// update is applied (an overflowed fp16 step neither updates nor counts, as in PyTorch).
class AdamW : public Optimizer {
 public:
  AdamW(NamedParameters params, AdamWOptions options = {});
  std::string describe() const override;
  // Adds "step_state" (the device step count and bias corrections) to the per-parameter state.
  std::vector<std::pair<std::string, Tensor>> state() override;
  // Updates applied so far (a host sync on a GPU); steps() counts calls to step().
  int64_t applied_steps() const;
  // With f32 state (the compact-state update takes its learning rate from the host).
  bool supports_device_lr() const override { return !compact_state(); }

 protected:
  void update() override;

 private:
  AdamWOptions options_;
  std::vector<ops::StateTensor>* exp_avg_ = nullptr;
  std::vector<ops::StateTensor>* exp_avg_sq_ = nullptr;
  Tensor step_state_;
};

}  // namespace stoker::optim

// LARS: SGD with momentum and a layer-wise trust ratio, for large-batch training (You, Gitman &
namespace stoker::optim {

// Which parameters LARS leaves out of the trust ratio and the weight decay.
using LarsExclude = std::function<bool(const std::string& name, const nn::Parameter& p)>;

// True for parameters of at most one dimension: biases, normalization gamma and beta.
bool one_dimensional(const std::string& name, const nn::Parameter& p);

struct LarsOptions {
  float lr = 0.1f;  // set by the schedule each step (NVIDIA's ResNet-50: 10.5 at batch 3264)
  float momentum = 0.9f;
  float weight_decay = 5e-5f;
  float eta = 0.001f;    // trust coefficient
  float epsilon = 0.0f;  // added to the trust ratio's denominator
  // Excluded parameters get plain momentum SGD without weight decay; empty: none excluded.
  LarsExclude exclude = one_dimensional;
};

class LARS : public Optimizer {
 public:
  LARS(NamedParameters params, LarsOptions options = {});
  std::string describe() const override;
  bool needs_whole_parameters() const override { return true; }
  bool supports_device_lr() const override { return true; }
  // Whether the trainable parameter `name` is adapted (trust ratio and weight decay); throws for
  // a name that is not a trainable parameter of this optimizer.
  bool adapted(const std::string& name) const;
  // Adapted trainable parameters, out of how many.
  int64_t adapted_count() const;
  int64_t trainable_count() const;

 protected:
  void update() override;

 private:
  LarsOptions options_;
  std::vector<uint8_t> adapt_;  // one per entry of params_ (1: adapted)
  std::vector<ops::StateTensor>* momentum_ = nullptr;
};

}  // namespace stoker::optim

// Learning-rate schedules: the learning rate as a pure function of the optimizer step, so a
namespace stoker::optim {

struct LrSchedule {
  std::function<float(int64_t step)> lr_at;
  std::string description;
  // The step at which the schedule has reached its end (cosine_with_warmup's and
  // polynomial_with_warmup's total_steps); -1: a schedule without an end. The Trainer needs it to
  // rebase the schedule when an elastic resume changes the steps left (train/trainer.h).
  int64_t total_steps = -1;
};

// Always `lr`.
LrSchedule constant_lr(float lr);
// lr * gamma^(step / step_size) (PyTorch's StepLR).
LrSchedule step_lr(float lr, int64_t step_size, float gamma = 0.1f);
// Linear ramp from lr/warmup_steps... to lr over `warmup_steps`, then constant:
// lr * min(1, (step + 1) / warmup_steps).
LrSchedule linear_warmup(float lr, int64_t warmup_steps);
// Linear warmup as above, then cosine decay from lr to min_lr at total_steps (held after).
LrSchedule cosine_with_warmup(float lr, int64_t warmup_steps, int64_t total_steps,
                              float min_lr = 0.0f);

// Linear warmup as above, then polynomial decay from lr to end_lr at total_steps, held at end_lr
// after (MLPerf ResNet-50's LARS schedule: power 2, end_lr 1e-4):
//   step <  warmup_steps:                lr * (step + 1) / warmup_steps
//   warmup_steps <= step < total_steps:  end_lr + (lr - end_lr) * (1 - t)^power,
//                                        t = (step - warmup_steps) / (total_steps - warmup_steps)
//   step >= total_steps:                 end_lr
// Needs 0 <= warmup_steps <= total_steps, total_steps > 0, 0 <= end_lr <= lr and power > 0;
// otherwise throws naming the argument.
LrSchedule polynomial_with_warmup(float lr, int64_t warmup_steps, int64_t total_steps,
                                  float end_lr = 1e-4f, float power = 2.0f);

// The linear scaling rule (Goyal et al. 2017): lr for `batch_size` given a reference lr tuned
// at `base_batch_size`.
float scale_lr_for_batch(float base_lr, int64_t base_batch_size, int64_t batch_size);

}  // namespace stoker::optim
