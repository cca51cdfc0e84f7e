// CPU reference for layer normalization: fp64 statistics and math, one rounding per output, so
// it is the accurate side the CUDA kernels (fp32) are compared against.
// Forward: two passes per row (mean, then the centred sum of squares: no cancellation).
// Backward, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dgamma += sum_rows dy * xhat,   dbeta += sum_rows dy
// dgamma/dbeta are parallel over column blocks, each summing its columns over all rows in row
// order, so the result is independent of the thread count; they are computed before dx, which
// is parallel over rows, so dx may alias dy.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/backend.h"
#include "ops/cpu/parallel.h"

namespace stoker::ops::cpu {

namespace {
int64_t row_grain(int64_t c) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, c)); }
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
          for (int64_t r = r0; r < r1; ++r) {
            const T* xr = px + r * c;
            double sum = 0.0;
            for (int64_t j = 0; j < c; ++j) sum += load(xr[j]);
            const double m = sum / static_cast<double>(c);
            double sq = 0.0;
            for (int64_t j = 0; j < c; ++j) {
              const double d = load(xr[j]) - m;
              sq += d * d;
            }
            const double inv = 1.0 / std::sqrt(sq / static_cast<double>(c) + eps);
            T* yr = py + r * c;
            for (int64_t j = 0; j < c; ++j)
              yr[j] = store<T>(static_cast<float>((load(xr[j]) - m) * inv * gm[j] + bt[j]));
            mu[r] = static_cast<float>(m);
            rs[r] = static_cast<float>(inv);
          }
        },
        row_grain(c));
  });
}

void layernorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma) {
  const int64_t c = gamma.numel();
  const int64_t n = x.numel() / c;
  const float* gm = static_cast<const float*>(gamma.data());
  const float* mu = static_cast<const float*>(mean.data());
  const float* rs = static_cast<const float*>(rstd.data());
  float* dg = static_cast<float*>(dgamma.data());
  float* db = static_cast<float*>(dbeta.data());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    const T* pdy = static_cast<const T*>(dy.data());
    T* pdx = static_cast<T*>(dx.data());
    // dgamma, dbeta: column blocks over all rows.
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
    // dx, row by row.
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const T* xr = px + r * c;
            const T* gr = pdy + r * c;
            const double m = mu[r], inv = rs[r];
            double sum_g = 0.0, sum_gx = 0.0;
            for (int64_t j = 0; j < c; ++j) {
              const double g = static_cast<double>(load(gr[j])) * gm[j];
              sum_g += g;
              sum_gx += g * ((load(xr[j]) - m) * inv);
            }
            const double a = sum_g / static_cast<double>(c);
            const double b = sum_gx / static_cast<double>(c);
            T* dr = pdx + r * c;
            for (int64_t j = 0; j < c; ++j) {
              const double g = static_cast<double>(load(gr[j])) * gm[j];
              const double xhat = (load(xr[j]) - m) * inv;
              dr[j] = store<T>(static_cast<float>(inv * (g - a - xhat * b)));
            }
          }
        },
        row_grain(c));
  });
}

}  // namespace stoker::ops::cpu
