// CPU reference for layer normalization: fp64 statistics and math, one rounding per output, so
// it is the accurate side the CUDA kernels (fp32) are compared against.
// Forward: two passes per row (mean, then the centred sum of squares: no cancellation).
// Backward, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dgamma += sum_rows dy * xhat,   dbeta += sum_rows dy
// dgamma/dbeta are parallel over column blocks, each summing its columns over all rows in row
// order, so the result is independent of the thread count; they are computed before dx, which
// is parallel over rows, so dx may alias dy.
// The fused add_layernorm_* run the same row functions: the forward writes the rounded sum row
// first and normalizes it, the backward adds dsum_in to each rounded dx element (one more
// rounding), so both have the bits of the unfused ops::add + layernorm_* pair.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/layernorm_stubs.h"

namespace stoker::ops::cpu {

namespace {
int64_t row_grain(int64_t c) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, c)); }

// One row of the forward: yr = layernorm(xr), its mean and 1/std into *mu and *rs.
template <typename T>
void forward_row(T* yr, float* mu, float* rs, const T* xr, int64_t c, const float* gm,
                 const float* bt, float eps) {
  double sum = 0.0;
  for (int64_t j = 0; j < c; ++j) sum += load(xr[j]);
  const double m = sum / static_cast<double>(c);
  double sq = 0.0;
  for (int64_t j = 0; j < c; ++j) {
    const double d = load(xr[j]) - m;
    sq += d * d;
  }
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(c) + eps);
  for (int64_t j = 0; j < c; ++j)
    yr[j] = store<T>(static_cast<float>((load(xr[j]) - m) * inv * gm[j] + bt[j]));
  *mu = static_cast<float>(m);
  *rs = static_cast<float>(inv);
}

// One row of dx (elementwise in place over gr is fine: a row is read before it is written).
// With `add` (the fused backward), dr[j] = rounded dx + add[j], rounded again.
template <typename T>
void backward_row(T* dr, const T* gr, const T* xr, const T* add, double m, double inv,
                  const float* gm, int64_t c) {
  double sum_g = 0.0, sum_gx = 0.0;
  for (int64_t j = 0; j < c; ++j) {
    const double g = static_cast<double>(load(gr[j])) * gm[j];
    sum_g += g;
    sum_gx += g * ((load(xr[j]) - m) * inv);
  }
  const double a = sum_g / static_cast<double>(c);
  const double b = sum_gx / static_cast<double>(c);
  for (int64_t j = 0; j < c; ++j) {
    const double g = static_cast<double>(load(gr[j])) * gm[j];
    const double xhat = (load(xr[j]) - m) * inv;
    const T d = store<T>(static_cast<float>(inv * (g - a - xhat * b)));
    dr[j] = add ? store<T>(load(d) + load(add[j])) : d;
  }
}

// dgamma += sum_rows dy * xhat, dbeta += sum_rows dy: column blocks over all rows.
template <typename T>
void param_grads(float* dg, float* db, const T* pdy, const T* px, const float* mu, const float* rs,
                 int64_t n, int64_t c) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (c + kBlock - 1) / kBlock;
  parallel_range(
      blocks,
      [&](int64_t b0, int64_t b1) {
        double acc_g[kBlock], acc_b[kBlock];
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t j0 = blk * kBlock;
          const int64_t w = std::min(kBlock, c - j0);
          std::fill(acc_g, acc_g + w, 0.0);
          std::fill(acc_b, acc_b + w, 0.0);
          for (int64_t r = 0; r < n; ++r) {
            const T* xr = px + r * c + j0;
            const T* gr = pdy + r * c + j0;
            const double m = mu[r], inv = rs[r];
            for (int64_t j = 0; j < w; ++j) {
              const double g = load(gr[j]);
              acc_g[j] += g * ((load(xr[j]) - m) * inv);
              acc_b[j] += g;
            }
          }
          for (int64_t j = 0; j < w; ++j) {
            dg[j0 + j] = static_cast<float>(dg[j0 + j] + acc_g[j]);
            db[j0 + j] = static_cast<float>(db[j0 + j] + acc_b[j]);
          }
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n * kBlock)));
}

