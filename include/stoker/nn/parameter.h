// Parameter: a trainable tensor — the fp32 master value and its fp32 gradient.
//
// Gradients ACCUMULATE: backward passes add into `grad` (+=), which makes gradient accumulation
// over micro-batches free; the optimizer's zero_grad() resets them. When a module has written
// this backward pass's gradient it calls `grad_ready()`, which runs the registered hooks (the
// data-parallel GradReducer launches its all-reduce buckets from there).
//
// Ownership: the module that declares a Parameter owns it; optimizers and reducers hold
// pointers, valid while the module lives. Not thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "stoker/core/tensor.h"

namespace stoker::nn {

class Parameter {
 public:
  Parameter() = default;
  // `value` must be an f32 tensor; the gradient is allocated (zeroed) on the same device.
  explicit Parameter(Tensor value);

  const Tensor& value() const { return value_; }
  const Tensor& grad() const { return grad_; }
  Device device() const { return value_.device(); }
  const Shape& shape() const { return value_.shape(); }
  int64_t numel() const { return value_.numel(); }

  // Replaces the value (e.g. when loading weights); shape and dtype must match.
  void set_value(const Tensor& value);
  // Moves value and gradient to `device`.
  void to(Device device);
  // grad = 0 (on the device's current stream).
  void zero_grad();
  // Re-points the gradient at `grad` (same shape/dtype/device): lets a reducer place gradients
  // inside a flat bucket buffer without copies.
  void set_grad_storage(const Tensor& grad);

  // False for frozen parameters: backward skips their gradient, the optimizer skips them.
  bool requires_grad = true;

  // Called by modules once this backward pass's gradient is complete.
  void grad_ready();
  using Hook = std::function<void(Parameter&)>;
  void add_grad_ready_hook(Hook hook) { hooks_.push_back(std::move(hook)); }
  void clear_grad_ready_hooks() { hooks_.clear(); }

 private:
  Tensor value_;
  Tensor grad_;
  std::vector<Hook> hooks_;
};

}  // namespace stoker::nn
