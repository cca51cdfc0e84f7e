// nn::RMSNorm (stoker/nn/layernorm.h): LlamaRMSNorm as a module over ops::rmsnorm_* and the
// fused ops::add_rmsnorm_*; its save/recompute protocol is nn::LayerNorm's.
#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/nn/layernorm.h"
#include "stoker/ops/layernorm.h"
#include "stoker/ops/layout.h"

namespace stoker::nn {

RMSNorm::RMSNorm(int64_t features, float eps) : features_(features), eps_(eps) {
  STOKER_CHECK(features > 0, "RMSNorm(", features, "): feature count must be positive");
  Tensor w = Tensor::empty({features}, DType::f32, Device::cpu());
  ops::fill(w, 1.0);
  weight_ = Parameter(w);
  register_parameter("weight", weight_);
}

Tensor RMSNorm::start_forward(const Tensor& x, const Tensor& normalized) {
  STOKER_CHECK(x.rank() >= 1 && x.size(-1) == features_, describe(), ": input ", x.str(),
               " must end in ", features_, " features");
  x_shape_ = x.shape();
  x_ = normalized.reshape({-1, features_});
  rstd_ = Tensor::empty({x_.size(0)}, DType::f32, x.device());
  return Tensor::empty(x_.shape(), x.dtype(), x.device());
}

Tensor RMSNorm::finish_forward(const Tensor& y) {
  if (!saving_activations()) x_ = rstd_ = Tensor();  // inside a Checkpoint's forward
  return y.reshape(x_shape_);
}

Tensor RMSNorm::forward(const Tensor& x) {
  const Tensor y = start_forward(x, x);
  ops::rmsnorm_forward(y, rstd_, x_, weight_.value(), eps_);
  return finish_forward(y);
}

Tensor RMSNorm::forward_add(const Tensor& x, const Tensor& residual, const Tensor& sum) {
  STOKER_CHECK(residual.defined() && sum.defined() && residual.shape() == x.shape() &&
                   sum.shape() == x.shape(),
               describe(), ": the residual ", residual.defined() ? residual.str() : "undefined",
               " and the sum ", sum.defined() ? sum.str() : "undefined",
               " must have the input's shape ", x.shape());
  const Tensor y = start_forward(x, sum);  // the sum is what the backward normalizes
  ops::add_rmsnorm_forward(y, x_, rstd_, x.reshape({-1, features_}),
                           residual.reshape({-1, features_}), weight_.value(), eps_);
  return finish_forward(y);
}

Tensor RMSNorm::backward(const Tensor& dy) {
  STOKER_CHECK(x_.defined(), describe(), ": backward called before forward");
  Tensor dx = Tensor::empty(x_.shape(), dy.dtype(), dy.device());
  ops::rmsnorm_backward(dx, weight_.grad(), dy.reshape(x_.shape()), x_, rstd_, weight_.value());
  x_ = rstd_ = Tensor();  // consumed
  weight_.grad_ready();
  return dx.reshape(x_shape_);
}

Tensor RMSNorm::backward_add(const Tensor& dy, const Tensor& dsum_in, const Tensor& dsum) {
  STOKER_CHECK(x_.defined(), describe(), ": backward called before forward");
  const Tensor out = dsum.defined() ? dsum.reshape(x_.shape())
                                    : Tensor::empty(x_.shape(), dy.dtype(), dy.device());
  ops::add_rmsnorm_backward(out, weight_.grad(), dy.reshape(x_.shape()),
                            dsum_in.reshape(x_.shape()), x_, rstd_, weight_.value());
  x_ = rstd_ = Tensor();  // consumed
  weight_.grad_ready();
  return out.reshape(x_shape_);
}

bool RMSNorm::release_saved_input() {
  if (!x_.defined()) return false;
  x_ = Tensor();  // rstd stays: per row, and recomputing it is a reduction
  return true;
}

void RMSNorm::restore_saved_input(const Tensor& x) {
  STOKER_CHECK(x.defined() && x.numel() == x_shape_.numel() && rstd_.defined(), describe(),
               ": restored input ", x.defined() ? x.str() : std::string("undefined"),
               " does not match the forward's input ", x_shape_);
  x_ = x.reshape({-1, features_});
}

Module::OutputRecompute RMSNorm::output_recompute() const {
  if (!rstd_.defined()) return OutputRecompute::none;
  return x_.defined() ? OutputRecompute::from_own_state : OutputRecompute::from_input;
}

Tensor RMSNorm::recompute_output(const Tensor& x) {
  const Tensor in = x.defined() ? x.reshape({-1, features_}) : x_;
  STOKER_CHECK(in.defined() && rstd_.defined() && in.numel() == x_shape_.numel(), describe(),
               ": no saved or given input ", x.defined() ? x.str() : std::string("undefined"),
               " matching the forward's input ", x_shape_, " to recompute the output from");
  // The forward's kernel on the forward's input (the same bits), its statistics into a
  // temporary so that the saved rstd stays the forward's.
  Tensor y = Tensor::empty(in.shape(), in.dtype(), in.device());
  Tensor rstd = Tensor::empty({in.size(0)}, DType::f32, in.device());
  ops::rmsnorm_forward(y, rstd, in, weight_.value(), eps_);
  return y.reshape(x_shape_);
}

std::string RMSNorm::describe() const {
  return fmt::format("RMSNorm({}, eps={:g})", features_, eps_);
}

}  // namespace stoker::nn