// The shared backward: param grads, then dx row by row (+ add when given).
void backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& dy,
              const Tensor* add, const Tensor& x, const Tensor& mean, const Tensor& rstd,
              const Tensor& gamma) {
  const int64_t c = gamma.numel();
  const int64_t n = x.numel() / c;
  const float* gm = static_cast<const float*>(gamma.data());
  const float* mu = static_cast<const float*>(mean.data());
  const float* rs = static_cast<const float*>(rstd.data());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    const T* pdy = static_cast<const T*>(dy.data());
    const T* padd = add ? static_cast<const T*>(add->data()) : nullptr;
    T* pdx = static_cast<T*>(dx.data());
    // Before dx: dx may alias dy.
    param_grads(static_cast<float*>(dgamma.data()), static_cast<float*>(dbeta.data()), pdy, px, mu,
                rs, n, c);
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            backward_row(pdx + r * c, pdy + r * c, px + r * c, padd ? padd + r * c : nullptr, mu[r],
                         rs[r], gm, c);
        },
        row_grain(c));
  });
}
}  // namespace

void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& gamma, const Tensor& beta, float eps) {
  const int64_t c = gamma.numel();
  const int64_t n = x.numel() / c;
  const float* gm = static_cast<const float*>(gamma.data());
  const float* bt = static_cast<const float*>(beta.data());
  float* mu = static_cast<float*>(mean.data());
  float* rs = static_cast<float*>(rstd.data());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    T* py = static_cast<T*>(y.data());
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            forward_row(py + r * c, mu + r, rs + r, px + r * c, c, gm, bt, eps);
        },
        row_grain(c));
  });
}

void layernorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma) {
  backward(dx, dgamma, dbeta, dy, nullptr, x, mean, rstd, gamma);
}

void add_layernorm_forward(const Tensor& y, const Tensor& sum, const Tensor& mean,
                           const Tensor& rstd, const Tensor& x, const Tensor& residual,
                           const Tensor& gamma, const Tensor& beta, float eps) {
  const int64_t c = gamma.numel();
  const int64_t n = x.numel() / c;
  const float* gm = static_cast<const float*>(gamma.data());
  const float* bt = static_cast<const float*>(beta.data());
  float* mu = static_cast<float*>(mean.data());
  float* rs = static_cast<float*>(rstd.data());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    const T* pr = static_cast<const T*>(residual.data());
    T* ps = static_cast<T*>(sum.data());
    T* py = static_cast<T*>(y.data());
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            T* sr = ps + r * c;
            const T* xr = px + r * c;
            const T* rr = pr + r * c;
            for (int64_t j = 0; j < c; ++j) sr[j] = store<T>(load(xr[j]) + load(rr[j]));
            forward_row(py + r * c, mu + r, rs + r, sr, c, gm, bt, eps);
          }
        },
        row_grain(c));
  });
}

void add_layernorm_backward(const Tensor& dsum, const Tensor& dgamma, const Tensor& dbeta,
                            const Tensor& dy, const Tensor& dsum_in, const Tensor& sum,
                            const Tensor& mean, const Tensor& rstd, const Tensor& gamma) {
  backward(dsum, dgamma, dbeta, dy, &dsum_in, sum, mean, rstd, gamma);
}

STOKER_REGISTER_STUB(layernorm_forward, layernorm_forward);
STOKER_REGISTER_STUB(layernorm_backward, layernorm_backward);
STOKER_REGISTER_STUB(add_layernorm_forward, add_layernorm_forward);
STOKER_REGISTER_STUB(add_layernorm_backward, add_layernorm_backward);

}  // namespace stoker::ops::cpu
