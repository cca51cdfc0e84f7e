// Conv2d: 2-D convolution with PyTorch's parameters — "weight" [out, in/groups, k, k] (KCRS)
// and "bias" [out] — and PyTorch's initialization: kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in/groups * k * k, for weight and bias.
//
// The MASTER weight is always KCRS, so weight files load into torch.nn.Conv2d whatever layout
// the model computes in. With layout NHWC (channels-last: inputs [N, H, W, C]) each forward
// refreshes a KRSC compute copy of the weight and the backward transposes the filter gradient
// back into the KCRS gradient. Half-precision inputs (f16/bf16) get a compute copy of the weight
// in their dtype; parameter gradients stay f32 and ACCUMULATE (+=), as for every module.
//
// Batch statistics for the next layer (feed_batch_statistics(&bn)): each training forward also
// computes its output's per-channel sums of y and y^2 in the convolution's epilogue
// (ops::conv2d_forward_stats, where the device has a fused engine for the problem: the GPU in
// f16/bf16; the CPU always) and hands them to `bn` (BatchNorm2d::set_batch_sums), which then
// skips its own statistics pass. Where no fused engine exists the forward is the plain one and
// `bn` sums as usual. Needs bias = false (the sums would miss the bias) and `bn` directly after
// this convolution; nullptr turns it off. Experimental, used by no model: on an H100 the
// ResNet-50 bf16 step was 15 % slower with it (cuDNN's fused engines are slower than its plain
// convolutions there), the fused statistics are not deterministic from run to run, and a
// ResNet-18 trained with it drifted from the plain model more than those statistics' rounding
// explains (docs/benchmarks.md); the op-level tests match the plain path.
//
// Work runs on the current stream of the module's device through ops::conv2d_* (cuDNN on the
// GPU). Not thread-safe.
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
