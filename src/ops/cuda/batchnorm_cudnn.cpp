// CUDA batch normalization: cuDNN's spatial batch norm (cudnnBatchNormalization*; deprecated in
// cuDNN 9, present in every 9.x — see cudnn_util.h) for NCHW and for the evaluation forward;
// stoker's own kernels (kernels/batchnorm_nhwc.cu) for the NHWC (channels-last) training forward
// and the NHWC backward.
//
// Why not cuDNN for NHWC training: in SPATIAL mode cuDNN ran its NCHW kernels over NHWC data
// (86 % of a ResNet-18 bf16 step), and CUDNN_BATCHNORM_SPATIAL_PERSISTENT, PyTorch's choice for
// channels-last, was still catastrophically slow: the forward of the ResNet stem BN, x =
// [256, 112, 112, 64] bf16 (411 MB), took ~19 ms (21 GB/s on an H200 that streams 4 TB/s) and
// batch norm stayed 85 % of the step (Nsight Compute, 2026-11-29). Batch norm is memory bound;
// the NHWC kernels read x twice and write y once (forward), read dy and x twice and write dx
// once (backward), with deterministic fp32 / fp64 reductions.
//
// Why the cuDNN calls match the contract of batchnorm.h without extra kernels:
//  - cuDNN's training forward updates running = (1 - factor) * running + factor * stat with the
//    UNBIASED batch variance for running_var — PyTorch's rule — so factor = momentum.
//  - resultSaveInvVariance is 1 / sqrt(var + eps) with the biased variance: our save_invstd.
//  - the backward blends dgamma/dbeta with betaParamDiff = 1: they accumulate (+=) in place.
// Mode: CUDNN_BATCHNORM_SPATIAL (NCHW training, and evaluation in either layout). The
// per-channel tensors are f32 for every data type (cudnnDeriveBNTensorDescriptor's float for
// half data).
//
// Fused ReLU (BatchNormParams::relu): the NHWC training kernels apply it inside their passes
// (their backward rebuilds the mask from x when given beta); the cuDNN paths run the
// composition — cuDNN, then the ReLU kernel in place on y (forwards), or relu_backward of y into
// a temporary dz that cuDNN's backward reads. Correct, not fused.
// The residual tail likewise: the NHWC training kernels add the residual in their normalize pass
// and write dresidual in their sums pass; the cuDNN paths run add then relu_forward (forwards)
// and relu_backward (or a copy) into dresidual, which cuDNN's backward then reads as dz.
#include <cudnn.h>

#include "ops/activation_stubs.h"
#include "ops/batchnorm_stubs.h"
#include "ops/cuda/batchnorm_nhwc.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/elementwise_stubs.h"
#include "stoker/ops/layout.h"

namespace stoker::ops::cuda {

namespace {

// Descriptors of x (and y, dy, dx) and of the per-channel tensors.
struct BnDescs {
  TensorDesc x;
  TensorDesc channel;
  cudnnBatchNormMode_t mode;
  BnDescs(const Tensor& t, Layout layout) : mode(CUDNN_BATCHNORM_SPATIAL) {
    const Dims4 d = dims4(t.shape(), layout);
    x.set(t.dtype(), layout, d.n, d.c, d.h, d.w);
    STOKER_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(channel.get(), x.get(), mode));
  }
};

void check_call(cudnnStatus_t status, const char* op, const char* call, const Tensor& x,
                Layout layout) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  STOKER_THROW("ops::", op, ": ", call, " failed with ", cudnnGetErrorString(status), " for x ",
               x.str(), " (", layout_name(layout), ")");
}

void* opt(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

// The composition after cuDNN's forward wrote bn(x) into y: y = act(y + residual).
void finish_forward(const Tensor& y, const Tensor& residual, bool relu) {
  if (residual.defined()) add_impl(y, residual, y);
  if (relu) relu_forward_impl(y, y);
}

}  // namespace

