// Linear: y = x W^T + b, with W [out, in] and b [out] (PyTorch's layout and names "weight",
// "bias", so weights load into torch.nn.Linear). x is [N, in] (leading dims flattened) and y
// [N, out]. Initialization as PyTorch: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
// Mixed precision: an f16/bf16 input runs the GEMMs in that dtype with fp32 accumulation and
// the weight's half compute copy (Parameter::compute_value, refreshed by the optimizer after
// each step); the weight gradient is written in fp32 by the backward GEMM (beta 0 right after
// zero_grad, then 1: micro-batches accumulate in place). Bias and its gradient stay fp32.
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // Saves the input (and the weight's compute copy) without the GEMM.
  void forward_for_backward(const Tensor& x) override;
  // Saves its input (a view, no copy); selective recomputation may take it away and give it
  // back (nn/checkpoint.h).
  bool release_saved_input() override;
  void restore_saved_input(const Tensor& x) override;
  std::string describe() const override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  bool has_bias() const { return has_bias_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  Parameter weight_, bias_;
  Tensor x_;          // saved input (2-D view)
  Tensor w_compute_;  // the weight in the input's dtype (the master itself for f32)
  Shape x_shape_;     // the caller's shape, restored for dx
};

}  // namespace stoker::nn
