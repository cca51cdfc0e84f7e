// Public batch-norm entry points: validate, then dispatch on the device. The per-channel
// tensors are checked against the channel extent read from x in the given layout, so an NHWC
// tensor passed as NCHW fails here ("expected f32[C]") instead of normalizing the wrong axis.
#include "stoker/ops/batchnorm.h"

#include <fmt/format.h>
#include <cmath>
#include <initializer_list>

#include "ops/batchnorm_stubs.h"
#include "ops/geometry.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {

void check_params(std::string_view op, const BatchNormParams& p) {
  STOKER_CHECK(p.eps > 0.0f && std::isfinite(p.eps), "ops::", op, ": eps ", p.eps,
               " must be positive and finite");
  STOKER_CHECK(p.momentum >= 0.0f && p.momentum <= 1.0f, "ops::", op, ": momentum ", p.momentum,
               " must be in [0, 1]");
}

// x is a float rank-4 image; `other` (named) must have its shape and dtype, on its device.
void check_like_x(std::string_view op, std::string_view name, const Tensor& t, const Tensor& x,
                  Layout layout) {
  detail::check_image(op, name, t, layout);
  detail::check_same_device(op, name, t, "x", x);
  detail::check_same_dtype(op, name, t, "x", x);
  detail::check_shape(op, name, t, x.shape(), fmt::format("the shape of x {}", x.str()));
}

// Every pass: valid parameters and a float rank-4 x on a device this build can use.
void check_x(std::string_view op, const Tensor& x, const BatchNormParams& p) {
  check_params(op, p);
  detail::check_image(op, "x", x, p.layout);
  detail::check_backend(op, x);
}

// A tensor and the name the messages give it.
struct Named {
  std::string_view name;
  const Tensor& t;
};

// Each of `vectors` holds one f32 value per channel of x (c of them), checked in order.
void check_channel_vectors(std::string_view op, std::initializer_list<Named> vectors, int64_t c,
                           const Tensor& x, Layout layout) {
  for (const Named& v : vectors) detail::check_channel_vector(op, v.name, v.t, c, "x", x, layout);
}

// The arguments both training forwards share.
void check_training_forward(std::string_view op, const Tensor& y, const Tensor& save_mean,
                            const Tensor& save_invstd, const Tensor& running_mean,
                            const Tensor& running_var, const Tensor& x, const Tensor& gamma,
                            const Tensor& beta, const BatchNormParams& p, const Tensor& residual) {
  check_x(op, x, p);
  check_like_x(op, "y", y, x, p.layout);
  if (residual.defined()) check_like_x(op, "residual", residual, x, p.layout);
  const Dims4 d = dims4(x.shape(), p.layout);
  check_channel_vectors(
      op,
      {{"gamma", gamma}, {"beta", beta}, {"save_mean", save_mean}, {"save_invstd", save_invstd}},
      d.c, x, p.layout);
  STOKER_CHECK(running_mean.defined() == running_var.defined(), "ops::", op,
               ": running_mean and running_var must both be given or both be undefined");
  if (running_mean.defined()) {
    check_channel_vectors(op, {{"running_mean", running_mean}, {"running_var", running_var}}, d.c,
                          x, p.layout);
  }
  STOKER_CHECK(d.n * d.h * d.w > 1, "ops::", op, ": x ", x.str(), " has ", d.n * d.h * d.w,
               " value per channel (N*H*W); training needs more than one (as PyTorch)");
}

}  // namespace

void batchnorm_forward_train(const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,
                             const Tensor& running_mean, const Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, const BatchNormParams& p,
                             const Tensor& residual) {
  constexpr const char* op = "batchnorm_forward_train";
  check_training_forward(op, y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta,
                         p, residual);
  if (dims4(x.shape(), p.layout).c == 0) return;
  batchnorm_forward_train_stub(x.device(), y, save_mean, save_invstd, running_mean, running_var, x,
                               gamma, beta, p, residual);
}

