// Conv2d over ops::conv2d_*. The invariant that keeps weight files portable: the Parameter is
// always KCRS f32; anything else the compute needs (a KRSC copy for NHWC, a half copy for half
// inputs) is derived from it in the forward — one ops::convert_layout, which transposes and
// casts in a single pass — and the NHWC filter gradient is transposed back into the KCRS
// gradient (accumulated, like every gradient).
#include "stoker/nn/conv2d.h"

#include <fmt/format.h>
#include <cmath>

#include "stoker/core/error.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"

namespace stoker::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
               int64_t padding, bool bias, ops::Layout layout)
    : Conv2d(in_channels, out_channels, kernel,
             Conv2dOptions{.stride = stride, .padding = padding, .bias = bias, .layout = layout}) {}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel,
               const Conv2dOptions& options)
    : in_(in_channels),
      out_(out_channels),
      kernel_(kernel),
      has_bias_(options.bias),
      input_grad_(options.input_grad) {
  STOKER_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0, "Conv2d(", in_channels, ", ",
               out_channels, ", kernel ", kernel, "): channels and kernel must be positive");
  STOKER_CHECK(
      options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
      "Conv2d(", in_channels, ", ", out_channels, "): groups ", options.groups,
      " must divide both channel counts");
  STOKER_CHECK(options.stride > 0 && options.dilation > 0 && options.padding >= 0, "Conv2d(",
               in_channels, ", ", out_channels, "): stride ", options.stride, ", dilation ",
               options.dilation, " must be positive and padding ", options.padding,
               " non-negative");
  params_.stride = {options.stride, options.stride};
  params_.padding = {options.padding, options.padding};
  params_.dilation = {options.dilation, options.dilation};
  params_.groups = options.groups;
  params_.layout = options.layout;
  const int64_t fan_in = in_channels / options.groups * kernel * kernel;
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  weight_ = Parameter(init_uniform({out_, in_ / options.groups, kernel, kernel}, bound));
  register_parameter("weight", weight_);
  if (has_bias_) {
    bias_ = Parameter(init_uniform({out_}, bound));
    register_parameter("bias", bias_);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  const ops::Layout layout = params_.layout;
  STOKER_CHECK(x.defined() && x.rank() == 4, describe(), ": input ",
               x.defined() ? x.str() : std::string("undefined"), " must be rank 4 ",
               layout == ops::Layout::nchw ? "[N, C, H, W]" : "[N, H, W, C]");
  STOKER_CHECK(x.device() == device_, describe(), " is on ", device_.str(), " but its input is ",
               x.str(), "; move the model with .to(device) or the batch with Tensor::to");
  STOKER_CHECK(ops::dims4(x.shape(), layout).c == in_, describe(), ": input ", x.str(), " has ",
               ops::dims4(x.shape(), layout).c, " channels in ", ops::layout_name(layout),
               "; expected ", in_);
  const Tensor& w = weight_.value();
  if (layout == ops::Layout::nchw && x.dtype() == DType::f32) {
    w_compute_ = w;
  } else {
    const ops::Dims4 wd = ops::dims4(w.shape(), ops::Layout::nchw);
    w_compute_ = Tensor::empty(ops::shape4(wd, layout), x.dtype(), device_);
    ops::convert_layout(w_compute_, w, ops::Layout::nchw, layout);
  }
  Tensor y = Tensor::empty(ops::conv2d_output_shape(x.shape(), w_compute_.shape(), params_),
                           x.dtype(), device_);
  if (stats_for_ != nullptr && training_ &&
      ops::conv2d_forward_stats_supported(x, w_compute_, params_)) {
    const int64_t k = ops::dims4(y.shape(), layout).c;
    Tensor sum = Tensor::empty({k}, DType::f32, device_);
    Tensor sum_sq = Tensor::empty({k}, DType::f32, device_);
    ops::conv2d_forward_stats(y, sum, sum_sq, x, w_compute_, params_);
    stats_for_->set_batch_sums(y, sum, sum_sq);
  } else {
    ops::conv2d_forward(y, x, w_compute_, params_);
  }
  if (has_bias_) ops::add_channel_bias(y, bias_.value(), layout);
  x_ = saving_activations() ? x : Tensor();  // nothing kept inside a Checkpoint's forward
  return y;
}

