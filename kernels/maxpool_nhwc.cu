// CUDA max pooling for channels-last (NHWC) tensors: the backward, called by src/ops/cuda/
// pool_cudnn.cpp in place of cudnnPoolingBackward (NCHW and the plain forward stay on cuDNN),
// and the argmax pair (ops::maxpool2d_forward_argmax / maxpool2d_backward_argmax), whose
// forward writes y and the argmax bytes in one pass so that the backward is the gather alone.
//
// Why our own: cuDNN's deterministic max-pool backward took 1.66 ms for the ResNet-50 stem's
// [256, 112, 112, 64] bf16 input on an H100 (619 GB/s; 3.3 % of the step), where the bytes it
// must move (dy, x once, dx) take ~0.4 ms.
//
// Two passes, no atomics, so the result is deterministic and equals the CPU reference bit for
// bit (src/ops/cpu/pool.cpp: same window rule, same fp32 summation order):
//  1. argmax: one thread per (output pixel, V adjacent channels) scans its window in row-major
//     order and writes, per channel, the position of the window's first maximum (a NaN wins and
//     stops the scan; padding never selected; an all -inf window picks its first element) as a
//     byte: row * kw + col within the unclipped window. So kh * kw <= 256 (the caller checks).
//  2. gather: one thread per (input pixel, V channels) visits the windows that contain the
//     pixel in (oh, ow) row-major order and adds dy where the window's byte names the pixel:
//     fp32, one rounding to T. Every dx element is written (0 where no window picked it).
// Traffic: x read once (overlapping windows hit L1/L2), the bytes written once and read by the
// <= ceil(kh / sh) * ceil(kw / sw) windows of a pixel from cache, dy read, dx written once.
// The argmax forward is pass 1 that also stores each window's maximum (the x value it found:
// exact, and a NaN as it was) as y; its backward is pass 2 on the bytes the forward kept.
#include <algorithm>

#include "kernel_util.cuh"
#include "ops/cuda/maxpool_nhwc.h"
#include "ops/geometry.h"
#include "ops/pool_stubs.h"

namespace stoker::ops::cuda {

namespace {

// The pooling problem in the kernels' integers: 32-bit, as x has fewer than 2^30 elements (the
// caller checks), so every index and offset of x and y fits. (64-bit division made the first
// version of these kernels issue-bound: 1.27 ms for the ResNet stem on an H100.)
struct Geo {
  int n, h, w, c, oh, ow;
  int kh, kw, sh, sw, ph, pw;
};

// Work item i of a [N, H, W, C / V] grid: the pixel (n, h, w) and its first channel c.
struct Item {
  int pix, n, h, w, c;
};

template <int V>
__device__ STOKER_FORCEINLINE Item item_at(int i, int channels, int height, int width) {
  const int packs = channels / V;
  Item t;
  t.pix = i / packs;
  t.c = (i - t.pix * packs) * V;
  t.w = t.pix % width;
  t.h = (t.pix / width) % height;
  t.n = t.pix / (width * height);
  return t;
}

// y: null, or where each window's maximum goes (the argmax forward).
template <int V, typename T>
__global__ void __launch_bounds__(kBlockSize)
    window_argmax_kernel(const T* x, uint8_t* arg, T* y, Geo g, int items) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
    const Item t = item_at<V>(i, g.c, g.oh, g.ow);
    const int pix = t.pix, n = t.n, oh = t.h, ow = t.w, c = t.c;
    const int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    const int hb = max(h0, 0), he = min(h0 + g.kh, g.h);
    const int wb = max(w0, 0), we = min(w0 + g.kw, g.w);
    float best[V];
    uint8_t pos[V];
    bool nan[V];
    const auto first = static_cast<uint8_t>((hb - h0) * g.kw + (wb - w0));
#pragma unroll
    for (int k = 0; k < V; ++k) {
      best[k] = -__int_as_float(0x7f800000);  // -inf
      pos[k] = first;
      nan[k] = false;
    }
    for (int h = hb; h < he; ++h) {
      for (int w = wb; w < we; ++w) {
        float v[V];
        load_floats<V>(v, x + ((n * g.h + h) * g.w + w) * g.c + c);
        const auto here = static_cast<uint8_t>((h - h0) * g.kw + (w - w0));
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (nan[k]) continue;
          if (v[k] != v[k]) {
            nan[k] = true;
            best[k] = v[k];
            pos[k] = here;
          } else if (v[k] > best[k]) {
            best[k] = v[k];
            pos[k] = here;
          }
        }
      }
    }
    Pack<uint8_t, V> p;  // V == 1 too: a one-byte word
#pragma unroll
    for (int k = 0; k < V; ++k) p.v[k] = pos[k];
    store_pack<V>(arg + pix * g.c + c, p);
    if (y != nullptr) store_floats<V>(y + pix * g.c + c, best);  // values of x: exact in T
  }
}

