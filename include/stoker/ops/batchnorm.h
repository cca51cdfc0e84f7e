// 2-D batch normalization per channel over (N, H, W), PyTorch's semantics (biased batch variance
// to normalize, unbiased for the running statistics), with an optional fused ReLU and residual
// tail y = act(bn(x) + r) that keeps the unfused composition's bits.
// x, y, dy, dx: 4-D, one float dtype, in `layout`; gamma, beta, gradients and statistics: f32 [C];
// math in fp32 (fp64 on the CPU). CUDA on the current stream: cuDNN for NCHW and evaluation,
// stoker's deterministic kernels for NHWC training. Thread-safe (distinct outputs).
// Details: docs/ops.md#batch-norm-pooling-and-convolutions.
#pragma once

#include "stoker/core/tensor.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

struct BatchNormParams {
  float eps = 1e-5f;      // > 0
  float momentum = 0.1f;  // in [0, 1]; the weight of the new batch in the running statistics
  Layout layout = Layout::nchw;
  bool relu = false;  // y = relu(bn(x)); the backward then needs the forward's output y
};

// The arguments that travel together, so that each op's signature is written once and reads at
// the call: ops::batchnorm_forward_train(y, {mean, invstd}, {run_mean, run_var}, {x, g, b}, p).
// Plain aggregates of tensor handles (views, nothing is copied or owned beyond the handle).

// What the normalization reads: x, the affine gamma and beta (f32 [C]) and the optional residual
// (x's shape, dtype and layout) added before the activation: y = act(bn(x) + residual).
struct BatchNormInput {
  Tensor x;
  Tensor gamma;
  Tensor beta;
  Tensor residual;
};
// The running statistics (f32 [C]): updated in place by the training forwards (both undefined:
// no update, track_running_stats=False), read by the evaluation forward.
struct BatchNormRunning {
  Tensor mean;
  Tensor var;
};
// The batch statistics a training forward writes for the backward (f32 [C]): the mean and
// 1 / sqrt(biased var + eps).
struct BatchNormSaved {
  Tensor mean;
  Tensor invstd;
};
// The sums of x and of x^2 per channel over (N, H, W) (f32 [C]).
struct BatchNormSums {
  Tensor sum;
  Tensor sum_sq;
};
// The backward's outputs: dx (overwritten), dgamma and dbeta (f32 [C], ACCUMULATED +=), and the
// optional residual gradient dresidual (x's shape and dtype, overwritten).
struct BatchNormGrads {
  Tensor dx;
  Tensor dgamma;
  Tensor dbeta;
  Tensor dresidual;
};

// Batch statistics into `saved`; `running` is updated in place (or skipped, see above). Needs
// more than one value per channel. y may alias in.x or in.residual.
void batchnorm_forward_train(const Tensor& y, const BatchNormSaved& saved,
                             const BatchNormRunning& running, const BatchNormInput& in,
                             const BatchNormParams& p);
// The training forward with the batch's statistics already summed in `sums` — what
// ops::conv2d_forward_stats computes in the convolution that produced x — so no pass reads x for
// them. mean = sum / M and the biased
// var = max(sum_sq / M - mean^2, 0) (fp64 from the f32 sums; the one-pass form, so a channel
// whose |mean| is large against its spread loses digits that the two-pass forward above keeps:
// cuDNN's and NVIDIA's ResNet recipes accept that for convolution outputs). Everything else —
// saved and running statistics, the fused ReLU and residual, y's rounding — as
// batchnorm_forward_train. CPU and NHWC on CUDA; NCHW on CUDA (cuDNN's batch norm, which sums
// itself) is refused.
void batchnorm_forward_train_from_sums(const Tensor& y, const BatchNormSaved& saved,
                                       const BatchNormRunning& running, const BatchNormInput& in,
                                       const BatchNormSums& sums, const BatchNormParams& p);
// Running statistics (momentum is ignored); both must be defined. The residual as in the training
// forward.
void batchnorm_forward_eval(const Tensor& y, const BatchNormInput& in,
                            const BatchNormRunning& running, const BatchNormParams& p);
// See BatchNormGrads for the outputs. Uses the training forward's saved statistics (eps must be
// the forward's) and its gamma (in.x, in.gamma; in.residual must be undefined). With p.relu, y is
// the training forward's output relu(bn(x)) (x's shape and dtype) and dy is the gradient
// with respect to it; without p.relu, y must be undefined. For a forward with a residual, pass
// grads.dresidual: it is overwritten with the residual's gradient
// dz = dy * (y > 0) (dy without p.relu), and dx is the batch-norm gradient of that dz;
// dresidual must not alias dx (it may alias dy).
// in.beta (optional): the forward's beta, unchanged since, like gamma. With p.relu and
// no dresidual a backend MAY then rebuild the mask y > 0 from x, gamma, beta and the saved
// statistics instead of reading y (the CUDA NHWC kernels do: two fewer reads of an
// activation-sized tensor, the same bits); where batchnorm_backward_reads_y says it does not, y
// may be left undefined, so a caller need not keep it. The CPU and cuDNN paths read y (the CPU
// forward normalizes with its fp64 statistics, which the saved f32 ones cannot reproduce).
void batchnorm_backward(const BatchNormGrads& grads, const Tensor& dy, const BatchNormInput& in,
                        const BatchNormSaved& saved, const BatchNormParams& p,
                        const Tensor& y = Tensor());

// Whether batchnorm_backward on `device` with these params reads y: with p.relu, unless it can
// rebuild the mask from x (CUDA, NHWC, given beta, without dresidual). False: y may be undefined.
bool batchnorm_backward_reads_y(Device device, const BatchNormParams& p, bool with_beta,
                                bool with_dresidual);

}  // namespace stoker::ops
