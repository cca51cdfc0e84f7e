// CPU reference for softmax cross-entropy and MSE: fp64 math per row / element, one rounding per
// output, and sums in a fixed order (per-row values first, then one ordered fold), so the value
// is independent of the thread count and is the accurate side the CUDA kernels are compared to.
//
// Cross-entropy with label smoothing s over C classes (PyTorch's nn.CrossEntropyLoss):
//   lse = max + log(sum exp(x - max))                      (stable for any logit range)
//   loss_row = (1 - s) (lse - x[t]) + s (lse - mean_c x[c])
//   dlogits  = scale / count * (exp(x - lse) - (1 - s) one_hot(t) - s / C)
// over the first `classes` columns of each row (C = classes); the columns after them are a
// padded head's padding: never read by the forward, zeros in the gradient.
// Targets are checked, in row order, before anything is written: the error names the first bad
// target and its row.
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/loss_stubs.h"
#include "ops/nn_math.h"

namespace stoker::ops::cpu {

namespace {
template <typename F>
void visit_targets(const Tensor& target, F&& f) {
  if (target.dtype() == DType::i32) {
    f(static_cast<const int32_t*>(target.data()));
  } else {
    f(static_cast<const int64_t*>(target.data()));
  }
}

template <typename I>
void check_targets(const char* op, const I* t, const Tensor& target, int64_t classes,
                   int64_t ignore_index) {
  for (int64_t r = 0; r < target.numel(); ++r) {
    const int64_t v = t[r];
    STOKER_CHECK(v == ignore_index || (v >= 0 && v < classes), "ops::", op, ": target ", v,
                 " at row ", r, " of ", target.str(), " is outside [0, ", classes,
                 ") and is not ignore_index (", ignore_index, ")");
  }
}

int64_t row_grain(int64_t c) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, c)); }
}  // namespace

void cross_entropy_forward(const Tensor& loss, const Tensor& count, const Tensor& lse,
                           const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           float label_smoothing, const Tensor& divide_by, int64_t classes) {
  // Row stride ld, of which the first c columns are classes.
  const int64_t n = logits.size(0), ld = logits.size(1), c = classes;
  const double s = label_smoothing;
  float* out_lse = static_cast<float*>(lse.data());
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
  std::vector<uint8_t> counted(static_cast<size_t>(n), 0);
  visit_targets(target, [&](const auto* t) {
    check_targets("cross_entropy_forward", t, target, c, ignore_index);
    visit_float(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(logits.data());
      parallel_range(
          n,
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              const T* xr = x + r * ld;
              double m = -INFINITY;
              for (int64_t j = 0; j < c; ++j) m = std::max<double>(m, load(xr[j]));
              double sum_exp = 0.0, sum_x = 0.0;
              for (int64_t j = 0; j < c; ++j) {
                const double v = load(xr[j]);
                // -inf logits add nothing (also when all are -inf: lse = -inf, no NaN); a NaN
                // logit, which max skipped, makes the sum NaN.
                if (v != -INFINITY) sum_exp += std::exp(v - m);
                sum_x += v;
              }
              const double l = m + std::log(sum_exp);
              out_lse[r] = static_cast<float>(l);
              const int64_t tr = t[r];
              if (tr == ignore_index) continue;
              counted[static_cast<size_t>(r)] = 1;
              const double xt = load(xr[tr]);
              row_loss[static_cast<size_t>(r)] =
                  (1.0 - s) * (l - xt) + s * (l - sum_x / static_cast<double>(c));
            }
          },
          row_grain(c));
    });
  });
  double total = 0.0;
  int64_t kept = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (!counted[static_cast<size_t>(r)]) continue;
    total += row_loss[static_cast<size_t>(r)];
    ++kept;
  }
  if (divide_by.defined()) {  // one chunk of a chunked loss: its share of the mean
    *static_cast<float*>(loss.data()) += static_cast<float>(
        total / static_cast<double>(*static_cast<const float*>(divide_by.data())));
    return;
  }
  *static_cast<float*>(loss.data()) = static_cast<float>(total / static_cast<double>(kept));
  *static_cast<float*>(count.data()) = static_cast<float>(kept);
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                            const Tensor& lse, const Tensor& count, int64_t ignore_index,
                            float label_smoothing, float scale, const Tensor& grad_scale,
                            int64_t classes) {
  if (grad_scale.defined()) scale *= *static_cast<const float*>(grad_scale.data());
  const int64_t n = logits.size(0), ld = logits.size(1), c = classes;
  const double s = label_smoothing;
  const double smooth = s / static_cast<double>(c);
  const double factor =
      static_cast<double>(scale) / static_cast<double>(*static_cast<const float*>(count.data()));
  const float* l = static_cast<const float*>(lse.data());
  visit_targets(target, [&](const auto* t) {
    check_targets("cross_entropy_backward", t, target, c, ignore_index);
    visit_float(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(logits.data());
      T* d = static_cast<T*>(dlogits.data());
      parallel_range(
          n,
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              const T* xr = x + r * ld;
              T* dr = d + r * ld;
              const int64_t tr = t[r];
              if (tr == ignore_index) {
                std::fill(dr, dr + ld, store<T>(0.0f));
                continue;
              }
              for (int64_t j = 0; j < c; ++j) {
                const double p = std::exp(static_cast<double>(load(xr[j])) - l[r]);
                const double want = (j == tr ? 1.0 - s : 0.0) + smooth;
                dr[j] = store<T>(static_cast<float>((p - want) * factor));
              }
              std::fill(dr + c, dr + ld, store<T>(0.0f));  // padding: no gradient
            }
          },
          row_grain(c));
    });
  });
}