template <int V, typename T>
__global__ void __launch_bounds__(kBlockSize)
    gather_kernel(T* dx, const T* dy, const uint8_t* arg, Geo g, int items) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
    const Item t = item_at<V>(i, g.c, g.h, g.w);
    const int pix = t.pix, n = t.n, ih = t.h, iw = t.w, c = t.c;
    // Windows oh with oh * sh - ph <= ih < oh * sh - ph + kh, clipped to the output.
    const int hh = ih + g.ph, ww = iw + g.pw;
    const int oh_lo = hh < g.kh ? 0 : (hh - g.kh) / g.sh + 1;
    const int oh_hi = min(hh / g.sh, g.oh - 1);
    const int ow_lo = ww < g.kw ? 0 : (ww - g.kw) / g.sw + 1;
    const int ow_hi = min(ww / g.sw, g.ow - 1);
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.0f;
    for (int oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int ow = ow_lo; ow <= ow_hi; ++ow) {
        const auto me = static_cast<uint8_t>((hh - oh * g.sh) * g.kw + (ww - ow * g.sw));
        const int o = ((n * g.oh + oh) * g.ow + ow) * g.c + c;
        const Pack<uint8_t, V> a = load_pack<V>(arg + o);  // V == 1 too: a one-byte word
        float d[V];
        load_floats<V>(d, dy + o);
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (a.v[k] == me) acc[k] += d[k];
      }
    }
    store_floats<V>(dx + pix * g.c + c, acc);
  }
}

}  // namespace

namespace {

Geo geo_of(const Shape& x, const Pool2dParams& p) {
  const detail::PoolGeometry pg = detail::pool_geometry(x, p);
  return {static_cast<int>(pg.n),  static_cast<int>(pg.h),  static_cast<int>(pg.w),
          static_cast<int>(pg.c),  static_cast<int>(pg.oh), static_cast<int>(pg.ow),
          static_cast<int>(pg.kh), static_cast<int>(pg.kw), static_cast<int>(pg.sh),
          static_cast<int>(pg.sw), static_cast<int>(pg.ph), static_cast<int>(pg.pw)};
}

// The passes over x / y / dy / dx of dtype `dtype` (x and y null: no argmax pass; dy and dx
// null: no gather), 16-byte packs of V channels (8 bytes of the argmax) when C allows and every
// pointer given is aligned (then every pixel's row is), else one channel a thread.
void run_passes(DType dtype, const Geo& g, Device d, const void* x, void* y, uint8_t* arg,
                const void* dy, void* dx) {
  const cudaStream_t stream = core::cuda_stream(d);
  visit_float(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto run = [&](auto width) {
      constexpr int V = decltype(width)::value;
      const int out_items = g.n * g.oh * g.ow * (g.c / V);
      const int in_items = g.n * g.h * g.w * (g.c / V);
      if (x != nullptr && out_items > 0) {
        window_argmax_kernel<V><<<grid_for(out_items, d.index), kBlockSize, 0, stream>>>(
            static_cast<const T*>(x), arg, static_cast<T*>(y), g, out_items);
        STOKER_CUDA_CHECK(cudaGetLastError());
      }
      if (dx != nullptr && in_items > 0) {
        gather_kernel<V><<<grid_for(in_items, d.index), kBlockSize, 0, stream>>>(
            static_cast<T*>(dx), static_cast<const T*>(dy), arg, g, in_items);
        STOKER_CUDA_CHECK(cudaGetLastError());
      }
    };
    constexpr int kV = 16 / sizeof(T);
    bool vec = g.c % kV == 0;
    for (const void* ptr : {x, static_cast<const void*>(y), dy, static_cast<const void*>(dx),
                            static_cast<const void*>(arg)})
      vec = vec && reinterpret_cast<uintptr_t>(ptr) % 16 == 0;  // null is aligned
    if (vec) {
      run(std::integral_constant<int, kV>{});
    } else {
      run(std::integral_constant<int, 1>{});
    }
  });
}

}  // namespace

void maxpool_nhwc_backward(const Tensor& dx, const Tensor& dy, const Tensor& x,
                           const Pool2dParams& p) {
  if (x.numel() == 0) return;
  const Geo g = geo_of(x.shape(), p);
  // One byte per output element: the window position of its maximum.
  const Tensor arg = Tensor::empty({int64_t{g.n} * g.oh * g.ow * g.c}, DType::u8, x.device());
  run_passes(x.dtype(), g, x.device(), x.data(), nullptr, static_cast<uint8_t*>(arg.data()),
             dy.data(), dx.data());
}

void maxpool2d_forward_argmax(const Tensor& y, const Tensor& argmax, const Tensor& x,
                              const Pool2dParams& p) {
  const core::DeviceScope scope(x.device().index);
  run_passes(x.dtype(), geo_of(x.shape(), p), x.device(), x.data(), y.data(),
             static_cast<uint8_t*>(argmax.data()), nullptr, nullptr);
}

void maxpool2d_backward_argmax(const Tensor& dx, const Tensor& dy, const Tensor& argmax,
                               const Pool2dParams& p) {
  const core::DeviceScope scope(dx.device().index);
  run_passes(dx.dtype(), geo_of(dx.shape(), p), dx.device(), nullptr, nullptr,
             static_cast<uint8_t*>(argmax.data()), dy.data(), dx.data());
}

STOKER_REGISTER_STUB(maxpool2d_forward_argmax, maxpool2d_forward_argmax);
STOKER_REGISTER_STUB(maxpool2d_backward_argmax, maxpool2d_backward_argmax);

}  // namespace stoker::ops::cuda
