#include "stoker/nn/layernorm.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/ops/layernorm.h"
#include "stoker/ops/layout.h"

namespace stoker::nn {

LayerNorm::LayerNorm(int64_t features, float eps) : features_(features), eps_(eps) {
  STOKER_CHECK(features > 0, "LayerNorm(", features, "): feature count must be positive");
  Tensor w = Tensor::empty({features}, DType::f32, Device::cpu());
  ops::fill(w, 1.0);
  weight_ = Parameter(w);
  bias_ = Parameter(Tensor::zeros({features}, DType::f32, Device::cpu()));
  register_parameter("weight", weight_);
  register_parameter("bias", bias_);
}

Tensor LayerNorm::start_forward(const Tensor& x, const Tensor& normalized) {
  STOKER_CHECK(x.rank() >= 1 && x.size(-1) == features_, describe(), ": input ", x.str(),
               " must end in ", features_, " features");
  x_shape_ = x.shape();
  x_ = normalized.reshape({-1, features_});
  const int64_t n = x_.size(0);
  mean_ = Tensor::empty({n}, DType::f32, x.device());
  rstd_ = Tensor::empty({n}, DType::f32, x.device());
  return Tensor::empty(x_.shape(), x.dtype(), x.device());
}

Tensor LayerNorm::finish_forward(const Tensor& y) {
  if (!saving_activations()) x_ = mean_ = rstd_ = Tensor();  // inside a Checkpoint's forward
  return y.reshape(x_shape_);
}

Tensor LayerNorm::forward(const Tensor& x) {
  const Tensor y = start_forward(x, x);
  ops::layernorm_forward(y, mean_, rstd_, x_, weight_.value(), bias_.value(), eps_);
  return finish_forward(y);
}

Tensor LayerNorm::forward_add(const Tensor& x, const Tensor& residual, const Tensor& sum) {
  STOKER_CHECK(residual.defined() && sum.defined() && residual.shape() == x.shape() &&
                   sum.shape() == x.shape(),
               describe(), ": the residual ", residual.defined() ? residual.str() : "undefined",
               " and the sum ", sum.defined() ? sum.str() : "undefined",
               " must have the input's shape ", x.shape());
  const Tensor y = start_forward(x, sum);  // the sum is what the backward normalizes
  ops::add_layernorm_forward(y, x_, mean_, rstd_, x.reshape({-1, features_}),
                             residual.reshape({-1, features_}), weight_.value(), bias_.value(),
                             eps_);
  return finish_forward(y);
}

Tensor LayerNorm::backward_add(const Tensor& dy, const Tensor& dsum_in, const Tensor& dsum) {
  STOKER_CHECK(x_.defined(), describe(), ": backward called before forward");
  const Tensor out = dsum.defined() ? dsum.reshape(x_.shape())
                                    : Tensor::empty(x_.shape(), dy.dtype(), dy.device());
  ops::add_layernorm_backward(out, weight_.grad(), bias_.grad(), dy.reshape(x_.shape()),
                              dsum_in.reshape(x_.shape()), x_, mean_, rstd_, weight_.value());
  x_ = mean_ = rstd_ = Tensor();  // consumed
  weight_.grad_ready();
  bias_.grad_ready();
  return out.reshape(x_shape_);
}

Tensor LayerNorm::backward(const Tensor& dy) {
  STOKER_CHECK(x_.defined(), describe(), ": backward called before forward");
  Tensor dx = Tensor::empty(x_.shape(), dy.dtype(), dy.device());
  ops::layernorm_backward(dx, weight_.grad(), bias_.grad(), dy.reshape(x_.shape()), x_, mean_,
                          rstd_, weight_.value());
  x_ = mean_ = rstd_ = Tensor();  // consumed
  weight_.grad_ready();
  bias_.grad_ready();
  return dx.reshape(x_shape_);
}

bool LayerNorm::release_saved_input() {
  if (!x_.defined()) return false;
  x_ = Tensor();  // mean and 1/std stay: they are per row, and recomputing them is not free
  return true;
}

void LayerNorm::restore_saved_input(const Tensor& x) {
  STOKER_CHECK(x.defined() && x.numel() == x_shape_.numel() && mean_.defined(), describe(),
               ": restored input ", x.defined() ? x.str() : std::string("undefined"),
               " does not match the forward's input ", x_shape_);
  x_ = x.reshape({-1, features_});
}

Module::OutputRecompute LayerNorm::output_recompute() const {
  if (!mean_.defined()) return OutputRecompute::none;  // saved nothing
  // With its input kept, the output is one normalization pass away; with the input given up
  // (an earlier module rebuilds it), it is rebuilt from that input.
  return x_.defined() ? OutputRecompute::from_own_state : OutputRecompute::from_input;
}

Tensor LayerNorm::recompute_output(const Tensor& x) {
  const Tensor in = x.defined() ? x.reshape({-1, features_}) : x_;
  STOKER_CHECK(in.defined() && mean_.defined() && in.numel() == x_shape_.numel(), describe(),
               ": no saved or given input ", x.defined() ? x.str() : std::string("undefined"),
               " matching the forward's input ", x_shape_, " to recompute the output from");
  // The forward's kernel on the forward's input: the same bits. Its statistics are recomputed
  // into temporaries (one row reduction, fp32, T*8 bytes) rather than taken from mean_/rstd_, so
  // no second kernel has to reproduce the forward's arithmetic.
  const int64_t n = in.size(0);
  Tensor y = Tensor::empty(in.shape(), in.dtype(), in.device());
  Tensor mean = Tensor::empty({n}, DType::f32, in.device());
  Tensor rstd = Tensor::empty({n}, DType::f32, in.device());
  ops::layernorm_forward(y, mean, rstd, in, weight_.value(), bias_.value(), eps_);
  return y.reshape(x_shape_);
}

std::string LayerNorm::describe() const {
  return fmt::format("LayerNorm({}, eps={:g})", features_, eps_);
}

}  // namespace stoker::nn
