// Conv2d: 2-D convolution with PyTorch's parameters ("weight" KCRS [out, in/groups, k, k],
// "bias" [out]) and initialization. The master weight stays KCRS whatever the layout (NHWC uses
// a KRSC compute copy); half inputs get a compute copy; gradients are f32 and ACCUMULATE.
// feed_batch_statistics(&bn) hands the output's per-channel sums to the next BatchNorm2d (needs
// bias = false; experimental, used by no model: slower and not deterministic on an H100).
// Work runs on the current stream through ops::conv2d_*. Not thread-safe.
// Details: docs/ops.md#batch-norm-pooling-and-convolutions.
#pragma once

#include "stoker/nn/module.h"
#include "stoker/ops/conv.h"

namespace stoker::nn {

class BatchNorm2d;

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;  // in and out channels must be multiples
  bool bias = true;
  ops::Layout layout = ops::Layout::nchw;
  // false: backward computes no input gradient and returns an undefined tensor — for a first
  // layer fed by data (a ResNet's stem; PyTorch skips it too, the input needs no gradient).
  bool input_grad = true;
};

class Conv2d : public Module {
 public:
  // A square `kernel` x `kernel` convolution.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, ops::Layout layout = ops::Layout::nchw);
  // The same with dilation and groups: Conv2d(64, 64, 3, {.padding = 1, .groups = 64}).
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, const Conv2dOptions& options);

  // x [N, in, H, W] (NCHW) or [N, H, W, in] (NHWC), float dtype -> y in x's dtype.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // The input gradient added into target() by the backward-data pass itself (no dx buffer).
  Tensor backward_accumulate(const Tensor& dy, const std::function<Tensor()>& target) override;
  std::string describe() const override;

  // See above; `bn` must outlive this module (a sibling in the same model).
  void feed_batch_statistics(BatchNorm2d* bn);

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  bool has_bias() const { return has_bias_; }
  const ops::Conv2dParams& params() const { return params_; }

 private:
  // The weight's and the bias's gradients of this backward (+=, grad_ready).
  void parameter_grads(const Tensor& dy);

  int64_t in_, out_, kernel_;
  bool has_bias_;
  bool input_grad_ = true;
  ops::Conv2dParams params_;
  Parameter weight_, bias_;
  Tensor x_;                          // saved input
  Tensor w_compute_;                  // the filter the forward used (KRSC and/or x's dtype), for dx
  BatchNorm2d* stats_for_ = nullptr;  // feed_batch_statistics's
};

}  // namespace stoker::nn
