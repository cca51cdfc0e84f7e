// CPU reference of the multi-tensor optimizer updates (per-element math in ops/optim_math.h,
// shared with the CUDA kernels). found_inf is read once on the host: on the CPU that is free.
// LARS's norms are summed in f64 (the GPU sums in f32: its trust ratios, and so its updates,
// agree to float rounding, not bit for bit).
//
// Speed (the optimizer-offload update runs here): each task's chunk is a plain loop in its own
// function, compiled twice on x86-64 gcc (ops/cpu/optim_simd.h): for x86-64-v3 (AVX2 + FMA) and
// the baseline, picked at load time by the CPU. The math's fmaf calls become vfmadd in the v3
// clone and libm calls in the baseline; both are correctly rounded, so the two clones (and the
// GPU kernels) give the same bits. This file is compiled with -fno-math-errno (sqrtf without an
// errno branch, so it vectorizes; the result is the same correctly rounded square root).
#include <oneapi/tbb/parallel_reduce.h>

#include <cmath>

#include "ops/copy_stubs.h"
#include "ops/cpu/optim_simd.h"
#include "ops/cpu/optim_step.h"
#include "ops/cpu/parallel.h"
#include "ops/optim_stubs.h"

namespace stoker::ops::cpu {

namespace {
// The chunk loops: restrict pointers (parameters, gradients and states never overlap) and the
// constants by value, so the vectorizer needs no alias checks.
STOKER_OPTIM_CLONES void sgd_chunk(float* __restrict p, const float* __restrict g,
                                   float* __restrict b, int64_t n, const detail::SgdConsts c) {
  if (b) {
    for (int64_t i = 0; i < n; ++i) detail::sgd_update(p[i], b[i], g[i], c);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      float unused = 0.0f;
      detail::sgd_update(p[i], unused, g[i], c);
    }
  }
}

STOKER_OPTIM_CLONES void adamw_chunk(float* __restrict p, const float* __restrict g,
                                     float* __restrict m, float* __restrict v, int64_t n,
                                     const detail::AdamWConsts c) {
  for (int64_t i = 0; i < n; ++i) detail::adamw_update(p[i], m[i], v[i], g[i], c);
}
STOKER_OPTIM_CLONES void lars_chunk(float* __restrict p, const float* __restrict g,
                                    float* __restrict b, int64_t n, const float lr,
                                    const float weight_decay, const float momentum) {
  for (int64_t i = 0; i < n; ++i) detail::lars_update(p[i], b[i], g[i], lr, weight_decay, momentum);
}

// The sums of squares of a tensor's values and gradient, in f64 with oneTBB's deterministic
// reduce (fixed split points: the same value on every run and thread count).
struct SumsOfSquares {
  double p = 0.0, g = 0.0;
};
SumsOfSquares sums_of_squares(const float* p, const float* g, int64_t n) {
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<int64_t>(0, n, kGrain), SumsOfSquares{},
      [&](const tbb::blocked_range<int64_t>& r, SumsOfSquares acc) {
        for (int64_t i = r.begin(); i < r.end(); ++i) {
          const double x = p[i], y = g[i];
          acc.p += x * x;
          acc.g += y * y;
        }
        return acc;
      },
      [](const SumsOfSquares& a, const SumsOfSquares& b) {
        return SumsOfSquares{a.p + b.p, a.g + b.g};
      });
}
}  // namespace

void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
              std::span<const Tensor> bufs, const detail::SgdConsts& host_consts,
              const Tensor& found_inf, const Tensor& lr_device) {
  if (skip_step(found_inf)) return;
  detail::SgdConsts c = host_consts;
  if (lr_device.defined()) c.lr = device_lr(lr_device);
  for (size_t t = 0; t < params.size(); ++t) {
    float* p = static_cast<float*>(params[t].data());
    const float* g = static_cast<const float*>(grads[t].data());
    float* b = c.has_momentum ? static_cast<float*>(bufs[t].data()) : nullptr;
    parallel_range(params[t].numel(), [&](int64_t s, int64_t e) {
      sgd_chunk(p + s, g + s, b ? b + s : nullptr, e - s, c);
    });
  }
}

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                const detail::AdamWConsts& host_consts, const Tensor& found_inf,
                const Tensor& step_state, double beta1, double beta2, double lr,
                std::span<const Tensor> compute_copies, const Tensor& lr_device,
                double weight_decay) {
  const bool skip = skip_step(found_inf);
  detail::AdamWConsts host = host_consts;
  if (lr_device.defined()) {  // the learning rate of this step, as the host would have passed it
    lr = static_cast<double>(device_lr(lr_device));
    host.decay = detail::adamw_decay(lr, weight_decay);
  }
  const detail::AdamWConsts c = adamw_step_consts(host, step_state, skip, beta1, beta2, lr);
  if (skip) return;
  for (size_t t = 0; t < params.size(); ++t) {
    float* p = static_cast<float*>(params[t].data());
    const float* g = static_cast<const float*>(grads[t].data());
    float* m = static_cast<float*>(exp_avgs[t].data());
    float* v = static_cast<float*>(exp_avg_sqs[t].data());
    parallel_range(params[t].numel(), [&](int64_t s, int64_t e) {
      adamw_chunk(p + s, g + s, m + s, v + s, e - s, c);
    });
    // The compute copy (the GPU writes it in the update's pass): cast's rounding, cast_multi's.
    if (!compute_copies.empty() && compute_copies[t].defined())
      cast_impl(compute_copies[t], params[t]);
  }
}

void lars_step(std::span<const Tensor> params, std::span<const Tensor> grads,
               std::span<const Tensor> bufs, std::span<const uint8_t> adapt,
               const detail::LarsConsts& host_consts, const Tensor& found_inf,
               const Tensor& lr_device) {
  if (skip_step(found_inf)) return;
  detail::LarsConsts c = host_consts;
  if (lr_device.defined()) c.lr = device_lr(lr_device);
  for (size_t t = 0; t < params.size(); ++t) {
    float* p = static_cast<float*>(params[t].data());
    const float* g = static_cast<const float*>(grads[t].data());
    float* b = static_cast<float*>(bufs[t].data());
    const int64_t n = params[t].numel();
    float lr = c.lr, weight_decay = 0.0f;
    if (adapt[t] != 0) {
      const SumsOfSquares s = sums_of_squares(p, g, n);
      lr = c.lr * detail::lars_trust(static_cast<float>(std::sqrt(s.p)),
                                     static_cast<float>(std::sqrt(s.g)), c);
      weight_decay = c.weight_decay;
    }
    parallel_range(n, [&](int64_t s, int64_t e) {
      lars_chunk(p + s, g + s, b + s, e - s, lr, weight_decay, c.momentum);
    });
  }
}

STOKER_REGISTER_STUB(sgd_step, sgd_step);
STOKER_REGISTER_STUB(adamw_step, adamw_step);
STOKER_REGISTER_STUB(lars_step, lars_step);

}  // namespace stoker::ops::cpu
