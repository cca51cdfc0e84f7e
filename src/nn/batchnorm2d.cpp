// BatchNorm2d over ops::batchnorm_*. Training-mode backward is the op's batch-statistics
// gradient. Evaluation mode is a fixed per-channel affine map, y = x * s + t with
// s = gamma / sqrt(running_var + eps); its backward is composed from existing ops rather than a
// dedicated kernel (it is the rare path: fine-tuning with frozen statistics):
//   dx     = dy * s               = batchnorm_forward_eval(dy) with mean 0 and beta 0
//   dbeta += sum dy               = channel_bias_grad(dy)
//   dgamma += sum dy * xhat       with xhat = batchnorm_forward_eval(x) with gamma 1, beta 0
// With the fused ReLU the training backward passes the saved output and beta to the op (which
// masks dy inside its passes; the NHWC kernels rebuild the mask from x and beta rather than
// read y); the evaluation backward first applies relu_backward (the rare path).
// The residual tail passes r to the forward op and a dresidual buffer to the backward op; the
// evaluation backward computes dz into that buffer (relu_backward, or a copy of dy) and goes on
// from dz as above.
#include "stoker/nn/batchnorm2d.h"

#include <fmt/format.h>
#include <cmath>

#include "stoker/core/error.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/conv.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"

namespace stoker::nn {

namespace {

Tensor filled(int64_t n, double value) {
  Tensor t = Tensor::empty({n}, DType::f32, Device::cpu());
  ops::fill(t, value);
  return t;
}

}  // namespace

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum, ops::Layout layout)
    : channels_(channels), params_{.eps = eps, .momentum = momentum, .layout = layout} {
  STOKER_CHECK(channels > 0, "BatchNorm2d(", channels, "): channel count must be positive");
  STOKER_CHECK(eps > 0.0f && momentum >= 0.0f && momentum <= 1.0f, "BatchNorm2d(", channels,
               "): eps ", eps, " must be positive and momentum ", momentum, " in [0, 1]");
  weight_ = Parameter(filled(channels, 1.0));
  bias_ = Parameter(filled(channels, 0.0));
  running_mean_ = filled(channels, 0.0);
  running_var_ = filled(channels, 1.0);
  register_parameter("weight", weight_);
  register_parameter("bias", bias_);
  register_buffer("running_mean", running_mean_);
  register_buffer("running_var", running_var_);
}

void BatchNorm2d::set_activation(Activation activation) {
  STOKER_CHECK(activation == Activation::none || activation == Activation::relu, describe(),
               ": set_activation supports Activation::none and Activation::relu; follow the "
               "BatchNorm2d with an nn::GELU for GELU");
  params_.relu = activation == Activation::relu;
  y_ = Tensor();
}

void BatchNorm2d::set_residual_tail(bool on) {
  residual_tail_ = on;
  residual_ = dresidual_ = Tensor();
}

void BatchNorm2d::set_residual(const Tensor& r) {
  STOKER_CHECK(residual_tail_, describe(),
               ": set_residual needs the residual tail mode (set_residual_tail(true), which "
               "nn::Residual::set_tail_relu sets)");
  STOKER_CHECK(r.defined(), describe(), ": set_residual got an undefined tensor");
  residual_ = r;
}

Tensor BatchNorm2d::take_residual_grad() {
  STOKER_CHECK(dresidual_.defined(), describe(),
               ": no residual gradient to take; it comes from a backward in residual tail mode "
               "and is handed out once");
  Tensor d = std::move(dresidual_);
  dresidual_ = Tensor();
  return d;
}