void count_targets(const Tensor& count, const Tensor& target, int64_t ignore_index) {
  int64_t kept = 0;
  visit_targets(target, [&](const auto* t) {
    for (int64_t i = 0; i < target.numel(); ++i) kept += t[i] != ignore_index;
  });
  *static_cast<float*>(count.data()) = static_cast<float>(kept);
}

void mse_forward(const Tensor& loss, const Tensor& pred, const Tensor& target) {
  const int64_t n = pred.numel();
  const double sum = visit_float(pred.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(pred.data());
    const T* t = static_cast<const T*>(target.data());
    return tbb::parallel_deterministic_reduce(
        tbb::blocked_range<int64_t>(0, n, kGrain), 0.0,
        [&](const tbb::blocked_range<int64_t>& range, double acc) {
          for (int64_t i = range.begin(); i < range.end(); ++i) {
            const double d = static_cast<double>(load(p[i])) - load(t[i]);
            acc += d * d;
          }
          return acc;
        },
        [](double a, double b) { return a + b; });
  });
  *static_cast<float*>(loss.data()) = static_cast<float>(sum / static_cast<double>(n));
}

void mse_backward(const Tensor& dpred, const Tensor& pred, const Tensor& target, float scale,
                  const Tensor& grad_scale) {
  float k = detail::mse_grad_factor(scale, pred.numel());
  if (grad_scale.defined()) k *= *static_cast<const float*>(grad_scale.data());
  visit_float(pred.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(pred.data());
    const T* t = static_cast<const T*>(target.data());
    T* d = static_cast<T*>(dpred.data());
    parallel_range(pred.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = store<T>(detail::mse_grad(load(p[i]), load(t[i]), k));
    });
  });
}

STOKER_REGISTER_STUB(cross_entropy_forward, cross_entropy_forward);
STOKER_REGISTER_STUB(cross_entropy_backward, cross_entropy_backward);
STOKER_REGISTER_STUB(count_targets, count_targets);
STOKER_REGISTER_STUB(mse_forward, mse_forward);
STOKER_REGISTER_STUB(mse_backward, mse_backward);

}  // namespace stoker::ops::cpu