void batchnorm_forward_train(const Tensor& y, const BatchNormSaved& saved,
                             const BatchNormRunning& running, const BatchNormInput& in,
                             const BatchNormParams& p) {
  const Tensor &x = in.x, &gamma = in.gamma, &beta = in.beta;
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  if (p.layout == Layout::nhwc) {
    batchnorm_nhwc_forward_train(y, saved, running, in, p);
    return;
  }
  const BnDescs desc(x, p.layout);
  const CudnnLease lease(d);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnBatchNormalizationForwardTraining(lease.handle(), desc.mode, &one, &zero,
                                                    desc.x.get(), x.data(), desc.x.get(), y.data(),
                                                    desc.channel.get(), gamma.data(), beta.data(),
                                                    p.momentum, opt(running.mean), opt(running.var),
                                                    p.eps, saved.mean.data(), saved.invstd.data()),
             "batchnorm_forward_train", "cudnnBatchNormalizationForwardTraining", x, p.layout);
  finish_forward(y, in.residual, p.relu);
}

// The front end refuses NCHW: cuDNN's batch norm sums x itself.
void batchnorm_forward_train_from_sums(const Tensor& y, const BatchNormSaved& saved,
                                       const BatchNormRunning& running, const BatchNormInput& in,
                                       const BatchNormSums& sums, const BatchNormParams& p) {
  const core::DeviceScope scope(in.x.device().index);
  batchnorm_nhwc_forward_train_from_sums(y, saved, running, in, sums, p);
}

void batchnorm_forward_eval(const Tensor& y, const BatchNormInput& in,
                            const BatchNormRunning& running, const BatchNormParams& p) {
  const Tensor &x = in.x, &gamma = in.gamma, &beta = in.beta;
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  const BnDescs desc(x, p.layout);
  const CudnnLease lease(d);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnBatchNormalizationForwardInference(
                 lease.handle(), desc.mode, &one, &zero, desc.x.get(), x.data(), desc.x.get(),
                 y.data(), desc.channel.get(), gamma.data(), beta.data(), running.mean.data(),
                 running.var.data(), p.eps),
             "batchnorm_forward_eval", "cudnnBatchNormalizationForwardInference", x, p.layout);
  finish_forward(y, in.residual, p.relu);
}

void batchnorm_backward(const BatchNormGrads& grads, const Tensor& dy, const BatchNormInput& in,
                        const BatchNormSaved& saved, const BatchNormParams& p, const Tensor& y) {
  const Tensor &dx = grads.dx, &dgamma = grads.dgamma, &dbeta = grads.dbeta;
  const Tensor& dresidual = grads.dresidual;
  const Tensor &x = in.x, &gamma = in.gamma, &save_mean = saved.mean, &save_invstd = saved.invstd;
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  if (p.layout == Layout::nhwc) {
    batchnorm_nhwc_backward(grads, dy, in, saved, p, y);
    return;
  }
  // The fused ReLU's composition: cuDNN reads dz = dy * (y > 0) from a temporary, or from
  // dresidual, which receives dz anyway. The mask comes from y (beta is not needed).
  Tensor dz = dy;
  if (dresidual.defined()) {
    dz = dresidual;
    if (p.relu) {
      relu_backward_impl(dz, dy, y);
    } else if (dz.data() != dy.data()) {
      stoker::ops::copy(dz, dy);
    }
  } else if (p.relu) {
    dz = Tensor::empty(dy.shape(), dy.dtype(), d);
    relu_backward_impl(dz, dy, y);
  }
  const BnDescs desc(x, p.layout);
  const CudnnLease lease(d);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnBatchNormalizationBackward(
                 lease.handle(), desc.mode, &one, &zero, &one, &one, desc.x.get(), x.data(),
                 desc.x.get(), dz.data(), desc.x.get(), dx.data(), desc.channel.get(), gamma.data(),
                 dgamma.data(), dbeta.data(), p.eps, save_mean.data(), save_invstd.data()),
             "batchnorm_backward", "cudnnBatchNormalizationBackward", x, p.layout);
}

STOKER_REGISTER_STUB(batchnorm_forward_train, batchnorm_forward_train);
STOKER_REGISTER_STUB(batchnorm_forward_train_from_sums, batchnorm_forward_train_from_sums);
STOKER_REGISTER_STUB(batchnorm_forward_eval, batchnorm_forward_eval);
STOKER_REGISTER_STUB(batchnorm_backward, batchnorm_backward);

}  // namespace stoker::ops::cuda
