// CPU reference for RMS normalization (ops/layernorm.h): fp64 statistics and math, so it is the
// accurate side the CUDA kernels (fp32) are compared against, with the roundings of Hugging
// Face's LlamaRMSNorm where they are part of the result: h = x * rstd is rounded to float and
// then to the dtype, y = weight * h is an fp32 product rounded to the dtype.
// Backward, with xn = x * rstd and g = dy * weight:
//   dx = rstd * (g - xn * mean(g * xn)),   dweight += sum_rows dy * h
// dweight is parallel over column blocks, each summing its columns over all rows in row order
// (independent of the thread count), and computed before dx, which may alias dy.
// The fused add_rmsnorm_* run the same row functions on the rounded sum, and add dsum_in to each
// rounded dx element, so both have the bits of ops::add + rmsnorm_* on the CPU.
#include <algorithm>
#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/rmsnorm_stubs.h"

namespace stoker::ops::cpu {

namespace {
int64_t row_grain(int64_t c) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, c)); }

// h = x * rstd as the forward rounds it: to float, then to T.
template <typename T>
float rounded_h(T x, double inv) {
  return load(store<T>(static_cast<float>(load(x) * inv)));
}

template <typename T>
void forward_row(T* yr, float* rs, const T* xr, int64_t c, const float* w, float eps) {
  double sq = 0.0;
  for (int64_t j = 0; j < c; ++j) {
    const double v = load(xr[j]);
    sq += v * v;
  }
  // The saved f32 rstd is the one h is computed with, so the backward rebuilds h exactly.
  const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(c) + eps));
  // Each y[j] reads only x[j]: y may be x itself.
  for (int64_t j = 0; j < c; ++j) yr[j] = store<T>(w[j] * rounded_h(xr[j], inv));
  *rs = inv;
}

// One row of dx (+ add, rounded again, for the fused backward); dr may alias gr.
template <typename T>
void backward_row(T* dr, const T* gr, const T* xr, const T* add, double inv, const float* w,
                  int64_t c) {
  double dot = 0.0;
  for (int64_t j = 0; j < c; ++j)
    dot += static_cast<double>(load(gr[j])) * w[j] * (load(xr[j]) * inv);
  const double b = dot / static_cast<double>(c);
  for (int64_t j = 0; j < c; ++j) {
    const double g = static_cast<double>(load(gr[j])) * w[j];
    const T d = store<T>(static_cast<float>(inv * (g - load(xr[j]) * inv * b)));
    dr[j] = add ? store<T>(load(d) + load(add[j])) : d;
  }
}

// dweight += sum_rows dy * h: column blocks over all rows.
template <typename T>
void weight_grad(float* dw, const T* pdy, const T* px, const float* rs, int64_t n, int64_t c) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (c + kBlock - 1) / kBlock;
  parallel_range(
      blocks,
      [&](int64_t b0, int64_t b1) {
        double acc[kBlock];
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t j0 = blk * kBlock;
          const int64_t width = std::min(kBlock, c - j0);
          std::fill(acc, acc + width, 0.0);
          for (int64_t r = 0; r < n; ++r) {
            const T* xr = px + r * c + j0;
            const T* gr = pdy + r * c + j0;
            const double inv = rs[r];
            for (int64_t j = 0; j < width; ++j)
              acc[j] += static_cast<double>(load(gr[j])) * rounded_h(xr[j], inv);
          }
          for (int64_t j = 0; j < width; ++j) dw[j0 + j] = static_cast<float>(dw[j0 + j] + acc[j]);
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n * kBlock)));
}

void backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor* add,
              const Tensor& x, const Tensor& rstd, const Tensor& weight) {
  const int64_t c = weight.numel();
  const int64_t n = x.numel() / c;
  const float* w = static_cast<const float*>(weight.data());
  const float* rs = static_cast<const float*>(rstd.data());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    const T* pdy = static_cast<const T*>(dy.data());
    const T* padd = add ? static_cast<const T*>(add->data()) : nullptr;
    T* pdx = static_cast<T*>(dx.data());
    weight_grad(static_cast<float*>(dweight.data()), pdy, px, rs, n, c);  // before dx (aliasing)
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            backward_row(pdx + r * c, pdy + r * c, px + r * c, padd ? padd + r * c : nullptr,
                         static_cast<double>(rs[r]), w, c);
        },
        row_grain(c));
  });
}

void forward(const Tensor& y, const Tensor* sum, const Tensor& rstd, const Tensor& x,
             const Tensor* residual, const Tensor& weight, float eps) {
  const int64_t c = weight.numel();
  const int64_t n = x.numel() / c;
  const float* w = static_cast<const float*>(weight.data());
  float* rs = static_cast<float*>(rstd.data());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    const T* pr = residual ? static_cast<const T*>(residual->data()) : nullptr;
    T* ps = sum ? static_cast<T*>(sum->data()) : nullptr;
    T* py = static_cast<T*>(y.data());
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const T* xr = px + r * c;
            if (ps) {  // the sum row first, rounded as ops::add rounds it; then normalize it
              T* sr = ps + r * c;
              const T* rr = pr + r * c;
              for (int64_t j = 0; j < c; ++j) sr[j] = store<T>(load(xr[j]) + load(rr[j]));
              xr = sr;
            }
            forward_row(py + r * c, rs + r, xr, c, w, eps);
          }
        },
        row_grain(c));
  });
}
}  // namespace

void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     float eps) {
  forward(y, nullptr, rstd, x, nullptr, weight, eps);
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& rstd, const Tensor& weight) {
  backward(dx, dweight, dy, nullptr, x, rstd, weight);
}

void add_rmsnorm_forward(const Tensor& y, const Tensor& sum, const Tensor& rstd, const Tensor& x,
                         const Tensor& residual, const Tensor& weight, float eps) {
  forward(y, &sum, rstd, x, &residual, weight, eps);
}

void add_rmsnorm_backward(const Tensor& dsum, const Tensor& dweight, const Tensor& dy,
                          const Tensor& dsum_in, const Tensor& sum, const Tensor& rstd,
                          const Tensor& weight) {
  backward(dsum, dweight, dy, &dsum_in, sum, rstd, weight);
}

STOKER_REGISTER_STUB(rmsnorm_forward, rmsnorm_forward);
STOKER_REGISTER_STUB(rmsnorm_backward, rmsnorm_backward);
STOKER_REGISTER_STUB(add_rmsnorm_forward, add_rmsnorm_forward);
STOKER_REGISTER_STUB(add_rmsnorm_backward, add_rmsnorm_backward);

}  // namespace stoker::ops::cpu
