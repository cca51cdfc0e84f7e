// BatchNorm2d: batch normalization per channel over (N, H, W) with PyTorch's parameters and
// buffers ("weight", "bias", "running_mean", "running_var"; f32 [C]) and rules, so state loads
// into torch.nn.BatchNorm2d. Saves the input, batch mean and 1/std (with the ReLU also y, unless
// its backward rebuilds the mask from x); a recomputed forward leaves the running statistics
// alone. Optional fusions, same names and (on the CPU) bits: a ReLU (set_activation), a residual
// tail y = act(bn(x) + r) (set_residual_tail: r from set_residual() before every forward, so
// checkpoint the whole block), and the preceding Conv2d's sums (set_batch_sums, used once).
// Not thread-safe. Details: docs/ops.md#batch-norm-pooling-and-convolutions.
#pragma once

#include "stoker/nn/activation.h"
#include "stoker/nn/module.h"
#include "stoker/ops/batchnorm.h"

namespace stoker::nn {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f,
                       ops::Layout layout = ops::Layout::nchw);

  // The fused activation: none (default) or relu; set it before the forward.
  void set_activation(Activation activation);
  Activation activation() const { return params_.relu ? Activation::relu : Activation::none; }

  // The residual tail (see above).
  void set_residual_tail(bool on);
  bool residual_tail() const { return residual_tail_; }
  // The residual r of the next forward (x's shape and dtype); tail mode only.
  void set_residual(const Tensor& r);
  // r's gradient from the last backward (then forgotten).
  Tensor take_residual_grad();

  // The next training forward's per-channel sums of x and x^2 (f32 [C]) and the tensor `of`
  // they were computed over (see above).
  void set_batch_sums(const Tensor& of, const Tensor& sum, const Tensor& sum_sq);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;
  OutputRecompute output_recompute() const override;
  Tensor recompute_output(const Tensor& x) override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }

 private:
  int64_t channels_;
  ops::BatchNormParams params_;
  Parameter weight_, bias_;
  Tensor running_mean_, running_var_;
  Tensor x_, save_mean_, save_invstd_;
  Tensor y_;                    // with the fused ReLU: the output, the mask source
  bool saved_training_ = true;  // mode of the forward that x_ belongs to
  bool mask_from_x_ = false;    // the fused ReLU's backward rebuilds its mask from x: no y_
  bool residual_tail_ = false;
  Tensor residual_;                // set_residual's r, until the next forward consumes it
  Tensor dresidual_;               // the last backward's gradient of r, until taken
  Tensor sums_of_, sum_, sum_sq_;  // set_batch_sums's, until the next forward consumes them
};

}  // namespace stoker::nn
