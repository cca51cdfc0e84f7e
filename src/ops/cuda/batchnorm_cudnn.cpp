// CUDA batch normalization through cuDNN's spatial batch norm (cudnnBatchNormalization*;
// deprecated in cuDNN 9, present in every 9.x — see cudnn_util.h).
//
// Why these calls match the contract of batchnorm.h without extra kernels:
//  - cuDNN's training forward updates running = (1 - factor) * running + factor * stat with the
//    UNBIASED batch variance for running_var — PyTorch's rule — so factor = momentum.
//  - resultSaveInvVariance is 1 / sqrt(var + eps) with the biased variance: our save_invstd.
//  - the backward blends dgamma/dbeta with betaParamDiff = 1: they accumulate (+=) in place.
// Mode: CUDNN_BATCHNORM_SPATIAL for NCHW and for evaluation. NHWC training uses
// CUDNN_BATCHNORM_SPATIAL_PERSISTENT, as PyTorch does for channels-last: in SPATIAL mode cuDNN
// runs its NCHW kernels over NHWC data (strided), which made batch norm 86 % of a ResNet-18 bf16
// step on the H200 (Nsight Compute, 2026-11-29); the persistent NHWC kernels read each tensor
// once. (Persistent mode may reduce with scaled integer atomics: deterministic, with a narrower
// range than fp32 for extreme activations.) The per-channel tensors are f32 for every data type
// (cudnnDeriveBNTensorDescriptor's float for half data).
#include <cudnn.h>

#include "ops/backend.h"
#include "ops/cuda/cudnn_util.h"

namespace stoker::ops::cuda {

namespace {

cudnnBatchNormMode_t mode_for(Layout layout, bool training) {
  return training && layout == Layout::nhwc ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT
                                            : CUDNN_BATCHNORM_SPATIAL;
}

// Descriptors of x (and y, dy, dx) and of the per-channel tensors.
struct BnDescs {
  TensorDesc x;
  TensorDesc channel;
  cudnnBatchNormMode_t mode;
  BnDescs(const Tensor& t, Layout layout, bool training) : mode(mode_for(layout, training)) {
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

}  // namespace

void batchnorm_forward_train(const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,
                             const Tensor& running_mean, const Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, const BatchNormParams& p) {
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  const BnDescs desc(x, p.layout, /*training=*/true);
  const CudnnLease lease(d);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnBatchNormalizationForwardTraining(
                 lease.handle(), desc.mode, &one, &zero, desc.x.get(), x.data(), desc.x.get(), y.data(),
                 desc.channel.get(), gamma.data(), beta.data(), p.momentum, opt(running_mean),
                 opt(running_var), p.eps, save_mean.data(), save_invstd.data()),
             "batchnorm_forward_train", "cudnnBatchNormalizationForwardTraining", x, p.layout);
}

void batchnorm_forward_eval(const Tensor& y, const Tensor& x, const Tensor& gamma,
                            const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, const BatchNormParams& p) {
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  const BnDescs desc(x, p.layout, /*training=*/false);
  const CudnnLease lease(d);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnBatchNormalizationForwardInference(
                 lease.handle(), desc.mode, &one, &zero, desc.x.get(), x.data(), desc.x.get(), y.data(),
                 desc.channel.get(), gamma.data(), beta.data(), running_mean.data(),
                 running_var.data(), p.eps),
             "batchnorm_forward_eval", "cudnnBatchNormalizationForwardInference", x, p.layout);
}

void batchnorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& gamma,
                        const Tensor& save_mean, const Tensor& save_invstd,
                        const BatchNormParams& p) {
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  const BnDescs desc(x, p.layout, /*training=*/true);
  const CudnnLease lease(d);
  const float one = 1.0f, zero = 0.0f;
  check_call(cudnnBatchNormalizationBackward(
                 lease.handle(), desc.mode, &one, &zero, &one, &one, desc.x.get(), x.data(),
                 desc.x.get(), dy.data(), desc.x.get(), dx.data(), desc.channel.get(), gamma.data(),
                 dgamma.data(), dbeta.data(), p.eps, save_mean.data(), save_invstd.data()),
             "batchnorm_backward", "cudnnBatchNormalizationBackward", x, p.layout);
}

}  // namespace stoker::ops::cuda
