// CPU reference max / average pooling. One oneTBB task per (n, c) plane: a plane's windows
// read and (backward) write only that plane, so the scatter of gradients needs no atomics. The
// backward accumulates a plane in an fp32 scratch row before rounding once to dx's dtype.
// Max picks the first maximum of a window in row-major order (PyTorch's CPU rule); a NaN wins
// and stays (NaN propagates); padding is never selected (it is -inf). The argmax variants keep
// that choice as a byte per output (its position in the window) and scatter from it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/geometry.h"
#include "ops/pool_stubs.h"

namespace stoker::ops::cpu {

namespace {

using detail::PoolGeometry;

template <typename F>
void for_planes(const PoolGeometry& g, F&& f) {
  const int64_t per_plane = std::max<int64_t>(1, g.oh * g.ow * g.kh * g.kw);
  parallel_range(
      g.n * g.c,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) f(i / g.c, i % g.c);
      },
      std::max<int64_t>(1, kGrain / per_plane));
}

int64_t at(const PoolGeometry& g, int64_t n, int64_t c, int64_t h, int64_t w) {
  return detail::offset4(g.layout, g.c, g.h, g.w, n, c, h, w);
}
int64_t at_out(const PoolGeometry& g, int64_t n, int64_t c, int64_t h, int64_t w) {
  return detail::offset4(g.layout, g.c, g.oh, g.ow, n, c, h, w);
}

// The input rows/columns of window (oh, ow), clipped to the input.
struct Window {
  int64_t h0, h1, w0, w1;
};
Window window(const PoolGeometry& g, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  return {std::max<int64_t>(h0, 0), std::min(h0 + g.kh, g.h), std::max<int64_t>(w0, 0),
          std::min(w0 + g.kw, g.w)};
}

// Offset (in the plane's h * W + w numbering) of the window's maximum, and its value.
template <typename T>
std::pair<int64_t, float> window_max(const T* x, const PoolGeometry& g, int64_t n, int64_t c,
                                     const Window& win) {
  float best = -std::numeric_limits<float>::infinity();
  int64_t arg = win.h0 * g.w + win.w0;
  for (int64_t h = win.h0; h < win.h1; ++h) {
    for (int64_t w = win.w0; w < win.w1; ++w) {
      const float v = load(x[at(g, n, c, h, w)]);
      if (std::isnan(v)) return {h * g.w + w, v};
      if (v > best) best = v, arg = h * g.w + w;
    }
  }
  return {arg, best};
}

}  // namespace

void maxpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
  const PoolGeometry g = detail::pool_geometry(x.shape(), p);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    T* out = static_cast<T*>(y.data());
    for_planes(g, [&](int64_t n, int64_t c) {
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow)
          out[at_out(g, n, c, oh, ow)] =
              store<T>(window_max(in, g, n, c, window(g, oh, ow)).second);
    });
  });
}

// The max-pooling backward's scatter: per plane, each window's dy (in window order) into an fp32
// plane at the offset `pick(n, c, oh, ow)` returns (h * W + w; -1: nowhere), rounded once to dx.
template <typename T, typename Pick>
void scatter_windows(const PoolGeometry& g, T* out, const T* grad, Pick&& pick) {
  for_planes(g, [&](int64_t n, int64_t c) {
    std::vector<float> acc(static_cast<size_t>(g.h * g.w), 0.0f);
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int64_t at_max = pick(n, c, oh, ow);
        if (at_max >= 0) acc[static_cast<size_t>(at_max)] += load(grad[at_out(g, n, c, oh, ow)]);
      }
    }
    for (int64_t h = 0; h < g.h; ++h)
      for (int64_t w = 0; w < g.w; ++w)
        out[at(g, n, c, h, w)] = store<T>(acc[static_cast<size_t>(h * g.w + w)]);
  });
}

void maxpool2d_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor&,
                        const Pool2dParams& p) {
  const PoolGeometry g = detail::pool_geometry(x.shape(), p);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    scatter_windows(g, static_cast<T*>(dx.data()), static_cast<const T*>(dy.data()),
                    [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
                      return window_max(in, g, n, c, window(g, oh, ow)).first;
                    });
  });
}

