// 2-D batch normalization over (N, H, W) per channel, PyTorch's semantics:
//   y = (x - mean) * invstd * gamma + beta,  invstd = 1 / sqrt(var + eps)
// Training uses the batch's mean and BIASED variance and updates the running statistics with
// the UNBIASED variance (var * M / (M - 1), M = N * H * W):
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * unbiased_var
// Evaluation uses the running statistics.
//
// x, y, dy, dx: 4-D, one float dtype, in `layout`. gamma, beta, dgamma, dbeta, running and
// saved statistics: f32 [C]. save_mean / save_invstd are written by the training forward and
// read by the backward. Statistics and all math are fp32 (fp64 on the CPU).
//
// CUDA, on the current stream: cuDNN's spatial batch normalization for NCHW and for the
// evaluation forward; stoker's own kernels (kernels/batchnorm_nhwc.cu) for the NHWC training
// forward and the NHWC backward, because cuDNN's NHWC batch norm (persistent mode included)
// ran at ~21 GB/s on an H200 (19 ms for the ResNet stem's [256, 112, 112, 64] bf16 forward;
// 85 % of a ResNet-18 step, Nsight Compute). Those are deterministic (fixed reduction order, no
// atomics) and synchronize nothing. Thread-safe (distinct outputs).
//
// Fused ReLU (BatchNormParams::relu): the forwards compute y = relu(bn(x)) and the backward
// takes that OUTPUT y besides x and computes the batch-norm gradient of dz = dy * (y > 0)
// without storing dz. The result is exactly the composition batchnorm_forward_* then
// relu_forward, and relu_backward then batchnorm_backward (ops/activation.h: NaN counts as
// positive, the ReLU's output is rounded once to x's dtype): bit for bit on the CPU, and on CUDA
// whenever the plain kernels would pick the same vector width (alignment of y too, if read).
// The NHWC training kernels fuse it into their passes: the normalize pass writes relu(bn(x))
// (forward: 2 reads + 1 write of activation-sized tensors instead of 3 + 2 for BN then ReLU),
// and the backward's sums pass and dx pass mask dy as they load it (no dz buffer). Given the
// backward's `beta` (and no dresidual), they rebuild the mask from x, which they read anyway,
// recomputing y as the normalize pass did: 4 reads + 1 write (dy and x twice, dx) instead of
// 6 + 2 for relu_backward then the BN backward; without beta they read y: 6 + 1. The cuDNN
// paths (NCHW, and the evaluation forward) run the composition: correct, not fused.
//
// Fused residual tail (a ResNet block's y = relu(bn(x) + r)): the forwards take an optional
// `residual` r (x's shape, dtype and layout) and compute y = act(bn(x) + r), act = ReLU with
// p.relu, else the identity. The result is exactly the composition batchnorm_forward_*,
// add(y, r, y) (ops/elementwise.h: fp32 math, one rounding to the dtype, as nn::Residual adds)
// and, with p.relu, relu_forward: bn(x) is rounded to x's dtype, the sum rounded once more, then
// the ReLU. The backward's optional `dresidual` output receives dz = dy * (y > 0) (dy without
// p.relu), the gradient of r, and the batch-norm gradient dx is that of the same dz: both
// branches of the block get dz without a separate relu_backward pass or buffer. dresidual must
// not alias dx (it may alias dy). The NHWC training kernels fold it into their passes, counted
// in reads + writes of activation-sized tensors:
//   forward  (BN, add, ReLU kernels: 5 + 3)            -> 3 + 1: x twice, r, y
//   backward (relu_backward, BN backward: 6 + 2)       -> 5 + 2: the sums pass reads dy, y, x and
//            writes dz into dresidual; the dx pass reads dz (there) and x and writes dx
// The cuDNN paths (NCHW, and the evaluation forward) run the composition.
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

// Batch statistics; running_mean / running_var are updated in place (pass both undefined to
// skip the update: track_running_stats=False). Needs more than one value per channel.
// `residual` (optional, see above): y = act(bn(x) + residual); y may alias x or residual.
void batchnorm_forward_train(const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,
                             const Tensor& running_mean, const Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, const BatchNormParams& p,
                             const Tensor& residual = Tensor());
// The training forward with the batch's statistics already summed: sum[c] and sum_sq[c] (f32
// [C]) are the sums of x and of x^2 over (N, H, W) — what ops::conv2d_forward_stats computes in
// the convolution that produced x — so no pass reads x for them. mean = sum / M and the biased
// var = max(sum_sq / M - mean^2, 0) (fp64 from the f32 sums; the one-pass form, so a channel
// whose |mean| is large against its spread loses digits that the two-pass forward above keeps:
// cuDNN's and NVIDIA's ResNet recipes accept that for convolution outputs). Everything else —
// saved and running statistics, the fused ReLU and residual, y's rounding — as
// batchnorm_forward_train. CPU and NHWC on CUDA; NCHW on CUDA (cuDNN's batch norm, which sums
// itself) is refused.
void batchnorm_forward_train_from_sums(const Tensor& y, const Tensor& save_mean,
                                       const Tensor& save_invstd, const Tensor& running_mean,
                                       const Tensor& running_var, const Tensor& x,
                                       const Tensor& sum, const Tensor& sum_sq, const Tensor& gamma,
                                       const Tensor& beta, const BatchNormParams& p,
                                       const Tensor& residual = Tensor());
// Running statistics (momentum is ignored). `residual` as in the training forward.
void batchnorm_forward_eval(const Tensor& y, const Tensor& x, const Tensor& gamma,
                            const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, const BatchNormParams& p,
                            const Tensor& residual = Tensor());
// dx is overwritten; dgamma and dbeta are ACCUMULATED (+=). Uses the training forward's saved
// statistics (eps must be the forward's) and its gamma. With p.relu, y is the training forward's
// output relu(bn(x)) (x's shape and dtype) and dy is the gradient
// with respect to it; without p.relu, y must be undefined. For a forward with a residual, pass
// `dresidual` (x's shape and dtype): it is overwritten with the residual's gradient
// dz = dy * (y > 0) (dy without p.relu), and dx is the batch-norm gradient of that dz.
// `beta` (optional, f32 [C]): the forward's beta, unchanged since, like gamma. With p.relu and
// no dresidual a backend MAY then rebuild the mask y > 0 from x, gamma, beta and the saved
// statistics instead of reading y (the CUDA NHWC kernels do: two fewer reads of an
// activation-sized tensor, the same bits); where batchnorm_backward_reads_y says it does not, y
// may be left undefined, so a caller need not keep it. The CPU and cuDNN paths read y (the CPU
// forward normalizes with its fp64 statistics, which the saved f32 ones cannot reproduce).
void batchnorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& gamma,
                        const Tensor& save_mean, const Tensor& save_invstd,
                        const BatchNormParams& p, const Tensor& y = Tensor(),
                        const Tensor& dresidual = Tensor(), const Tensor& beta = Tensor());

// Whether batchnorm_backward on `device` with these params reads y: with p.relu, unless it can
// rebuild the mask from x (CUDA, NHWC, given beta, without dresidual). False: y may be undefined.
bool batchnorm_backward_reads_y(Device device, const BatchNormParams& p, bool with_beta,
                                bool with_dresidual);

}  // namespace stoker::ops
