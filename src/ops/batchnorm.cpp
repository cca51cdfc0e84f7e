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
void check_training_forward(std::string_view op, const Tensor& y, const BatchNormSaved& saved,
                            const BatchNormRunning& running, const BatchNormInput& in,
                            const BatchNormParams& p) {
  const Tensor& x = in.x;
  check_x(op, x, p);
  check_like_x(op, "y", y, x, p.layout);
  if (in.residual.defined()) check_like_x(op, "residual", in.residual, x, p.layout);
  const Dims4 d = dims4(x.shape(), p.layout);
  check_channel_vectors(op,
                        {{"gamma", in.gamma},
                         {"beta", in.beta},
                         {"save_mean", saved.mean},
                         {"save_invstd", saved.invstd}},
                        d.c, x, p.layout);
  STOKER_CHECK(running.mean.defined() == running.var.defined(), "ops::", op,
               ": running_mean and running_var must both be given or both be undefined");
  if (running.mean.defined()) {
    check_channel_vectors(op, {{"running_mean", running.mean}, {"running_var", running.var}}, d.c,
                          x, p.layout);
  }
  STOKER_CHECK(d.n * d.h * d.w > 1, "ops::", op, ": x ", x.str(), " has ", d.n * d.h * d.w,
               " value per channel (N*H*W); training needs more than one (as PyTorch)");
}

}  // namespace

void batchnorm_forward_train(const Tensor& y, const BatchNormSaved& saved,
                             const BatchNormRunning& running, const BatchNormInput& in,
                             const BatchNormParams& p) {
  constexpr const char* op = "batchnorm_forward_train";
  check_training_forward(op, y, saved, running, in, p);
  if (dims4(in.x.shape(), p.layout).c == 0) return;
  batchnorm_forward_train_stub(in.x.device(), y, saved, running, in, p);
}

void batchnorm_forward_train_from_sums(const Tensor& y, const BatchNormSaved& saved,
                                       const BatchNormRunning& running, const BatchNormInput& in,
                                       const BatchNormSums& sums, const BatchNormParams& p) {
  constexpr const char* op = "batchnorm_forward_train_from_sums";
  const Tensor& x = in.x;
  check_training_forward(op, y, saved, running, in, p);
  check_channel_vectors(op, {{"sum", sums.sum}, {"sum_sq", sums.sum_sq}},
                        dims4(x.shape(), p.layout).c, x, p.layout);
  STOKER_CHECK(!x.device().is_cuda() || p.layout == Layout::nhwc, "ops::", op, ": x ", x.str(),
               " is NCHW on ", x.device().str(),
               "; the GPU takes precomputed sums on the NHWC path only (cuDNN's NCHW batch norm "
               "sums x itself): call batchnorm_forward_train, or use Layout::nhwc");
  if (dims4(x.shape(), p.layout).c == 0) return;
  batchnorm_forward_train_from_sums_stub(x.device(), y, saved, running, in, sums, p);
}

void batchnorm_forward_eval(const Tensor& y, const BatchNormInput& in,
                            const BatchNormRunning& running, const BatchNormParams& p) {
  constexpr const char* op = "batchnorm_forward_eval";
  const Tensor& x = in.x;
  check_x(op, x, p);
  check_like_x(op, "y", y, x, p.layout);
  if (in.residual.defined()) check_like_x(op, "residual", in.residual, x, p.layout);
  check_channel_vectors(op,
                        {{"gamma", in.gamma},
                         {"beta", in.beta},
                         {"running_mean", running.mean},
                         {"running_var", running.var}},
                        dims4(x.shape(), p.layout).c, x, p.layout);
  if (x.numel() == 0) return;
  batchnorm_forward_eval_stub(x.device(), y, in, running, p);
}

bool batchnorm_backward_reads_y(Device device, const BatchNormParams& p, bool with_beta,
                                bool with_dresidual) {
  if (!p.relu) return false;
  // kernels/batchnorm_nhwc.cu's Mask::x: the mask recomputed from x as the normalize pass did.
  return !(device.is_cuda() && p.layout == Layout::nhwc && with_beta && !with_dresidual);
}

void batchnorm_backward(const BatchNormGrads& grads, const Tensor& dy, const BatchNormInput& in,
                        const BatchNormSaved& saved, const BatchNormParams& p, const Tensor& y) {
  constexpr const char* op = "batchnorm_backward";
  const Tensor& x = in.x;
  const Tensor& dresidual = grads.dresidual;
  check_x(op, x, p);
  check_like_x(op, "dy", dy, x, p.layout);
  check_like_x(op, "dx", grads.dx, x, p.layout);
  // The residual's gradient is an output (grads.dresidual); the backward reads no residual.
  STOKER_CHECK(!in.residual.defined(), "ops::", op, ": in.residual ", in.residual.str(),
               " is given, but the backward does not read the residual; leave it undefined and "
               "pass grads.dresidual for the residual's gradient");
  if (p.relu) {
    STOKER_CHECK(y.defined() || !batchnorm_backward_reads_y(x.device(), p, in.beta.defined(),
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
    STOKER_CHECK(dresidual.data() != grads.dx.data() || dresidual.numel() == 0, "ops::", op,
                 ": dresidual ", dresidual.str(),
                 " aliases dx; both are outputs (the residual's gradient and the batch-norm "
                 "input's), give dresidual its own buffer (it may alias dy)");
  }
  check_channel_vectors(op,
                        {{"dgamma", grads.dgamma},
                         {"dbeta", grads.dbeta},
                         {"gamma", in.gamma},
                         {"save_mean", saved.mean},
                         {"save_invstd", saved.invstd}},
                        dims4(x.shape(), p.layout).c, x, p.layout);
  // Optional: the forward's beta, from which a backend may rebuild the ReLU's mask.
  if (in.beta.defined()) {
    check_channel_vectors(op, {{"beta", in.beta}}, dims4(x.shape(), p.layout).c, x, p.layout);
  }
  if (x.numel() == 0) return;
  batchnorm_backward_stub(x.device(), grads, dy, in, saved, p, y);
}

}  // namespace stoker::ops
