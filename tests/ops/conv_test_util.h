// Helpers for the convolution / batch-norm / pooling tests: naive fp64 references written as
// plain loops straight from the definitions (deliberately nothing like im2col or cuDNN), host
// layout transposes and a tolerance comparison that reports the worst element.
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "stoker/ops/batchnorm.h"
#include "stoker/ops/conv.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/pool.h"
#include "test_util.h"

namespace stoker::test {

using ops::Dims4;
using ops::Layout;

// Offset of logical element (n, c, h, w) of a tensor with extents d stored in `layout`.
inline int64_t at4(const Dims4& d, Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return layout == Layout::nchw ? ((n * d.c + c) * d.h + h) * d.w + w
                                : ((n * d.h + h) * d.w + w) * d.c + c;
}

// Host values of a tensor with extents d reordered from layout `from` to layout `to`.
inline std::vector<float> transpose4(const std::vector<float>& v, const Dims4& d, Layout from,
                                     Layout to) {
  std::vector<float> out(v.size());
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w)
          out[static_cast<size_t>(at4(d, to, n, c, h, w))] =
              v[static_cast<size_t>(at4(d, from, n, c, h, w))];
  return out;
}

// Passes when |got - want| <= atol + rtol * |want| everywhere (NaN in got always fails).
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<double>& want, double rtol,
                                            double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " values vs " << want.size();
  int64_t bad = 0, worst = -1;
  double worst_excess = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double allowed = atol + rtol * std::fabs(want[i]);
    if (!(err <= allowed)) {
      ++bad;
      const double excess =
          std::isnan(err) ? std::numeric_limits<double>::infinity() : err - allowed;
      if (worst < 0 || excess > worst_excess)
        worst = static_cast<int64_t>(i), worst_excess = excess;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const size_t w = static_cast<size_t>(worst);
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements out of tolerance (rtol " << rtol << ", atol "
         << atol << "); worst at " << worst << ": got " << got[w] << ", want " << want[w];
}

inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, double rtol,
                                            double atol) {
  return all_close(got, std::vector<double>(want.begin(), want.end()), rtol, atol);
}

inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want,
                                            double rtol, double atol) {
  return all_close(got.to_floats(), want, rtol, atol);
}

inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, double rtol,
                                            double atol) {
  return all_close(got.to_floats(), want.to_floats(), rtol, atol);
}

inline double max_abs_of(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ---- convolution ----

struct ConvCase {
  int64_t n, c, h, w, k, r, s;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;

  ops::Conv2dParams params(Layout layout) const {
    return {.stride = {sh, sw},
            .padding = {ph, pw},
            .dilation = {dh, dw},
            .groups = groups,
            .layout = layout};
  }
  int64_t oh() const { return (h + 2 * ph - dh * (r - 1) - 1) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - dw * (s - 1) - 1) / sw + 1; }
  Dims4 x_dims() const { return {n, c, h, w}; }
  Dims4 w_dims() const { return {k, c / groups, r, s}; }
  Dims4 y_dims() const { return {n, k, oh(), ow()}; }
  std::string str() const {
    return fmt::format("N{} C{} H{} W{} K{} R{} S{} stride {}x{} pad {}x{} dil {}x{} groups {}", n,
                       c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, groups);
  }
};

// Calls f(n, k, oh, ow, c, r, s, ih, iw) for every term of the convolution sum that reads an
// input element inside the image (padding contributes zero).
template <typename F>
void for_each_conv_term(const ConvCase& t, F&& f) {
  const int64_t cg = t.c / t.groups, kg = t.k / t.groups;
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t k = 0; k < t.k; ++k)
      for (int64_t oh = 0; oh < t.oh(); ++oh)
        for (int64_t ow = 0; ow < t.ow(); ++ow)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t r = 0; r < t.r; ++r)
              for (int64_t s = 0; s < t.s; ++s) {
                const int64_t ih = oh * t.sh - t.ph + r * t.dh;
                const int64_t iw = ow * t.sw - t.pw + s * t.dw;
                if (ih < 0 || ih >= t.h || iw < 0 || iw >= t.w) continue;
                f(n, k, oh, ow, (k / kg) * cg + ci, ci, r, s, ih, iw);
              }
}

