// Pooling modules over ops/pool.h. Max pooling keeps one byte per output, the position of each
// window's maximum (ops::maxpool2d_forward_argmax), where the device and layout allow (CPU, and
// NHWC on CUDA), else its input and output (cuDNN's NCHW backward needs both); average pooling
// needs neither, only the input's shape.
#include "stoker/nn/pool.h"

#include <fmt/format.h>

#include "stoker/core/error.h"

namespace stoker::nn {

namespace {

ops::Pool2dParams make_params(const char* name, int64_t kernel, int64_t stride, int64_t padding,
                              ops::Layout layout) {
  STOKER_CHECK(kernel > 0 && stride >= 0 && padding >= 0 && 2 * padding <= kernel, name, "(",
               kernel, ", stride ", stride, ", padding ", padding,
               "): expected kernel >= 1, stride >= 0 (0 = kernel) and 0 <= padding <= kernel / 2");
  const int64_t s = stride == 0 ? kernel : stride;
  return {.kernel = {kernel, kernel},
          .stride = {s, s},
          .padding = {padding, padding},
          .layout = layout};
}

std::string describe_pool(const char* name, const ops::Pool2dParams& p) {
  return fmt::format("{}({}, stride {}, padding {}{}", name, p.kernel[0], p.stride[0], p.padding[0],
                     p.layout == ops::Layout::nhwc ? ", NHWC)" : ")");
}

void check_input(const Module& m, const Tensor& x) {
  STOKER_CHECK(x.defined() && x.rank() == 4, m.describe(), ": input ",
               x.defined() ? x.str() : std::string("undefined"), " must be rank 4");
  STOKER_CHECK(x.device() == m.device(), m.describe(), " is on ", m.device().str(),
               " but its input is ", x.str(),
               "; move the model with .to(device) or the batch with Tensor::to");
}

}  // namespace

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding, ops::Layout layout)
    : params_(make_params("MaxPool2d", kernel, stride, padding, layout)) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_input(*this, x);
  Tensor y = Tensor::empty(ops::pool2d_output_shape(x.shape(), params_), x.dtype(), device_);
  argmax_ = x_ = y_ = Tensor();
  if (!saving_activations()) {  // nothing kept inside a Checkpoint's forward
    ops::maxpool2d_forward(y, x, params_);
  } else if (ops::maxpool2d_argmax_supported(device_, x.shape(), params_)) {
    argmax_ = Tensor::empty(y.shape(), DType::u8, device_);
    ops::maxpool2d_forward_argmax(y, argmax_, x, params_);
  } else {
    ops::maxpool2d_forward(y, x, params_);
    x_ = x;
    y_ = y;
  }
  x_shape_ = x.shape();
  return y;
}

Tensor MaxPool2d::backward(const Tensor& dy) {
  STOKER_CHECK(argmax_.defined() || x_.defined(), describe(), ": backward called before forward");
  Tensor dx = Tensor::empty(x_shape_, dy.dtype(), device_);
  if (argmax_.defined()) {
    ops::maxpool2d_backward_argmax(dx, dy, argmax_, params_);
  } else {
    ops::maxpool2d_backward(dx, dy, x_, y_, params_);
  }
  argmax_ = x_ = y_ = Tensor();  // consumed
  return dx;
}

std::string MaxPool2d::describe() const { return describe_pool("MaxPool2d", params_); }

AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride, int64_t padding, ops::Layout layout)
    : params_(make_params("AvgPool2d", kernel, stride, padding, layout)) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  check_input(*this, x);
  Tensor y = Tensor::empty(ops::pool2d_output_shape(x.shape(), params_), x.dtype(), device_);
  ops::avgpool2d_forward(y, x, params_);
  x_shape_ = x.shape();
  has_forward_ = true;
  return y;
}

Tensor AvgPool2d::backward(const Tensor& dy) {
  STOKER_CHECK(has_forward_, describe(), ": backward called before forward");
  Tensor dx = Tensor::empty(x_shape_, dy.dtype(), device_);
  ops::avgpool2d_backward(dx, dy, params_);
  return dx;
}

std::string AvgPool2d::describe() const { return describe_pool("AvgPool2d", params_); }

Tensor GlobalAvgPool::forward(const Tensor& x) {
  check_input(*this, x);
  const ops::Dims4 d = ops::dims4(x.shape(), layout_);
  Tensor y = Tensor::empty({d.n, d.c}, x.dtype(), device_);
  ops::global_avgpool_forward(y, x, layout_);
  x_shape_ = x.shape();
  has_forward_ = true;
  return y;
}

Tensor GlobalAvgPool::backward(const Tensor& dy) {
  STOKER_CHECK(has_forward_, describe(), ": backward called before forward");
  Tensor dx = Tensor::empty(x_shape_, dy.dtype(), device_);
  ops::global_avgpool_backward(dx, dy, layout_);
  return dx;
}

std::string GlobalAvgPool::describe() const {
  return layout_ == ops::Layout::nhwc ? "GlobalAvgPool(NHWC)" : "GlobalAvgPool";
}

}  // namespace stoker::nn