void batchnorm_forward_train_from_sums(const Tensor& y, const Tensor& save_mean,
                                       const Tensor& save_invstd, const Tensor& running_mean,
                                       const Tensor& running_var, const Tensor& x,
                                       const Tensor& sum, const Tensor& sum_sq, const Tensor& gamma,
                                       const Tensor& beta, const BatchNormParams& p,
                                       const Tensor& residual) {
  constexpr const char* op = "batchnorm_forward_train_from_sums";
  check_training_forward(op, y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta,
                         p, residual);
  check_channel_vectors(op, {{"sum", sum}, {"sum_sq", sum_sq}}, dims4(x.shape(), p.layout).c, x,
                        p.layout);
  STOKER_CHECK(!x.device().is_cuda() || p.layout == Layout::nhwc, "ops::", op, ": x ", x.str(),
               " is NCHW on ", x.device().str(),
               "; the GPU takes precomputed sums on the NHWC path only (cuDNN's NCHW batch norm "
               "sums x itself): call batchnorm_forward_train, or use Layout::nhwc");
  if (dims4(x.shape(), p.layout).c == 0) return;
  batchnorm_forward_train_from_sums_stub(x.device(), y, save_mean, save_invstd, running_mean,
                                         running_var, x, sum, sum_sq, gamma, beta, p, residual);
}

void batchnorm_forward_eval(const Tensor& y, const Tensor& x, const Tensor& gamma,
                            const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, const BatchNormParams& p,
                            const Tensor& residual) {
  constexpr const char* op = "batchnorm_forward_eval";
  check_x(op, x, p);
  check_like_x(op, "y", y, x, p.layout);
  if (residual.defined()) check_like_x(op, "residual", residual, x, p.layout);
  check_channel_vectors(op,
                        {{"gamma", gamma},
                         {"beta", beta},
                         {"running_mean", running_mean},
                         {"running_var", running_var}},
                        dims4(x.shape(), p.layout).c, x, p.layout);
  if (x.numel() == 0) return;
  batchnorm_forward_eval_stub(x.device(), y, x, gamma, beta, running_mean, running_var, p,
                              residual);
}

bool batchnorm_backward_reads_y(Device device, const BatchNormParams& p, bool with_beta,
                                bool with_dresidual) {
  if (!p.relu) return false;
  // kernels/batchnorm_nhwc.cu's Mask::x: the mask recomputed from x as the normalize pass did.
  return !(device.is_cuda() && p.layout == Layout::nhwc && with_beta && !with_dresidual);
}

void batchnorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& gamma,
                        const Tensor& save_mean, const Tensor& save_invstd,
                        const BatchNormParams& p, const Tensor& y, const Tensor& dresidual,
                        const Tensor& beta) {
  constexpr const char* op = "batchnorm_backward";
  check_x(op, x, p);
  check_like_x(op, "dy", dy, x, p.layout);
  check_like_x(op, "dx", dx, x, p.layout);
  if (p.relu) {
    STOKER_CHECK(y.defined() || !batchnorm_backward_reads_y(x.device(), p, beta.defined(),
                                                            dresidual.defined()),
                 "ops::", op,
                 ": params.relu is set but y is undefined; pass the training forward's output "
                 "relu(bn(x)) as y (its mask is y > 0); only the CUDA NHWC path given beta and no "
                 "dresidual rebuilds the mask from x (batchnorm_backward_reads_y)");
    if (y.defined()) check_like_x(op, "y", y, x, p.layout);
  } else {
    STOKER_CHECK(!y.defined(), "ops::", op, ": y ", y.str(),
                 " is given but params.relu is not set; pass y only for the fused ReLU (the "
                 "plain backward reads x, not y)");
  }
  if (dresidual.defined()) {
    check_like_x(op, "dresidual", dresidual, x, p.layout);
    STOKER_CHECK(dresidual.data() != dx.data() || dresidual.numel() == 0, "ops::", op,
                 ": dresidual ", dresidual.str(),
                 " aliases dx; both are outputs (the residual's gradient and the batch-norm "
                 "input's), give dresidual its own buffer (it may alias dy)");
  }
  check_channel_vectors(op,
                        {{"dgamma", dgamma},
                         {"dbeta", dbeta},
                         {"gamma", gamma},
                         {"save_mean", save_mean},
                         {"save_invstd", save_invstd}},
                        dims4(x.shape(), p.layout).c, x, p.layout);
  // Optional: the forward's beta, from which a backend may rebuild the ReLU's mask.
  if (beta.defined()) {
    check_channel_vectors(op, {{"beta", beta}}, dims4(x.shape(), p.layout).c, x, p.layout);
  }
  if (x.numel() == 0) return;
  batchnorm_backward_stub(x.device(), dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, p, y,
                          dresidual, beta);
}

}  // namespace stoker::ops
