// BatchNorm2d: batch normalization over (N, H, W) per channel with PyTorch's parameters
// "weight" (gamma, init 1) and "bias" (beta, init 0) and buffers "running_mean" (init 0) and
// "running_var" (init 1), all f32 [C] and registered, so state loads into torch.nn.BatchNorm2d.
//
// Training mode normalizes with the batch's statistics and updates the running ones with
// `momentum` and the unbiased variance (PyTorch's rule); evaluation mode uses the running
// statistics, and its backward is that of the fixed affine map (frozen statistics, as in
// PyTorch's eval mode). Inputs are 4-D in `layout`, any float dtype; statistics are fp32.
// Saved for backward: the input and the batch mean and 1/std. Under an nn::Checkpoint the
// recomputed forward (nn::recomputing()) leaves the running statistics alone: they move once
// per training forward, as without checkpointing.
//
// Fused ReLU (set_activation(Activation::relu)): y = relu(bn(x)) — a BatchNorm2d followed by an
// nn::ReLU in one module, the ReLU inside the batch-norm passes (ops::BatchNormParams::relu: on
// the GPU's NHWC path no separate pass over y in the forward, no dz buffer in the backward). It
// saves its output y besides its input (y is the mask source, y > 0, exactly what nn::ReLU would
// have kept; the next layer usually keeps y as its own input, so the view costs no memory) —
// except where its backward rebuilds the mask from x (training on the CUDA NHWC path, without a
// residual tail: ops::batchnorm_backward_reads_y), which then keeps no y at all, so that a
// consumer that keeps less than its input (nn::MaxPool2d) frees it. Its backward takes the
// gradient of the activated output. Same results as BatchNorm2d + ReLU (bit for bit on the CPU),
// same parameter and buffer names, so a model switches between the two without changing weight
// files. Selective recomputation: like nn::ReLU it hands back the output it keeps
// (output_recompute() == from_own_state; none where it keeps no y).
//
// Residual tail (set_residual_tail; nn::Residual::set_tail_relu turns it on for its body's last
// BatchNorm2d): every forward then needs a residual r handed over by set_residual() right
// before it, computes y = act(bn(x) + r) in one op (ops::batchnorm_forward_train's residual) and
// drops r; its backward also computes r's gradient dz = dy * (y > 0), which
// take_residual_grad() hands out once. A forward in tail mode without a residual is refused (a
// Checkpoint around this BatchNorm2d alone would recompute it without r: checkpoint the whole
// block instead).
// Statistics from the convolution (Conv2d::feed_batch_statistics sets it up): a training
// forward whose input is exactly the tensor handed to set_batch_sums (same storage and shape)
// normalizes with those sums (ops::batchnorm_forward_train_from_sums) instead of reading x for
// its statistics. The sums are used once; an input other than theirs is refused (they would be
// some other tensor's statistics), and an evaluation forward drops them.
// Not thread-safe.
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
