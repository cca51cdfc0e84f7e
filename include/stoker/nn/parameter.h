// Parameter: a trainable tensor — the fp32 master value and its fp32 gradient.
//
// Gradients ACCUMULATE: backward passes add into `grad` (+=), which makes gradient accumulation
// over micro-batches free; the optimizer's zero_grad() resets them. When a module has written
// this backward pass's gradient it calls `grad_ready()`, which runs the registered hooks (the
// data-parallel gradient syncs launch their buckets from there).
//
// Mixed precision: `compute_value(dtype)` gives the value in the compute dtype. For f16/bf16 it
// is a half copy kept next to the master; optimizers refresh every copy in one multi-tensor
// kernel right after their update (`refresh_compute_copies`), or write it in the update's own
// pass (AdamW), so forwards never cast weights.
// Code that writes into value() in place outside an optimizer calls `value_changed()` so the
// next compute_value() casts again (set_value, to() and the weight loaders do this).
//
// Ownership: the module that declares a Parameter owns it; optimizers and gradient syncs hold
// pointers, valid while the module lives. Not thread-safe.
#pragma once

#include <functional>
#include <span>
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
  // The gradient (zeros after zero_grad()).
  const Tensor& grad() const;
  // For a backward that writes every element of the gradient with C = beta * C + ...: `beta` is
  // 0 when the gradient is logically zero (after zero_grad(), nothing written yet) — the GEMM
  // then overwrites instead of reading zeros — and 1 otherwise (micro-batches accumulate).
  const Tensor& grad_for_write(float& beta);
  Device device() const { return value_.device(); }
  const Shape& shape() const { return value_.shape(); }
  int64_t numel() const { return value_.numel(); }

  // Replaces the value (e.g. when loading weights); shape and dtype must match.
  void set_value(const Tensor& value);
  // Moves value and gradient to `device`.
  void to(Device device);
  // grad = 0. Lazy: no memset until someone reads grad(); a backward that overwrites the whole
  // gradient (grad_for_write) skips it, as PyTorch's set_to_none does.
  void zero_grad();
  // Re-points the gradient at `grad` (same shape/dtype/device): lets a gradient sync place
  // gradients inside a flat bucket buffer without copies.
  void set_grad_storage(const Tensor& grad);
  // Re-points the master value at `value` (same shape, f32, same device), keeping what it held
  // (copied in): lets ZeRO-1's sync hold the values as views of flat per-bucket buffers, so
  // that an optimizer shard updates contiguous slices and one all-gather restores every weight.
  void set_value_storage(const Tensor& value);

  // The value in `dtype` (f32: the master itself; f16/bf16: the refreshed half copy, cast now
  // if it is missing or stale). Same device as the value.
  const Tensor& compute_value(DType dtype);
  // The half copy, undefined until compute_value() asked for one.
  const Tensor& compute_copy() const { return compute_; }
  // The master was written in place: the half copy is stale until the next cast or refresh.
  void value_changed() { compute_fresh_ = false; }
  // Called after the copy was refreshed from the master (by refresh_compute_copies).
  void mark_compute_fresh() { compute_fresh_ = compute_.defined(); }
  // The half copy exists and holds the master's current value.
  bool compute_fresh() const { return compute_fresh_ && compute_.defined(); }

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
  mutable bool grad_zero_pending_ = false;  // grad_ must read as zeros; memory not yet cleared
  Tensor compute_;  // half copy of value_ for mixed-precision compute (undefined: none)
  bool compute_fresh_ = false;
  std::vector<Hook> hooks_;
};

// Re-casts every existing half compute copy from its master in one multi-tensor launch per
// dtype (ops::cast_multi). Parameters without a copy are skipped.
void refresh_compute_copies(std::span<Parameter* const> params);

}  // namespace stoker::nn
