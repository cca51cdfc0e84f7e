// Public convolution entry points: validate, then dispatch on the device.
//
// The three passes share one shape check (conv_out_dims): the filter's C/groups against the
// input's channels in the chosen layout, then the output extent. Each pass then checks the
// tensor that plays the output for it (y, dy) against those extents, so a gradient of the wrong
// shape or a tensor in the other layout is caught here with both shapes in the message.
#include "stoker/ops/conv.h"

#include <fmt/format.h>
#include <atomic>
#include <cstdlib>
#include <string>

#include "ops/conv_stubs.h"
#include "ops/geometry.h"
#include "ops/validate.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

namespace {

std::atomic<int> g_conv_autotune{-1};  // -1: not decided yet (reads STOKER_CONV_AUTOTUNE)

std::string describe(const Conv2dParams& p) {
  return fmt::format("{}, stride ({}, {}), padding ({}, {}), dilation ({}, {}), groups {}",
                     layout_name(p.layout), p.stride[0], p.stride[1], p.padding[0], p.padding[1],
                     p.dilation[0], p.dilation[1], p.groups);
}

// The output extents of a convolution of input `x` (named x_name) with filter `w` (w_name).
// Descriptions are what the messages print (tensor strings, or shapes for the shape helper).
Dims4 conv_out_dims(std::string_view op, std::string_view x_name, const std::string& x_desc,
                    const Shape& x, std::string_view w_name, const std::string& w_desc,
                    const Shape& w, const Conv2dParams& p) {
  STOKER_CHECK(p.stride[0] >= 1 && p.stride[1] >= 1 && p.dilation[0] >= 1 && p.dilation[1] >= 1 &&
                   p.padding[0] >= 0 && p.padding[1] >= 0 && p.groups >= 1,
               "ops::", op, ": invalid parameters (", describe(p),
               "); expected stride >= 1, dilation >= 1, padding >= 0, groups >= 1");
  const std::string_view order = detail::layout_order(p.layout);
  const std::string_view lname = layout_name(p.layout);
  STOKER_CHECK(x.rank() == 4, "ops::", op, ": ", x_name, " is ", x_desc, "; expected rank 4 ",
               order, " (", lname, ")");
  STOKER_CHECK(w.rank() == 4, "ops::", op, ": ", w_name, " is ", w_desc, "; expected a rank-4 ",
               p.layout == Layout::nchw ? "[K, C/groups, R, S] (KCRS" : "[K, R, S, C/groups] (KRSC",
               " filter for ", lname, ")");
  const Dims4 xd = dims4(x, p.layout);
  const Dims4 wd = dims4(w, p.layout);
  STOKER_CHECK(xd.c % p.groups == 0 && wd.n % p.groups == 0, "ops::", op, ": ", x_name, " ", x_desc,
               " has C=", xd.c, " and ", w_name, " ", w_desc, " has K=", wd.n,
               " output channels; expected both to be multiples of groups=", p.groups, " (", lname,
               ")");
  STOKER_CHECK(wd.c * p.groups == xd.c, "ops::", op, ": channel mismatch: ", x_name, " ", x_desc,
               " has C=", xd.c, " in ", lname, " ", order, ", but ", w_name, " ", w_desc,
               " has C/groups=", wd.c, " (groups ", p.groups,
               "); expected C/groups=", xd.c / p.groups);
  STOKER_CHECK(wd.n > 0 && wd.c > 0 && wd.h > 0 && wd.w > 0, "ops::", op, ": ", w_name, " ", w_desc,
               " has an empty dimension; expected K, C/groups, R, S >= 1");
  const int64_t oh = detail::window_out(xd.h, wd.h, p.stride[0], p.padding[0], p.dilation[0]);
  const int64_t ow = detail::window_out(xd.w, wd.w, p.stride[1], p.padding[1], p.dilation[1]);
  STOKER_CHECK(oh >= 1 && ow >= 1, "ops::", op, ": ", x_name, " ", x_desc, " (H=", xd.h,
               ", W=", xd.w, ") is smaller than the dilated ", wd.h, "x", wd.w, " filter of ",
               w_name, " ", w_desc, " with ", describe(p), "; expected an output of at least 1x1");
  return {xd.n, wd.n, oh, ow};
}

}  // namespace

bool conv_autotune() {
  int v = g_conv_autotune.load();
  if (v < 0) {
    const char* env = std::getenv("STOKER_CONV_AUTOTUNE");
    v = (env && std::string(env) == "1") ? 1 : 0;
    g_conv_autotune.store(v);
  }
  return v == 1;
}

void set_conv_autotune(bool on) { g_conv_autotune.store(on ? 1 : 0); }

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  return shape4(conv_out_dims("conv2d_output_shape", "x", x.str(), x, "w", w.str(), w, p),
                p.layout);
}

void conv2d_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward";
  detail::check_float_operands(op, "y", y, "x", x, "w", w);
  detail::check_same_dtype(op, "y", y, "x", x);
  const Dims4 out = conv_out_dims(op, "x", x.str(), x.shape(), "w", w.str(), w.shape(), p);
  detail::check_shape(
      op, "y", y, shape4(out, p.layout),
      fmt::format("the output of x {} and w {}, {}", x.str(), w.str(), describe(p)));
  if (y.numel() == 0) return;
  conv2d_forward_stub(y.device(), y, x, w, p);
}

