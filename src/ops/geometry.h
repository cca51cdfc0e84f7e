// Private: the geometry of 4-D image tensors (layout.h) and of the convolution and pooling
// problems over them, shared by the public validation (src/ops/conv.cpp, pool.cpp,
// batchnorm.cpp, layout.cpp) and both backends. Everything is derived from validated shapes,
// so the backends never re-check; all extents are logical (N, C, H, W), whatever the layout.
// (Not the image normalization of ops/image.h.)
#pragma once

#include <cstdint>
#include <string_view>

#include "stoker/core/tensor.h"
#include "stoker/ops/conv.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/pool.h"

namespace stoker::ops::detail {

// Input checks (src/ops/layout.cpp); each throws stoker::Error naming op, tensor and expectation.
// A defined float tensor of rank 4 ("[N, C, H, W] (NCHW)" in the message).
void check_image(std::string_view op, std::string_view name, const Tensor& t, Layout layout);
// An f32 tensor [c] holding one value per channel of `image` (named in the message).
void check_channel_vector(std::string_view op, std::string_view name, const Tensor& t, int64_t c,
                          std::string_view image_name, const Tensor& image, Layout layout);
// t has exactly `want`; `why` completes "expected <want> (<why>)".
void check_shape(std::string_view op, std::string_view name, const Tensor& t, const Shape& want,
                 std::string_view why);
// "[N, C, H, W]" or "[N, H, W, C]".
std::string_view layout_order(Layout layout);

// Where element (n, c, h, w) of a 4-D tensor with extents (C, H, W) sits in `layout`.
inline int64_t offset4(Layout layout, int64_t c_ext, int64_t h_ext, int64_t w_ext, int64_t n,
                       int64_t c, int64_t h, int64_t w) {
  return layout == Layout::nchw ? ((n * c_ext + c) * h_ext + h) * w_ext + w
                                : ((n * h_ext + h) * w_ext + w) * c_ext + c;
}

// Output extent of a sliding window: floor((in + 2 pad - dil (k - 1) - 1) / stride) + 1, or a
// value < 1 when the (dilated) window does not fit.
inline int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

struct ConvGeometry {
  Layout layout = Layout::nchw;
  int64_t n = 0, c = 0, h = 0, w = 0;  // input x
  int64_t k = 0, r = 0, s = 0;         // filter: K outputs, R x S window
  int64_t oh = 0, ow = 0;              // output y
  int64_t groups = 1, cg = 0, kg = 0;  // channels per group: input cg = c / groups, output kg
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// x and w are rank-4 shapes already validated against p.
inline ConvGeometry conv_geometry(const Shape& x, const Shape& w, const Conv2dParams& p) {
  const Dims4 xd = dims4(x, p.layout);
  const Dims4 wd = dims4(w, p.layout);
  ConvGeometry g;
  g.layout = p.layout;
  g.n = xd.n, g.c = xd.c, g.h = xd.h, g.w = xd.w;
  g.k = wd.n, g.r = wd.h, g.s = wd.w;
  g.groups = p.groups, g.cg = wd.c, g.kg = wd.n / p.groups;
  g.sh = p.stride[0], g.sw = p.stride[1];
  g.ph = p.padding[0], g.pw = p.padding[1];
  g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.oh = window_out(g.h, g.r, g.sh, g.ph, g.dh);
  g.ow = window_out(g.w, g.s, g.sw, g.pw, g.dw);
  return g;
}

struct PoolGeometry {
  Layout layout = Layout::nchw;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
};

// x is a rank-4 shape already validated against p.
inline PoolGeometry pool_geometry(const Shape& x, const Pool2dParams& p) {
  const Dims4 xd = dims4(x, p.layout);
  PoolGeometry g;
  g.layout = p.layout;
  g.n = xd.n, g.c = xd.c, g.h = xd.h, g.w = xd.w;
  g.kh = p.kernel[0], g.kw = p.kernel[1];
  g.sh = p.stride[0], g.sw = p.stride[1];
  g.ph = p.padding[0], g.pw = p.padding[1];
  g.oh = window_out(g.h, g.kh, g.sh, g.ph, 1);
  g.ow = window_out(g.w, g.kw, g.sw, g.pw, 1);
  return g;
}

}  // namespace stoker::ops::detail
