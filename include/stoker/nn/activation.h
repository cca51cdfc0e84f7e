// Elementwise activations: ReLU and GELU (tanh form, PyTorch's approximate="tanh"), and
// Flatten (a reshape to [N, rest]). None has parameters.
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override { return "ReLU"; }

 private:
  Tensor y_;  // the output: relu' is (y > 0)
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override { return "GELU(tanh)"; }

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
