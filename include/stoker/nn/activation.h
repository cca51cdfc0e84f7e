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

// Dropout with a Philox mask that is a pure function of (seed, offset): nothing is stored, and
namespace stoker::nn {

class Dropout : public Module {
 public:
  // `seed` 0 draws one from the init generator (reproducible under nn::manual_seed).
  explicit Dropout(float p, uint64_t seed = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;
  OutputRecompute output_recompute() const override { return OutputRecompute::from_input; }
  Tensor recompute_output(const Tensor& x) override;

  float p() const { return p_; }
  // The generator (registered as "generator"): its position is saved in training checkpoints,
  // so a resumed run drops the same elements.
  Generator& generator() { return gen_; }

 private:
  float p_;
  Generator gen_;
  Generator::Draw last_{};
  bool last_was_training_ = false;
};

}  // namespace stoker::nn