// y = conv(x, w); x, w, y in `layout` (filter KCRS / KRSC).
inline std::vector<double> naive_conv_forward(const ConvCase& t, Layout l,
                                              const std::vector<float>& x,
                                              const std::vector<float>& w) {
  const Dims4 xd = t.x_dims(), wd = t.w_dims(), yd = t.y_dims();
  std::vector<double> y(static_cast<size_t>(yd.n * yd.c * yd.h * yd.w), 0.0);
  for_each_conv_term(t, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t c, int64_t ci,
                            int64_t r, int64_t s, int64_t ih, int64_t iw) {
    y[static_cast<size_t>(at4(yd, l, n, k, oh, ow))] +=
        static_cast<double>(x[static_cast<size_t>(at4(xd, l, n, c, ih, iw))]) *
        w[static_cast<size_t>(at4(wd, l, k, ci, r, s))];
  });
  return y;
}

inline std::vector<double> naive_conv_backward_data(const ConvCase& t, Layout l,
                                                    const std::vector<float>& dy,
                                                    const std::vector<float>& w) {
  const Dims4 xd = t.x_dims(), wd = t.w_dims(), yd = t.y_dims();
  std::vector<double> dx(static_cast<size_t>(xd.n * xd.c * xd.h * xd.w), 0.0);
  for_each_conv_term(t, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t c, int64_t ci,
                            int64_t r, int64_t s, int64_t ih, int64_t iw) {
    dx[static_cast<size_t>(at4(xd, l, n, c, ih, iw))] +=
        static_cast<double>(dy[static_cast<size_t>(at4(yd, l, n, k, oh, ow))]) *
        w[static_cast<size_t>(at4(wd, l, k, ci, r, s))];
  });
  return dx;
}

// dw0 + gradient (the op accumulates).
inline std::vector<double> naive_conv_backward_filter(const ConvCase& t, Layout l,
                                                      const std::vector<float>& dy,
                                                      const std::vector<float>& x,
                                                      const std::vector<float>& dw0) {
  const Dims4 xd = t.x_dims(), wd = t.w_dims(), yd = t.y_dims();
  std::vector<double> dw(dw0.begin(), dw0.end());
  for_each_conv_term(t, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t c, int64_t ci,
                            int64_t r, int64_t s, int64_t ih, int64_t iw) {
    dw[static_cast<size_t>(at4(wd, l, k, ci, r, s))] +=
        static_cast<double>(dy[static_cast<size_t>(at4(yd, l, n, k, oh, ow))]) *
        x[static_cast<size_t>(at4(xd, l, n, c, ih, iw))];
  });
  return dw;
}

// ---- pooling ----

struct PoolCase {
  int64_t n, c, h, w, kh, kw, sh, sw, ph = 0, pw = 0;
  ops::Pool2dParams params(Layout layout) const {
    return {.kernel = {kh, kw}, .stride = {sh, sw}, .padding = {ph, pw}, .layout = layout};
  }
  int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
  Dims4 x_dims() const { return {n, c, h, w}; }
  Dims4 y_dims() const { return {n, c, oh(), ow()}; }
  std::string str() const {
    return fmt::format("N{} C{} H{} W{} kernel {}x{} stride {}x{} pad {}x{}", n, c, h, w, kh, kw,
                       sh, sw, ph, pw);
  }
};

// For each output (n, c, oh, ow): f(out_offset, list of in-image input offsets of its window).
template <typename F>
void for_each_window(const PoolCase& t, Layout l, F&& f) {
  const Dims4 xd = t.x_dims(), yd = t.y_dims();
  std::vector<int64_t> in;
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t c = 0; c < t.c; ++c)
      for (int64_t oh = 0; oh < t.oh(); ++oh)
        for (int64_t ow = 0; ow < t.ow(); ++ow) {
          in.clear();
          for (int64_t i = 0; i < t.kh; ++i)
            for (int64_t j = 0; j < t.kw; ++j) {
              const int64_t ih = oh * t.sh - t.ph + i, iw = ow * t.sw - t.pw + j;
              if (ih >= 0 && ih < t.h && iw >= 0 && iw < t.w)
                in.push_back(at4(xd, l, n, c, ih, iw));
            }
          f(at4(yd, l, n, c, oh, ow), in);
        }
}

inline size_t idx(int64_t i) { return static_cast<size_t>(i); }

}  // namespace stoker::test