// The argmax byte of a window is the maximum's position in the unpadded window: (h - h0) * kw +
// (w - w0) with (h0, w0) the window's corner before clipping.
void maxpool2d_forward_argmax(const Tensor& y, const Tensor& argmax, const Tensor& x,
                              const Pool2dParams& p) {
  const PoolGeometry g = detail::pool_geometry(x.shape(), p);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    T* out = static_cast<T*>(y.data());
    auto* arg = static_cast<uint8_t*>(argmax.data());
    for_planes(g, [&](int64_t n, int64_t c) {
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const auto [at_max, value] = window_max(in, g, n, c, window(g, oh, ow));
          const int64_t h = at_max / g.w, w = at_max % g.w;
          const int64_t o = at_out(g, n, c, oh, ow);
          out[o] = store<T>(value);
          arg[o] = static_cast<uint8_t>((h - (oh * g.sh - g.ph)) * g.kw + (w - (ow * g.sw - g.pw)));
        }
      }
    });
  });
}

// maxpool2d_backward's scatter, with the element taken from the byte instead of a search.
void maxpool2d_backward_argmax(const Tensor& dx, const Tensor& dy, const Tensor& argmax,
                               const Pool2dParams& p) {
  const PoolGeometry g = detail::pool_geometry(dx.shape(), p);
  const auto* arg = static_cast<const uint8_t*>(argmax.data());
  visit_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scatter_windows(g, static_cast<T*>(dx.data()), static_cast<const T*>(dy.data()),
                    [&](int64_t n, int64_t c, int64_t oh, int64_t ow) -> int64_t {
                      const uint8_t b = arg[at_out(g, n, c, oh, ow)];
                      const int64_t h = oh * g.sh - g.ph + b / g.kw;
                      const int64_t w = ow * g.sw - g.pw + b % g.kw;
                      // A byte naming no element of x: dropped, as the CUDA gather drops it.
                      if (b >= g.kh * g.kw || h < 0 || h >= g.h || w < 0 || w >= g.w) return -1;
                      return h * g.w + w;
                    });
  });
}

void avgpool2d_forward(const Tensor& y, const Tensor& x, const Pool2dParams& p) {
  const PoolGeometry g = detail::pool_geometry(x.shape(), p);
  const float inv = 1.0f / static_cast<float>(g.kh * g.kw);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    T* out = static_cast<T*>(y.data());
    for_planes(g, [&](int64_t n, int64_t c) {
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const Window win = window(g, oh, ow);
          float sum = 0.0f;
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) sum += load(in[at(g, n, c, h, w)]);
          out[at_out(g, n, c, oh, ow)] = store<T>(sum * inv);
        }
      }
    });
  });
}

void avgpool2d_backward(const Tensor& dx, const Tensor& dy, const Pool2dParams& p) {
  const PoolGeometry g = detail::pool_geometry(dx.shape(), p);
  const float inv = 1.0f / static_cast<float>(g.kh * g.kw);
  visit_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* grad = static_cast<const T*>(dy.data());
    T* out = static_cast<T*>(dx.data());
    for_planes(g, [&](int64_t n, int64_t c) {
      std::vector<float> acc(static_cast<size_t>(g.h * g.w), 0.0f);
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const Window win = window(g, oh, ow);
          const float v = load(grad[at_out(g, n, c, oh, ow)]) * inv;
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) acc[static_cast<size_t>(h * g.w + w)] += v;
        }
      }
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t w = 0; w < g.w; ++w)
          out[at(g, n, c, h, w)] = store<T>(acc[static_cast<size_t>(h * g.w + w)]);
    });
  });
}

STOKER_REGISTER_STUB(maxpool2d_forward, maxpool2d_forward);
STOKER_REGISTER_STUB(maxpool2d_backward, maxpool2d_backward);
STOKER_REGISTER_STUB(maxpool2d_forward_argmax, maxpool2d_forward_argmax);
STOKER_REGISTER_STUB(maxpool2d_backward_argmax, maxpool2d_backward_argmax);
STOKER_REGISTER_STUB(avgpool2d_forward, avgpool2d_forward);
STOKER_REGISTER_STUB(avgpool2d_backward, avgpool2d_backward);

}  // namespace stoker::ops::cpu
