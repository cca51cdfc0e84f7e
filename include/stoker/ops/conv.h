// 2-D convolution (cross-correlation, as in PyTorch and cuDNN) and its per-channel bias, in
// Conv2dParams::layout: x [N, C, H, W] or [N, H, W, C], w KCRS or KRSC, y like x with K channels.
// One float dtype for x, w, y; fp32 accumulation; the filter gradient dw is ACCUMULATED and may be
// f32 for half x. CPU: im2col + BLAS; CUDA: cuDNN on the current stream, no TF32 unless allowed.
// Bad shapes throw stoker::Error naming the op and tensors. Thread-safe (distinct outputs).
// Details: docs/ops.md#batch-norm-pooling-and-convolutions.
#pragma once

#include <array>
#include <cstdint>

#include "stoker/core/tensor.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};    // (h, w), >= 1
  std::array<int64_t, 2> padding{0, 0};   // (h, w) zero padding on both sides, >= 0
  std::array<int64_t, 2> dilation{1, 1};  // (h, w), >= 1
  int64_t groups = 1;                     // C and K must both be multiples
  Layout layout = Layout::nchw;
};

// The output shape for input shape `x` and filter shape `w` (validates like the ops).
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);

// y = conv(x, w) (overwritten).
void conv2d_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Conv2dParams& p);
// dx = gradient of the convolution with respect to x, given dy (overwritten). `accumulate`: dx +=
// that gradient instead — a residual block adding its body's input gradient to the shortcut's
// in the convolution's own pass (CUDA: cuDNN's beta = 1, the sum rounded once to dx's dtype; the
// CPU adds the gradient rounded to dx's dtype, as ops::add would: the same bits in f32).
void conv2d_backward_data(const Tensor& dx, const Tensor& dy, const Tensor& w,
                          const Conv2dParams& p, bool accumulate = false);
// dw += gradient of the convolution with respect to w, given dy and the forward's input x;
// `accumulate` false: dw = that gradient (CUDA: cuDNN's beta = 0 — no zeroing pass before it).
void conv2d_backward_filter(const Tensor& dw, const Tensor& dy, const Tensor& x,
                            const Conv2dParams& p, bool accumulate = true);

// y = conv(x, w) and the statistics a batch norm after it needs: per output channel k,
// sum[k] = the sum over n, h, w of y and sum_sq[k] = the sum of y^2 (f32 [K], overwritten). On
// the GPU (f16 / bf16) one cuDNN graph (convolution forward + GenStats), compiled by cuDNN's
// runtime-fusion engines where it has one for the problem: the statistics come from the
// convolution's epilogue in f32 (possibly of the values before y's rounding to its dtype: they
// agree with the sums of y to that rounding), and no pass reads y for them.
// conv2d_forward_stats_supported says whether that engine exists for these tensors on their device
// (asked once per problem; the first call also compiles it); where it does not,
// conv2d_forward_stats throws with cuDNN's reason — run conv2d_forward and the statistics apart.
// CPU: the convolution, then the sums in f64 of y as stored (always supported).
bool conv2d_forward_stats_supported(const Tensor& x, const Tensor& w, const Conv2dParams& p);
void conv2d_forward_stats(const Tensor& y, const Tensor& sum, const Tensor& sum_sq, const Tensor& x,
                          const Tensor& w, const Conv2dParams& p);

// CUDA: the first call of each convolution problem and pass times cuDNN's candidate algorithms
// on that call's buffers and keeps the fastest (PyTorch's torch.backends.cudnn.benchmark): a host
// sync and a scratch workspace once per problem (the warm-up step; a pass first met while a CUDA
// graph is being captured takes the heuristic's pick). The timed pick may differ between runs,
// and with it the rounding of the results. Off by default (cuDNN's heuristics: no device time,
// the same algorithms every run); STOKER_CONV_AUTOTUNE=1 or set_conv_autotune(true) turns it
// on. Problems already planned keep their algorithms.
void set_conv_autotune(bool on);
bool conv_autotune();

// y[n, c, ...] += bias[c] for a 4-D y (float dtype) in `layout` and an f32 bias [C].
void add_channel_bias(const Tensor& y, const Tensor& bias, Layout layout);
// dbias[c] += sum over n, h, w of dy[n, c, h, w]; dbias f32 [C], fp32 accumulation,
// deterministic (fixed reduction order, no atomics).
void channel_bias_grad(const Tensor& dbias, const Tensor& dy, Layout layout);

}  // namespace stoker::ops
