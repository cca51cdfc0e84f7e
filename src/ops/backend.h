// Private: the per-backend entry points behind the public ops. The public functions in
// src/ops/*.cpp validate their inputs and dispatch on the device; the functions here may
// assume valid, contiguous, same-device inputs.
//   cpu::  src/ops/cpu/*.cpp   oneTBB-parallel reference implementations (GEMM through BLAS)
//   cuda:: kernels/*.cu and src/ops/cuda/*.cpp, enqueued on the current stream of the device
#pragma once

#include <cstdint>
#include <span>

#include "ops/op_cost.h"
#include "stoker/core/tensor.h"
#include "stoker/ops/batchnorm.h"
#include "stoker/ops/conv.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/pool.h"
#include "stoker/ops/reduce.h"

namespace stoker::ops {

#define STOKER_OPS_BACKEND_DECLS                                                                   \
  void fill(const Tensor& out, double value);                                                      \
  void cast(const Tensor& dst, const Tensor& src); /* float dtypes; also same-dtype copy */        \
  void cast_multi(std::span<const Tensor> dsts, std::span<const Tensor> srcs);                     \
  void add(const Tensor& out, const Tensor& a, const Tensor& b);                                   \
  void mul(const Tensor& out, const Tensor& a, const Tensor& b);                                   \
  void axpy(const Tensor& y, float alpha, const Tensor& x);                                        \
  void scale(const Tensor& x, float alpha);                                                        \
  void scale_by(const Tensor& x, const Tensor& factor);                                            \
  /* out: rank-0 f32 tensor on the same device */                                                  \
  void reduce(std::span<const Tensor> xs, Reduction r, const Tensor& out);                         \
  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o);              \
  void random_uniform(const Tensor& out, float lo, float hi, uint64_t seed, uint64_t offset);      \
  void random_normal(const Tensor& out, float mean, float std, uint64_t seed, uint64_t offset);    \
  /* nn ops (ops/activation.h, linear.h, layernorm.h, embedding.h, loss.h) */                      \
  void relu_forward(const Tensor& y, const Tensor& x);                                             \
  void relu_backward(const Tensor& dx, const Tensor& dy, const Tensor& y);                         \
  void gelu_forward(const Tensor& y, const Tensor& x);                                             \
  void gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x);                         \
  void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t offset); \
  void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed,                \
                        uint64_t offset);                                                          \
  void add_bias(const Tensor& y, const Tensor& bias);                                              \
  void bias_grad(const Tensor& dbias, const Tensor& dy);                                           \
  void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, \
                         const Tensor& gamma, const Tensor& beta, float eps);                      \
  void layernorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,             \
                          const Tensor& dy, const Tensor& x, const Tensor& mean,                   \
                          const Tensor& rstd, const Tensor& gamma);                                \
  /* sum may alias x or residual; dsum may alias dy and/or dsum_in (ops/layernorm.h) */            \
  void add_layernorm_forward(const Tensor& y, const Tensor& sum, const Tensor& mean,               \
                             const Tensor& rstd, const Tensor& x, const Tensor& residual,          \
                             const Tensor& gamma, const Tensor& beta, float eps);                  \
  void add_layernorm_backward(const Tensor& dsum, const Tensor& dgamma, const Tensor& dbeta,       \
                              const Tensor& dy, const Tensor& dsum_in, const Tensor& sum,          \
                              const Tensor& mean, const Tensor& rstd, const Tensor& gamma);        \
  void embedding_forward(const Tensor& y, const Tensor& ids, const Tensor& table);                 \
  void embedding_backward(const Tensor& dtable, const Tensor& dy, const Tensor& ids);              \
  /* divide_by undefined: loss = mean, count = rows counted; defined: loss += sum / divide_by */   \
  void cross_entropy_forward(const Tensor& loss, const Tensor& count, const Tensor& lse,           \
                             const Tensor& logits, const Tensor& target, int64_t ignore_index,     \
                             float label_smoothing, const Tensor& divide_by);                      \
  void count_targets(const Tensor& count, const Tensor& target, int64_t ignore_index);             \
  void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& target,   \
                              const Tensor& lse, const Tensor& count, int64_t ignore_index,        \
                              float label_smoothing, float scale, const Tensor& grad_scale);       \
  void mse_forward(const Tensor& loss, const Tensor& pred, const Tensor& target);                  \
  void mse_backward(const Tensor& dpred, const Tensor& pred, const Tensor& target, float scale,    \
                    const Tensor& grad_scale);

