// LayerNorm over the last dimension ("weight", "bias"; PyTorch's names and biased variance).
// Saves the input (a view) and per-row mean and 1/std (fp32); forward_add / backward_add fuse a
// pre-LayerNorm block's residual add with the same bits as the unfused pair.
// Details: docs/ops.md#transformer-fusions, docs/checkpointing.md#activation-checkpointing.
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t features, float eps = 1e-5f);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // sum = x + residual written into `sum` (x's shape and dtype; it may be x or residual itself),
  // returns layernorm(sum). x and residual share a shape and dtype.
  Tensor forward_add(const Tensor& x, const Tensor& residual, const Tensor& sum);
  // After forward_add: returns dL/dsum = backward(dy) + dsum_in, written into `dsum` when it is
  // defined (it may be dy or dsum_in itself: in place), else into a new tensor.
  Tensor backward_add(const Tensor& dy, const Tensor& dsum_in, const Tensor& dsum = Tensor());
  // Selective recomputation: the output is rebuilt from the kept input (from_own_state) or, when
  // the input was given up, from the input rebuilt upstream (from_input).
  OutputRecompute output_recompute() const override;
  Tensor recompute_output(const Tensor& x) override;
  bool release_saved_input() override;
  void restore_saved_input(const Tensor& x) override;
  std::string describe() const override;

 private:
  // Checks x, keeps its shape and `normalized` (what the backward reads: x, or the fused sum),
  // makes the statistics; returns the output to fill.
  Tensor start_forward(const Tensor& x, const Tensor& normalized);
  // Drops the saves when not saving activations; the output in x's shape.
  Tensor finish_forward(const Tensor& y);

  int64_t features_;
  float eps_;
  Parameter weight_, bias_;
  Tensor x_, mean_, rstd_;
  Shape x_shape_;
};

// RMSNorm over the last dimension with a learnable "weight" (init 1): Hugging Face's
// LlamaRMSNorm (its name and its roundings: ops::rmsnorm_forward in stoker/ops/layernorm.h; eps
// is config.json's rms_norm_eps, 1e-5 in Llama 3 checkpoints, 1e-6 transformers' default).
// Saved for backward: the input (a view) and the per-row 1/rms (fp32), as LayerNorm, with the
// same selective recomputation (input given up and handed back, output rebuilt), and the same
// fused residual add of a pre-norm block: forward_add / backward_add
// (ops::add_rmsnorm_forward / add_rmsnorm_backward), the sum saved as the input.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t features, float eps = 1e-6f);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // sum = x + residual written into `sum` (x's shape and dtype; it may be x or residual itself),
  // returns rmsnorm(sum).
  Tensor forward_add(const Tensor& x, const Tensor& residual, const Tensor& sum);
  // After forward_add: returns dL/dsum = backward(dy) + dsum_in, written into `dsum` when it is
  // defined (it may be dy or dsum_in itself), else into a new tensor.
  Tensor backward_add(const Tensor& dy, const Tensor& dsum_in, const Tensor& dsum = Tensor());
  OutputRecompute output_recompute() const override;
  Tensor recompute_output(const Tensor& x) override;
  bool release_saved_input() override;
  void restore_saved_input(const Tensor& x) override;
  std::string describe() const override;

  Parameter& weight() { return weight_; }

 private:
  Tensor start_forward(const Tensor& x, const Tensor& normalized);
  Tensor finish_forward(const Tensor& y);

  int64_t features_;
  float eps_;
  Parameter weight_;
  Tensor x_, rstd_;
  Shape x_shape_;
};

}  // namespace stoker::nn
