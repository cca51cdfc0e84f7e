// Public pooling entry points: validate, then dispatch on the device. PyTorch's rule that the
// padding is at most half the kernel is enforced here: it guarantees that every window covers
// at least one input element, which is what lets max pooling treat padding as -inf and lets
// average pooling divide every window by kh * kw without special cases on either backend.
#include "stoker/ops/pool.h"

#include <fmt/format.h>

#include "ops/geometry.h"
#include "ops/pool_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {

std::string describe(const Pool2dParams& p) {
  return fmt::format("{}, kernel ({}, {}), stride ({}, {}), padding ({}, {})",
                     layout_name(p.layout), p.kernel[0], p.kernel[1], p.stride[0], p.stride[1],
                     p.padding[0], p.padding[1]);
}

Dims4 pool_out_dims(std::string_view op, std::string_view x_name, const std::string& x_desc,
                    const Shape& x, const Pool2dParams& p) {
  STOKER_CHECK(p.kernel[0] >= 1 && p.kernel[1] >= 1 && p.stride[0] >= 1 && p.stride[1] >= 1,
               "ops::", op, ": invalid parameters (", describe(p),
               "); expected kernel >= 1 and stride >= 1");
  STOKER_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0 && 2 * p.padding[0] <= p.kernel[0] &&
                   2 * p.padding[1] <= p.kernel[1],
               "ops::", op, ": invalid padding (", describe(p),
               "); expected 0 <= padding <= kernel / 2 (as PyTorch)");
  STOKER_CHECK(x.rank() == 4, "ops::", op, ": ", x_name, " is ", x_desc, "; expected rank 4 ",
               detail::layout_order(p.layout), " (", layout_name(p.layout), ")");
  const Dims4 xd = dims4(x, p.layout);
  const int64_t oh = detail::window_out(xd.h, p.kernel[0], p.stride[0], p.padding[0], 1);
  const int64_t ow = detail::window_out(xd.w, p.kernel[1], p.stride[1], p.padding[1], 1);
  STOKER_CHECK(oh >= 1 && ow >= 1, "ops::", op, ": ", x_name, " ", x_desc, " (H=", xd.h,
               ", W=", xd.w, ") is smaller than the window (", describe(p),
               "); expected an output of at least 1x1");
  return {xd.n, xd.c, oh, ow};
}

// x (or dx) and y (or dy): float, one dtype and device; y's shape is the pooled shape of x.
void check_pool(std::string_view op, std::string_view x_name, const Tensor& x,
                std::string_view y_name, const Tensor& y, const Pool2dParams& p) {
  detail::check_image(op, x_name, x, p.layout);
  detail::check_float(op, y_name, y);
  detail::check_backend(op, x);
  detail::check_same_device(op, x_name, x, y_name, y);
  detail::check_same_dtype(op, x_name, x, y_name, y);
  const Dims4 out = pool_out_dims(op, x_name, x.str(), x.shape(), p);
  detail::check_shape(op, y_name, y, shape4(out, p.layout),
                      fmt::format("pooled {} {}, {}", x_name, x.str(), describe(p)));
}

void check_global(std::string_view op, std::string_view x_name, const Tensor& x,
                  std::string_view y_name, const Tensor& y, Layout layout) {
  detail::check_image(op, x_name, x, layout);
  detail::check_float(op, y_name, y);
  detail::check_backend(op, x);
  detail::check_same_device(op, x_name, x, y_name, y);
  detail::check_same_dtype(op, x_name, x, y_name, y);
  const Dims4 d = dims4(x.shape(), layout);
  detail::check_shape(op, y_name, y, Shape{d.n, d.c},
                      fmt::format("[N, C] of {} {} in {}", x_name, x.str(), layout_name(layout)));
  STOKER_CHECK(d.h > 0 && d.w > 0, "ops::", op, ": ", x_name, " ", x.str(),
               " has no pixels; expected H, W >= 1");
}

}  // namespace

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
  return shape4(pool_out_dims("pool2d_output_shape", "x", x.str(), x, p), p.layout);
}

void maxpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
  check_pool("maxpool2d_forward", "x", x, "y", y, p);
  if (y.numel() == 0) return;
  maxpool2d_forward_stub(y.device(), y, x, p);
}

