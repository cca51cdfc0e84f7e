// Elementwise activations without parameters: ReLU, GELU (tanh form, PyTorch's
// approximate="tanh") and Flatten (a reshape to [N, rest]). ReLU saves its output, GELU its
// input; both hand their output back for selective recomputation.
// Details: docs/checkpointing.md#activation-checkpointing.
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

// An activation a layer fuses into its output: Linear::set_activation (gelu),
// BatchNorm2d::set_activation (relu).
enum class Activation { none, gelu, relu };

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override { return "ReLU"; }
  OutputRecompute output_recompute() const override;
  Tensor recompute_output(const Tensor& x) override;

 private:
  Tensor y_;  // the output: relu' is (y > 0)
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override { return "GELU(tanh)"; }
  OutputRecompute output_recompute() const override;
  Tensor recompute_output(const Tensor& x) override;

 private:
  Tensor x_;
};

// [N, d1, d2, ...] -> [N, d1 * d2 * ...].
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override { return "Flatten"; }

 private:
  Shape x_shape_;
};

}  // namespace stoker::nn