void conv2d_backward_data(const Tensor& dx, const Tensor& dy, const Tensor& w,
                          const Conv2dParams& p, bool accumulate) {
  constexpr const char* op = "conv2d_backward_data";
  detail::check_float_operands(op, "dx", dx, "dy", dy, "w", w);
  detail::check_same_dtype(op, "dx", dx, "dy", dy);
  const Dims4 out = conv_out_dims(op, "dx", dx.str(), dx.shape(), "w", w.str(), w.shape(), p);
  detail::check_shape(op, "dy", dy, shape4(out, p.layout),
                      fmt::format("the forward output for input dx {} and w {}, {}", dx.str(),
                                  w.str(), describe(p)));
  if (dx.numel() == 0) return;
  conv2d_backward_data_stub(dx.device(), dx, dy, w, p, accumulate);
}

bool conv2d_forward_stats_supported(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward_stats_supported";
  detail::check_float_operands(op, "x", x, "w", w, "w", w);
  detail::check_same_dtype(op, "x", x, "w", w);
  (void)conv_out_dims(op, "x", x.str(), x.shape(), "w", w.str(), w.shape(), p);
  if (x.device().is_cpu()) return true;
#if STOKER_WITH_CUDA
  return conv2d_forward_stats_unsupported_stub.fn(x.device())(x, w, p).empty();
#else
  return false;
#endif
}

void conv2d_forward_stats(const Tensor& y, const Tensor& sum, const Tensor& sum_sq, const Tensor& x,
                          const Tensor& w, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward_stats";
  detail::check_float_operands(op, "y", y, "x", x, "w", w);
  detail::check_same_dtype(op, "y", y, "x", x);
  detail::check_same_dtype(op, "y", y, "w", w);
  const Dims4 out = conv_out_dims(op, "x", x.str(), x.shape(), "w", w.str(), w.shape(), p);
  detail::check_shape(
      op, "y", y, shape4(out, p.layout),
      fmt::format("the output of x {} and w {}, {}", x.str(), w.str(), describe(p)));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"sum", &sum},
                                std::pair<const char*, const Tensor*>{"sum_sq", &sum_sq}}) {
    STOKER_CHECK(t->defined() && t->dtype() == DType::f32 && t->shape() == Shape{out.c} &&
                     t->device() == y.device(),
                 "ops::", op, ": ", name, " is ", t->defined() ? t->str() : "undefined",
                 "; expected f32[", out.c, "] on ", y.device().str(),
                 " (one value per output "
                 "channel)");
  }
  if (y.numel() == 0) {
    ops::fill(sum, 0.0);
    ops::fill(sum_sq, 0.0);
    return;
  }
  conv2d_forward_stats_stub(y.device(), y, sum, sum_sq, x, w, p);
}

void conv2d_backward_filter(const Tensor& dw, const Tensor& dy, const Tensor& x,
                            const Conv2dParams& p, bool accumulate) {
  constexpr const char* op = "conv2d_backward_filter";
  detail::check_float_operands(op, "dw", dw, "dy", dy, "x", x);
  STOKER_CHECK(dw.dtype() == x.dtype() || dw.dtype() == DType::f32, "ops::", op, ": dw is ",
               dw.str(), " but x is ", x.str(), "; expected dw in ", dtype_name(x.dtype()),
               " or f32");
  const Dims4 out = conv_out_dims(op, "x", x.str(), x.shape(), "dw", dw.str(), dw.shape(), p);
  detail::check_shape(op, "dy", dy, shape4(out, p.layout),
                      fmt::format("the forward output for x {} and a filter {}, {}", x.str(),
                                  dw.shape().str(), describe(p)));
  if (dy.numel() == 0) {  // no images: nothing to add, a zero gradient to write
    if (!accumulate) fill(dw, 0.0);
    return;
  }
  conv2d_backward_filter_stub(dw.device(), dw, dy, x, p, accumulate);
}

void add_channel_bias(const Tensor& y, const Tensor& bias, Layout layout) {
  constexpr const char* op = "add_channel_bias";
  detail::check_image(op, "y", y, layout);
  detail::check_backend(op, y);
  detail::check_channel_vector(op, "bias", bias, dims4(y.shape(), layout).c, "y", y, layout);
  if (y.numel() == 0) return;
  add_channel_bias_stub(y.device(), y, bias, layout);
}

void channel_bias_grad(const Tensor& dbias, const Tensor& dy, Layout layout) {
  constexpr const char* op = "channel_bias_grad";
  detail::check_image(op, "dy", dy, layout);
  detail::check_backend(op, dy);
  detail::check_channel_vector(op, "dbias", dbias, dims4(dy.shape(), layout).c, "dy", dy, layout);
  if (dy.numel() == 0) return;
  channel_bias_grad_stub(dy.device(), dbias, dy, layout);
}

}  // namespace stoker::ops