void maxpool2d_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& y,
                        const Pool2dParams& p) {
  constexpr const char* op = "maxpool2d_backward";
  check_pool(op, "x", x, "y", y, p);
  check_pool(op, "dx", dx, "dy", dy, p);
  detail::check_same_device(op, "x", x, "dx", dx);
  detail::check_same_dtype(op, "x", x, "dx", dx);
  detail::check_shape(op, "dx", dx, x.shape(), fmt::format("the shape of x {}", x.str()));
  if (dx.numel() == 0) return;
  maxpool2d_backward_stub(dx.device(), dx, dy, x, y, p);
}

bool maxpool2d_argmax_supported(Device device, const Shape& x, const Pool2dParams& p) {
  if (p.kernel[0] * p.kernel[1] > 256) return false;  // the position must fit a byte
  if (device.is_cpu()) return true;
  return p.layout == Layout::nhwc && x.numel() < (int64_t{1} << 30);
}

namespace {

// The argmax variants' own requirements, after check_pool has checked x (or dx) and y (or dy):
// a u8 argmax of y's shape on its device, and a problem maxpool2d_argmax_supported accepts.
void check_argmax(std::string_view op, const Tensor& x, std::string_view y_name, const Tensor& y,
                  const Tensor& argmax, const Pool2dParams& p) {
  detail::check_defined(op, "argmax", argmax);
  STOKER_CHECK(argmax.dtype() == DType::u8, "ops::", op, ": argmax is ", argmax.str(),
               "; expected u8 (one byte per output: the maximum's position in its window)");
  detail::check_same_device(op, y_name, y, "argmax", argmax);
  detail::check_shape(op, "argmax", argmax, y.shape(),
                      fmt::format("the shape of {} {}", y_name, y.str()));
  STOKER_CHECK(p.kernel[0] * p.kernel[1] <= 256, "ops::", op, ": a ", p.kernel[0], "x", p.kernel[1],
               " window has more than 256 positions, more than a byte holds; use ",
               "maxpool2d_forward / maxpool2d_backward");
  STOKER_CHECK(maxpool2d_argmax_supported(x.device(), x.shape(), p), "ops::", op, ": on ",
               x.device().str(), " the argmax variant runs NHWC tensors below 2^30 elements, got ",
               x.str(), " in ", layout_name(p.layout),
               "; use maxpool2d_forward / maxpool2d_backward (maxpool2d_argmax_supported says "
               "which applies)");
}

}  // namespace

void maxpool2d_forward_argmax(const Tensor& y, const Tensor& argmax, const Tensor& x,
                              const Pool2dParams& p) {
  constexpr const char* op = "maxpool2d_forward_argmax";
  check_pool(op, "x", x, "y", y, p);
  check_argmax(op, x, "y", y, argmax, p);
  if (y.numel() == 0) return;
  maxpool2d_forward_argmax_stub(y.device(), y, argmax, x, p);
}

void maxpool2d_backward_argmax(const Tensor& dx, const Tensor& dy, const Tensor& argmax,
                               const Pool2dParams& p) {
  constexpr const char* op = "maxpool2d_backward_argmax";
  check_pool(op, "dx", dx, "dy", dy, p);
  check_argmax(op, dx, "dy", dy, argmax, p);
  if (dx.numel() == 0) return;
  maxpool2d_backward_argmax_stub(dx.device(), dx, dy, argmax, p);
}

void avgpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
  check_pool("avgpool2d_forward", "x", x, "y", y, p);
  if (y.numel() == 0) return;
  avgpool2d_forward_stub(y.device(), y, x, p);
}

void avgpool2d_backward(const Tensor& dx, const Tensor& dy, const Pool2dParams& p) {
  check_pool("avgpool2d_backward", "dx", dx, "dy", dy, p);
  if (dx.numel() == 0) return;
  avgpool2d_backward_stub(dx.device(), dx, dy, p);
}

void global_avgpool_forward(const Tensor& y, const Tensor& x, Layout layout) {
  check_global("global_avgpool_forward", "x", x, "y", y, layout);
  if (y.numel() == 0) return;
  global_avgpool_forward_stub(y.device(), y, x, layout);
}

void global_avgpool_backward(const Tensor& dx, const Tensor& dy, Layout layout) {
  check_global("global_avgpool_backward", "dx", dx, "dy", dy, layout);
  if (dx.numel() == 0) return;
  global_avgpool_backward_stub(dx.device(), dx, dy, layout);
}

}  // namespace stoker::ops
