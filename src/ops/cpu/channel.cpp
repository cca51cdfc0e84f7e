// CPU reference for the per-channel image ops: layout conversion, channel bias and its
// gradient, global average pooling. Every loop runs over (n, c) planes so that one task touches
// one channel of one image, whatever the layout; offsets come from detail::offset4, the same
// formula the CUDA kernels use. Sums accumulate in fp64 in a fixed order (deterministic).
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>

#include "ops/conv_stubs.h"
#include "ops/cpu/parallel.h"
#include "ops/geometry.h"
#include "ops/layout_stubs.h"
#include "ops/pool_stubs.h"

namespace stoker::ops::cpu {

namespace {

// Planes per task so that a task covers about kGrain elements.
int64_t plane_grain(int64_t plane) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, plane));
}

// f(n, c) for every plane of d, in parallel.
template <typename F>
void for_planes(const Dims4& d, F&& f) {
  const int64_t planes = d.n * d.c;
  parallel_range(
      planes,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) f(i / d.c, i % d.c);
      },
      plane_grain(d.h * d.w));
}

}  // namespace

void convert_layout(const Tensor& dst, const Tensor& src, Layout from, Layout to) {
  const Dims4 d = dims4(src.shape(), from);
  visit_float(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_float(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* out = static_cast<D*>(dst.data());
      const S* in = static_cast<const S*>(src.data());
      for_planes(d, [&](int64_t n, int64_t c) {
        for (int64_t h = 0; h < d.h; ++h) {
          for (int64_t w = 0; w < d.w; ++w) {
            out[detail::offset4(to, d.c, d.h, d.w, n, c, h, w)] =
                store<D>(load(in[detail::offset4(from, d.c, d.h, d.w, n, c, h, w)]));
          }
        }
      });
    });
  });
}

void add_channel_bias(const Tensor& y, const Tensor& bias, Layout layout) {
  const Dims4 d = dims4(y.shape(), layout);
  const float* b = static_cast<const float*>(bias.data());
  visit_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(y.data());
    for_planes(d, [&](int64_t n, int64_t c) {
      for (int64_t h = 0; h < d.h; ++h) {
        for (int64_t w = 0; w < d.w; ++w) {
          T& v = p[detail::offset4(layout, d.c, d.h, d.w, n, c, h, w)];
          v = store<T>(load(v) + b[c]);
        }
      }
    });
  });
}

void channel_bias_grad(const Tensor& dbias, const Tensor& dy, Layout layout) {
  const Dims4 d = dims4(dy.shape(), layout);
  float* db = static_cast<float*>(dbias.data());
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dy.data());
    tbb::parallel_for(int64_t{0}, d.c, [&](int64_t c) {
      double sum = 0.0;
      for (int64_t n = 0; n < d.n; ++n)
        for (int64_t h = 0; h < d.h; ++h)
          for (int64_t w = 0; w < d.w; ++w)
            sum += load(g[detail::offset4(layout, d.c, d.h, d.w, n, c, h, w)]);
      db[c] = static_cast<float>(static_cast<double>(db[c]) + sum);
    });
  });
}

void global_avgpool_forward(const Tensor& y, const Tensor& x, Layout layout) {
  const Dims4 d = dims4(x.shape(), layout);
  const double inv = 1.0 / static_cast<double>(d.h * d.w);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    T* out = static_cast<T*>(y.data());
    for_planes(d, [&](int64_t n, int64_t c) {
      double sum = 0.0;
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w)
          sum += load(in[detail::offset4(layout, d.c, d.h, d.w, n, c, h, w)]);
      out[n * d.c + c] = store<T>(static_cast<float>(sum * inv));
    });
  });
}

void global_avgpool_backward(const Tensor& dx, const Tensor& dy, Layout layout) {
  const Dims4 d = dims4(dx.shape(), layout);
  const float inv = 1.0f / static_cast<float>(d.h * d.w);
  visit_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dy.data());
    T* out = static_cast<T*>(dx.data());
    for_planes(d, [&](int64_t n, int64_t c) {
      const T v = store<T>(load(g[n * d.c + c]) * inv);
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w)
          out[detail::offset4(layout, d.c, d.h, d.w, n, c, h, w)] = v;
    });
  });
}

STOKER_REGISTER_STUB(convert_layout, convert_layout);
STOKER_REGISTER_STUB(add_channel_bias, add_channel_bias);
STOKER_REGISTER_STUB(channel_bias_grad, channel_bias_grad);
STOKER_REGISTER_STUB(global_avgpool_forward, global_avgpool_forward);
STOKER_REGISTER_STUB(global_avgpool_backward, global_avgpool_backward);

}  // namespace stoker::ops::cpu
