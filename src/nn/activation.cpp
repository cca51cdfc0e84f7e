#include "stoker/nn/activation.h"

#include "stoker/core/error.h"
#include "stoker/ops/activation.h"

namespace stoker::nn {

Tensor ReLU::forward(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::relu_forward(y, x);
  y_ = saving_activations() ? y : Tensor();
  return y;
}

Tensor ReLU::backward(const Tensor& dy) {
  STOKER_CHECK(y_.defined(), "ReLU: backward called before forward");
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::relu_backward(dx, dy, y_);
  y_ = Tensor();
  return dx;
}

Module::OutputRecompute ReLU::output_recompute() const {
  return y_.defined() ? OutputRecompute::from_own_state : OutputRecompute::none;
}

Tensor ReLU::recompute_output(const Tensor&) {
  STOKER_CHECK(y_.defined(), "ReLU: no saved output to hand out");
  return y_;
}

Tensor GELU::forward(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::gelu_forward(y, x);
  x_ = saving_activations() ? x : Tensor();
  return y;
}

Tensor GELU::backward(const Tensor& dy) {
  STOKER_CHECK(x_.defined(), "GELU: backward called before forward");
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::gelu_backward(dx, dy, x_);
  x_ = Tensor();
  return dx;
}

Module::OutputRecompute GELU::output_recompute() const {
  return x_.defined() ? OutputRecompute::from_own_state : OutputRecompute::none;
}

Tensor GELU::recompute_output(const Tensor&) {
  STOKER_CHECK(x_.defined(), "GELU: no saved input to recompute the output from");
  Tensor y = Tensor::empty(x_.shape(), x_.dtype(), x_.device());
  ops::gelu_forward(y, x_);
  return y;
}

Tensor Flatten::forward(const Tensor& x) {
  STOKER_CHECK(x.rank() >= 1, "Flatten: input ", x.str(), " has no batch dimension");
  x_shape_ = x.shape();
  return x.reshape({x.size(0), -1});
}

Tensor Flatten::backward(const Tensor& dy) { return dy.reshape(x_shape_); }

}  // namespace stoker::nn