void BatchNorm2d::set_batch_sums(const Tensor& of, const Tensor& sum, const Tensor& sum_sq) {
  STOKER_CHECK(of.defined() && sum.defined() && sum_sq.defined(), describe(),
               ": set_batch_sums needs the tensor and both sums");
  sums_of_ = of;
  sum_ = sum;
  sum_sq_ = sum_sq;
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  STOKER_CHECK(x.defined() && x.rank() == 4, describe(), ": input ",
               x.defined() ? x.str() : std::string("undefined"), " must be rank 4");
  STOKER_CHECK(x.device() == device_, describe(), " is on ", device_.str(), " but its input is ",
               x.str(), "; move the model with .to(device) or the batch with Tensor::to");
  STOKER_CHECK(ops::dims4(x.shape(), params_.layout).c == channels_, describe(), ": input ",
               x.str(), " has ", ops::dims4(x.shape(), params_.layout).c, " channels in ",
               ops::layout_name(params_.layout), "; expected ", channels_);
  STOKER_CHECK(!residual_tail_ || residual_.defined(), describe(),
               ": forward in residual tail mode without a residual (set_residual before each "
               "forward); a Checkpoint around this BatchNorm2d alone recomputes it without the "
               "block's shortcut, so checkpoint the whole residual block instead");
  const Tensor r = std::move(residual_);
  residual_ = Tensor();
  const Tensor sums_of = std::move(sums_of_), sum = std::move(sum_), sum_sq = std::move(sum_sq_);
  sums_of_ = sum_ = sum_sq_ = Tensor();
  const bool from_sums = sums_of.defined() && training_;
  STOKER_CHECK(!from_sums || (sums_of.data() == x.data() && sums_of.shape() == x.shape()),
               describe(), ": input ", x.str(),
               " is not the tensor its batch sums were computed over (",
               sums_of.defined() ? sums_of.str() : std::string("none"),
               "); a Conv2d feeding statistics (Conv2d::feed_batch_statistics) must be followed "
               "directly by this BatchNorm2d");
  STOKER_CHECK(!r.defined() ||
                   (r.shape() == x.shape() && r.dtype() == x.dtype() && r.device() == x.device()),
               describe(), ": residual ", r.defined() ? r.str() : std::string("undefined"),
               " must have the input's shape, dtype and device (", x.str(),
               "); the block's shortcut must map its input to the body's output shape");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), device_);
  if (training_) {
    save_mean_ = Tensor::empty({channels_}, DType::f32, device_);
    save_invstd_ = Tensor::empty({channels_}, DType::f32, device_);
    // A Checkpoint's recomputation must not move the running statistics a second time: it
    // updates throwaway copies (the batch statistics, and so y, are the same either way).
    const Tensor run_mean = recomputing() ? running_mean_.clone() : running_mean_;
    const Tensor run_var = recomputing() ? running_var_.clone() : running_var_;
    if (from_sums) {
      ops::batchnorm_forward_train_from_sums(y, {save_mean_, save_invstd_}, {run_mean, run_var},
                                             {x, weight_.value(), bias_.value(), r}, {sum, sum_sq},
                                             params_);
    } else {
      ops::batchnorm_forward_train(y, {save_mean_, save_invstd_}, {run_mean, run_var},
                                   {x, weight_.value(), bias_.value(), r}, params_);
    }
  } else {
    ops::batchnorm_forward_eval(y, {x, weight_.value(), bias_.value(), r},
                                {running_mean_, running_var_}, params_);
  }
  x_ = x;
  // The fused ReLU's output, for the backward's mask — unless the backward rebuilds the mask
  // from x (the CUDA NHWC kernels, given beta, without a residual), so that nothing keeps y
  // alive that its consumer does not (a max pool keeps only its argmax bytes).
  mask_from_x_ = params_.relu && training_ &&
                 !ops::batchnorm_backward_reads_y(device_, params_, /*with_beta=*/true,
                                                  residual_tail_ || r.defined());
  y_ = params_.relu && !mask_from_x_ ? y : Tensor();
  saved_training_ = training_;
  if (!saving_activations()) x_ = y_ = save_mean_ = save_invstd_ = Tensor();  // Checkpoint forward
  return y;
}

