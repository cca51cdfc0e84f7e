// nn::SwiGLU (stoker/nn/linear.h): Llama's MLP block, gate_up_proj -> ops::swiglu -> down_proj.
#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/activation.h"

namespace stoker::nn {

SwiGLU::SwiGLU(int64_t features, int64_t hidden_features)
    : features_(features), hidden_(hidden_features) {
  STOKER_CHECK(features > 0 && hidden_features > 0, "SwiGLU(", features, ", ", hidden_features,
               "): the model width and the hidden width must be positive");
  gate_up_ = &register_module("gate_up_proj",
                              std::make_unique<Linear>(features, 2 * hidden_features, false));
  down_ = &register_module("down_proj", std::make_unique<Linear>(hidden_features, features, false));
}

Tensor SwiGLU::forward(const Tensor& x) {
  const Tensor h = gate_up_->forward(x);
  Shape a_shape = h.shape();
  a_shape[a_shape.rank() - 1] = hidden_;
  const Tensor a = Tensor::empty(a_shape, h.dtype(), h.device());
  ops::swiglu_forward(a, h);
  gate_up_out_ = saving_activations() ? h : Tensor();
  return down_->forward(a);
}

Tensor SwiGLU::backward(const Tensor& dy) {
  STOKER_CHECK(gate_up_out_.defined(), describe(), ": backward called before forward");
  const Tensor da = down_->backward(dy);
  // The gradient of the gate/up output over that output itself: nothing else reads it.
  const Tensor dh = gate_up_out_;
  gate_up_out_ = Tensor();
  ops::swiglu_backward(dh, da, dh);
  return gate_up_->backward(dh);
}

std::string SwiGLU::describe() const {
  return fmt::format("SwiGLU(features={}, hidden={})", features_, hidden_);
}

}  // namespace stoker::nn