namespace cpu {
STOKER_OPS_BACKEND_DECLS
}  // namespace cpu

namespace cuda {
STOKER_OPS_BACKEND_DECLS
}  // namespace cuda

#undef STOKER_OPS_BACKEND_DECLS

// Image ops (layout.h, conv.h, batchnorm.h, pool.h). CUDA: cuDNN (src/ops/cuda/*_cudnn.cpp) and
// kernels/channel.cu; see the public headers for the contracts.
#define STOKER_OPS_IMAGE_BACKEND_DECLS                                                             \
  void convert_layout(const Tensor& dst, const Tensor& src, Layout from, Layout to);               \
  void add_channel_bias(const Tensor& y, const Tensor& bias, Layout layout);                       \
  void channel_bias_grad(const Tensor& dbias, const Tensor& dy, Layout layout);                    \
  void conv2d_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Conv2dParams& p);   \
  void conv2d_backward_data(const Tensor& dx, const Tensor& dy, const Tensor& w,                   \
                            const Conv2dParams& p, bool accumulate);                               \
  void conv2d_backward_filter(const Tensor& dw, const Tensor& dy, const Tensor& x,                 \
                              const Conv2dParams& p, bool accumulate);                             \
  void conv2d_forward_stats(const Tensor& y, const Tensor& sum, const Tensor& sum_sq,              \
                            const Tensor& x, const Tensor& w, const Conv2dParams& p);              \
  std::string conv2d_forward_stats_unsupported(const Tensor& x, const Tensor& w,                   \
                                               const Conv2dParams& p);                             \
  void batchnorm_forward_train(                                                                    \
      const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,                         \
      const Tensor& running_mean, const Tensor& running_var, const Tensor& x, const Tensor& gamma, \
      const Tensor& beta, const BatchNormParams& p, const Tensor& residual);                       \
  void batchnorm_forward_train_from_sums(                                                          \
      const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,                         \
      const Tensor& running_mean, const Tensor& running_var, const Tensor& x, const Tensor& sum,   \
      const Tensor& sum_sq, const Tensor& gamma, const Tensor& beta, const BatchNormParams& p,     \
      const Tensor& residual);                                                                     \
  void batchnorm_forward_eval(const Tensor& y, const Tensor& x, const Tensor& gamma,               \
                              const Tensor& beta, const Tensor& running_mean,                      \
                              const Tensor& running_var, const BatchNormParams& p,                 \
                              const Tensor& residual);                                             \
  void batchnorm_backward(                                                                         \
      const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& dy,               \
      const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,    \
      const BatchNormParams& p, const Tensor& y, const Tensor& dresidual, const Tensor& beta);     \
  void maxpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p);                 \
  void maxpool2d_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& y,    \
                          const Pool2dParams& p);                                                  \
  void maxpool2d_forward_argmax(const Tensor& y, const Tensor& argmax, const Tensor& x,            \
                                const Pool2dParams& p);                                            \
  void maxpool2d_backward_argmax(const Tensor& dx, const Tensor& dy, const Tensor& argmax,         \
                                 const Pool2dParams& p);                                           \
  void avgpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p);                 \
  void avgpool2d_backward(const Tensor& dx, const Tensor& dy, const Pool2dParams& p);              \
  void global_avgpool_forward(const Tensor& y, const Tensor& x, Layout layout);                    \
  void global_avgpool_backward(const Tensor& dx, const Tensor& dy, Layout layout);

namespace cpu {
STOKER_OPS_IMAGE_BACKEND_DECLS
}  // namespace cpu

namespace cuda {
STOKER_OPS_IMAGE_BACKEND_DECLS
}  // namespace cuda

#undef STOKER_OPS_IMAGE_BACKEND_DECLS

// Runs backend function `fn` for the device (validated before: CUDA tensors only reach here in
// CUDA builds), reported to this thread's core::OpListener when one is installed (op_cost.h).
#if STOKER_WITH_CUDA
#define STOKER_DISPATCH(device, fn, ...)                                                 \
  ::stoker::ops::detail::profiled_call(                                                  \
      #fn, (device),                                                                     \
      [&] { return (device).is_cuda() ? cuda::fn(__VA_ARGS__) : cpu::fn(__VA_ARGS__); }, \
      __VA_ARGS__)
#else
#define STOKER_DISPATCH(device, fn, ...) \
  ::stoker::ops::detail::profiled_call(  \
      #fn, (device), [&] { return cpu::fn(__VA_ARGS__); }, __VA_ARGS__)
#endif

}  // namespace stoker::ops