void Conv2d::feed_batch_statistics(BatchNorm2d* bn) {
  STOKER_CHECK(bn == nullptr || !has_bias_, describe(),
               ": feed_batch_statistics needs a convolution without bias (the sums are of the "
               "convolution's output before any bias); build it with bias = false, as a "
               "convolution before a batch norm usually is");
  stats_for_ = bn;
}

Tensor Conv2d::backward(const Tensor& dy) {
  parameter_grads(dy);
  const Shape x_shape = x_.shape();
  x_ = Tensor();  // consumed: freed before dx is allocated
  // The compute filter is released with the backward too: a step keeps nothing it allocated
  // (what lets a CUDA graph of the step replay; core/graph.h).
  const Tensor w = std::move(w_compute_);
  w_compute_ = Tensor();
  if (!input_grad_) return Tensor();
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), device_);
  ops::conv2d_backward_data(dx, dy, w, params_);
  return dx;
}

Tensor Conv2d::backward_accumulate(const Tensor& dy, const std::function<Tensor()>& target) {
  STOKER_CHECK(input_grad_, describe(),
               ": backward_accumulate needs the input gradient (Conv2dOptions::input_grad)");
  parameter_grads(dy);
  const Shape x_shape = x_.shape();
  x_ = Tensor();
  const Tensor dx = target();
  STOKER_CHECK(dx.defined() && dx.shape() == x_shape && dx.dtype() == dy.dtype(), describe(),
               ": backward_accumulate's target is ", dx.str(), "; expected ",
               dtype_name(dy.dtype()), x_shape.str(), " (the input's gradient)");
  ops::conv2d_backward_data(dx, dy, w_compute_, params_, /*accumulate=*/true);
  w_compute_ = Tensor();  // as in backward
  return dx;
}

void Conv2d::parameter_grads(const Tensor& dy) {
  STOKER_CHECK(x_.defined(), describe(), ": backward called before forward");
  const ops::Layout layout = params_.layout;
  if (weight_.requires_grad) {
    if (layout == ops::Layout::nchw) {
      ops::conv2d_backward_filter(weight_.grad(), dy, x_, params_);
    } else {
      // The KRSC gradient of this pass in x's dtype (as cuDNN writes it), transposed into the f32
      // KCRS master gradient: straight into it on the first micro-batch after zero_grad, else
      // through a scratch and an add. A half value is exact in f32, so this is the value the
      // f32 detour (zeroed scratch, +=, transpose, +=) gave, with 1 to 3 small kernels instead
      // of 5: ResNet-50 has 53 such convolutions a step.
      const Tensor krsc = Tensor::empty(w_compute_.shape(), x_.dtype(), device_);
      ops::conv2d_backward_filter(krsc, dy, x_, params_, /*accumulate=*/false);
      float beta = 1.0f;
      const Tensor& grad = weight_.grad_for_write(beta);
      if (beta == 0.0f) {
        ops::convert_layout(grad, krsc, layout, ops::Layout::nchw);
      } else {
        const Tensor kcrs = Tensor::empty(weight_.shape(), DType::f32, device_);
        ops::convert_layout(kcrs, krsc, layout, ops::Layout::nchw);
        ops::axpy(grad, 1.0f, kcrs);
      }
    }
    weight_.grad_ready();
  }
  if (has_bias_ && bias_.requires_grad) {
    ops::channel_bias_grad(bias_.grad(), dy, layout);
    bias_.grad_ready();
  }
}

std::string Conv2d::describe() const {
  std::string s = fmt::format("Conv2d({}, {}, kernel {}", in_, out_, kernel_);
  if (params_.stride[0] != 1) s += fmt::format(", stride {}", params_.stride[0]);
  if (params_.padding[0] != 0) s += fmt::format(", padding {}", params_.padding[0]);
  if (params_.dilation[0] != 1) s += fmt::format(", dilation {}", params_.dilation[0]);
  if (params_.groups != 1) s += fmt::format(", groups {}", params_.groups);
  if (!has_bias_) s += ", no bias";
  if (params_.layout != ops::Layout::nchw) s += ", NHWC";
  return s + ")";
}

}  // namespace stoker::nn
