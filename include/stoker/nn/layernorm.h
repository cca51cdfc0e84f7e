// LayerNorm over the last dimension with learnable "weight" (gamma, init 1) and "bias" (beta,
// init 0), PyTorch's names and biased variance. Saved for backward: the input (a view) and the
// per-row mean and 1/std (fp32); selective recomputation may take the input away and give it
// back, and rebuilds the output for the consumer instead of letting it keep it (nn/checkpoint.h).
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t features, float eps = 1e-5f);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // Selective recomputation: the output is rebuilt from the kept input (from_own_state) or, when
  // the input was given up, from the input rebuilt upstream (from_input).
  OutputRecompute output_recompute() const override;
  Tensor recompute_output(const Tensor& x) override;
  bool release_saved_input() override;
  void restore_saved_input(const Tensor& x) override;
  std::string describe() const override;

 private:
  int64_t features_;
  float eps_;
  Parameter weight_, bias_;
  Tensor x_, mean_, rstd_;
  Shape x_shape_;
};

}  // namespace stoker::nn
