// Optimizers: SGD and AdamW over a model's parameters, with PyTorch's update formulas, each step
// one multi-tensor launch on the GPU (ops/optim.h).
//
// The learning rate is a host value set before each step (by the Trainer's schedule); all
// state lives on the parameters' device. `step()` reads gradients as they are (unscaling and
// clipping happen before it) and may skip itself on the device when the gradient scaler's
// found_inf flag is set (`set_found_inf`). `zero_grad()` resets the gradients.
//
// State for checkpoints: `state()` names every state tensor ("<param>.exp_avg", ...) plus the
// step counter; `load_state()` restores them. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/tensor.h"
#include "stoker/nn/parameter.h"

namespace stoker::optim {

using NamedParameters = std::vector<std::pair<std::string, nn::Parameter*>>;

class Optimizer {
 public:
  explicit Optimizer(NamedParameters params);
  virtual ~Optimizer() = default;

  // Applies one update, then refreshes the parameters' half compute copies (mixed precision) in
  // one multi-tensor kernel, so the next forward reads updated weights without casting.
  void step();
  void zero_grad();

  void set_lr(float lr) { lr_ = lr; }
  float lr() const { return lr_; }
  int64_t steps() const { return steps_; }

  // A device flag (rank-0 f32): when non-zero at step time, the update is skipped on the
  // device and the step counter still advances on the host only if the caller says so.
  void set_found_inf(const Tensor& flag) { found_inf_ = flag; }

  // Named state tensors for checkpoints (device tensors, shared, not copies).
  virtual std::vector<std::pair<std::string, Tensor>> state();
  // Restores what state() returned (same names and shapes); throws naming a missing tensor.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);
  void set_steps(int64_t steps) { steps_ = steps; }

  const NamedParameters& parameters() const { return params_; }
  virtual std::string describe() const = 0;

 protected:
  // The parameters that take part (requires_grad), with value/grad tensor lists.
  void gather(std::vector<Tensor>& values, std::vector<Tensor>& grads) const;
  // Allocates a zero state tensor per parameter, named "<param>.<suffix>".
  std::vector<Tensor> make_state(const std::string& suffix);

  // The update itself (one multi-tensor launch), implemented by each optimizer.
  virtual void update() = 0;

  NamedParameters params_;
  float lr_ = 0.0f;
  int64_t steps_ = 0;
  Tensor found_inf_;
  std::vector<std::pair<std::string, std::vector<Tensor>*>> state_lists_;
};

struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(NamedParameters params, SgdOptions options = {});
  std::string describe() const override;

 protected:
  void update() override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
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

 protected:
  void update() override;

 private:
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  Tensor step_state_;
};

}  // namespace stoker::optim