Tensor BatchNorm2d::backward(const Tensor& dy) {
  STOKER_CHECK(x_.defined(), describe(), ": backward called before forward");
  STOKER_CHECK(!params_.relu || y_.defined() || mask_from_x_, describe(),
               ": backward with the fused ReLU needs the forward's output, which was not kept");
  Tensor dx = Tensor::empty(x_.shape(), dy.dtype(), device_);
  // The residual's gradient (tail mode): dz, written by the op (training) or below (evaluation).
  const Tensor dr = residual_tail_ ? Tensor::empty(dy.shape(), dy.dtype(), device_) : Tensor();
  if (saved_training_) {
    // The op always writes both parameter gradients; frozen ones go to scratch.
    const Tensor dgamma =
        weight_.requires_grad ? weight_.grad() : Tensor::zeros({channels_}, DType::f32, device_);
    const Tensor dbeta =
        bias_.requires_grad ? bias_.grad() : Tensor::zeros({channels_}, DType::f32, device_);
    // beta lets the NHWC kernels rebuild the ReLU's mask from x instead of reading y.
    ops::batchnorm_backward({dx, dgamma, dbeta, dr}, dy, {x_, weight_.value(), bias_.value()},
                            {save_mean_, save_invstd_}, params_, y_);
  } else {
    // The fixed affine map's backward, of the gradient before the ReLU.
    ops::BatchNormParams plain = params_;
    plain.relu = false;
    const Tensor dz = dr.defined()   ? dr
                      : params_.relu ? Tensor::empty(dy.shape(), dy.dtype(), device_)
                                     : dy;
    if (params_.relu) {
      ops::relu_backward(dz, dy, y_);
    } else if (dr.defined()) {
      ops::copy(dz, dy);
    }
    const Tensor zeros = Tensor::zeros({channels_}, DType::f32, device_);
    const Tensor ones = Tensor::empty({channels_}, DType::f32, device_);
    ops::fill(ones, 1.0);
    ops::batchnorm_forward_eval(dx, {dz, weight_.value(), zeros}, {zeros, running_var_}, plain);
    if (bias_.requires_grad) ops::channel_bias_grad(bias_.grad(), dz, params_.layout);
    if (weight_.requires_grad) {
      const Tensor xhat = Tensor::empty(x_.shape(), x_.dtype(), device_);
      ops::batchnorm_forward_eval(xhat, {x_, ones, zeros}, {running_mean_, running_var_}, plain);
      const Tensor prod = Tensor::empty(x_.shape(), dz.dtype(), device_);
      if (xhat.dtype() == dz.dtype()) {
        ops::mul(prod, dz, xhat);
      } else {
        const Tensor cast = Tensor::empty(x_.shape(), dz.dtype(), device_);
        ops::cast(cast, xhat);
        ops::mul(prod, dz, cast);
      }
      ops::channel_bias_grad(weight_.grad(), prod, params_.layout);
    }
  }
  x_ = y_ = save_mean_ = save_invstd_ = Tensor();  // consumed
  dresidual_ = dr;
  if (weight_.requires_grad) weight_.grad_ready();
  if (bias_.requires_grad) bias_.grad_ready();
  return dx;
}

std::string BatchNorm2d::describe() const {
  return fmt::format("BatchNorm2d({}, eps={:g}, momentum={:g}{}{}{}", channels_, params_.eps,
                     params_.momentum, params_.layout == ops::Layout::nhwc ? ", NHWC" : "",
                     residual_tail_ ? ", +residual" : "", params_.relu ? ", relu)" : ")");
}

Module::OutputRecompute BatchNorm2d::output_recompute() const {
  return y_.defined() ? OutputRecompute::from_own_state : OutputRecompute::none;
}

Tensor BatchNorm2d::recompute_output(const Tensor&) {
  STOKER_CHECK(y_.defined(), describe(), ": no saved output to hand out");
  return y_;
}

}  // namespace stoker::nn
