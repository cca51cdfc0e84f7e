// CPU reference batch normalization. One oneTBB task per channel: a channel's statistics are
// sums over (n, h, w), computed in fp64 with two passes (mean first, then squared deviations),
// so the reference is exact enough to judge the GPU's fp32 one-pass statistics. The backward
// uses the classic closed form with the forward's saved mean and invstd:
//   dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)),  xhat = (x - mean) * invstd
// The fused ReLU (BatchNormParams::relu) is the composition with ops/activation.h's ReLU, element
// by element and with its roundings: the forward rounds bn(x) to T and then applies relu to the
// rounded value (relu returns its argument or 0, so one more rounding changes nothing); the
// backward loads dz = relu_grad(dy, y) — exactly what relu_backward would have stored, as the
// result is dy or 0 — in place of dy. So fused == unfused bit for bit.
// The residual tail (y = act(bn(x) + r)) is the composition likewise: bn(x) rounded to T, plus r
// in fp32 and rounded to T once (ops::add, nn::Residual's add), then the optional ReLU; the
// backward's first pass stores dz (dy or 0: exact) into dresidual and the second reads it back.
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>

#include "ops/batchnorm_stubs.h"
#include "ops/cpu/parallel.h"
#include "ops/geometry.h"
#include "ops/nn_math.h"

namespace stoker::ops::cpu {

namespace {

// f(i) for the offset i of every element of channel c.
template <typename F>
void for_channel(const Dims4& d, Layout layout, int64_t c, F&& f) {
  const int64_t hw = d.h * d.w;
  if (layout == Layout::nchw) {
    for (int64_t n = 0; n < d.n; ++n) {
      const int64_t base = (n * d.c + c) * hw;
      for (int64_t s = 0; s < hw; ++s) f(base + s);
    }
  } else {
    const int64_t pixels = d.n * hw;
    for (int64_t q = 0; q < pixels; ++q) f(q * d.c + c);
  }
}

const float* cf(const Tensor& t) { return static_cast<const float*>(t.data()); }
float* mf(const Tensor& t) { return static_cast<float*>(t.data()); }

// The forward's output element: bn(x) as the float v, rounded to T, plus the residual element
// (when res is given) in fp32 and rounded to T, then the optional ReLU.
template <typename T>
T bn_out(double v, bool relu, const T* res, int64_t i) {
  T r = store<T>(static_cast<float>(v));
  if (res != nullptr) r = store<T>(load(res[i]) + load(r));
  return relu ? store<T>(detail::relu(load(r))) : r;
}

template <typename T>
const T* opt_in(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data()) : nullptr;
}

// The training forward of channel c once its batch mean and biased variance are known: the
// saved and running statistics, then y.
template <typename T>
void normalize_channel(int64_t c, double mean, double var, double m, const Dims4& d, const T* in,
                       const T* res, T* out, const BatchNormSaved& saved,
                       const BatchNormRunning& running, const BatchNormInput& bn,
                       const BatchNormParams& p) {
  const double invstd = 1.0 / std::sqrt(var + static_cast<double>(p.eps));
  mf(saved.mean)[c] = static_cast<float>(mean);
  mf(saved.invstd)[c] = static_cast<float>(invstd);
  if (running.mean.defined()) {
    const double mo = p.momentum;
    float& rm = mf(running.mean)[c];
    float& rv = mf(running.var)[c];
    rm = static_cast<float>((1.0 - mo) * rm + mo * mean);
    rv = static_cast<float>((1.0 - mo) * rv + mo * var * m / (m - 1.0));
  }
  const double scale = invstd * cf(bn.gamma)[c];
  const double shift = cf(bn.beta)[c] - mean * scale;
  for_channel(d, p.layout, c,
              [&](int64_t i) { out[i] = bn_out<T>(load(in[i]) * scale + shift, p.relu, res, i); });
}

}  // namespace

void batchnorm_forward_train(const Tensor& y, const BatchNormSaved& saved,
                             const BatchNormRunning& running, const BatchNormInput& bn,
                             const BatchNormParams& p) {
  const Tensor& x = bn.x;
  const Dims4 d = dims4(x.shape(), p.layout);
  const double m = static_cast<double>(d.n * d.h * d.w);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    tbb::parallel_for(int64_t{0}, d.c, [&](int64_t c) {
      double sum = 0.0;
      for_channel(d, p.layout, c, [&](int64_t i) { sum += load(in[i]); });
      const double mean = sum / m;
      double sq = 0.0;
      for_channel(d, p.layout, c, [&](int64_t i) {
        const double dv = load(in[i]) - mean;
        sq += dv * dv;
      });
      normalize_channel<T>(c, mean, sq / m, m, d, in, opt_in<T>(bn.residual),
                           static_cast<T*>(y.data()), saved, running, bn, p);
    });
  });
}

void batchnorm_forward_train_from_sums(const Tensor& y, const BatchNormSaved& saved,
                                       const BatchNormRunning& running, const BatchNormInput& bn,
                                       const BatchNormSums& sums, const BatchNormParams& p) {
  const Tensor& x = bn.x;
  const Dims4 d = dims4(x.shape(), p.layout);
  const double m = static_cast<double>(d.n * d.h * d.w);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    tbb::parallel_for(int64_t{0}, d.c, [&](int64_t c) {
      const double mean = cf(sums.sum)[c] / m;
      const double var = std::max(cf(sums.sum_sq)[c] / m - mean * mean, 0.0);
      normalize_channel<T>(c, mean, var, m, d, static_cast<const T*>(x.data()),
                           opt_in<T>(bn.residual), static_cast<T*>(y.data()), saved, running, bn,
                           p);
    });
  });
}

void batchnorm_forward_eval(const Tensor& y, const BatchNormInput& bn,
                            const BatchNormRunning& running, const BatchNormParams& p) {
  const Tensor &x = bn.x, &gamma = bn.gamma, &beta = bn.beta, &residual = bn.residual;
  const Tensor &running_mean = running.mean, &running_var = running.var;
  const Dims4 d = dims4(x.shape(), p.layout);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    const T* res = opt_in<T>(residual);
    T* out = static_cast<T*>(y.data());
    tbb::parallel_for(int64_t{0}, d.c, [&](int64_t c) {
      const double invstd =
          1.0 / std::sqrt(static_cast<double>(cf(running_var)[c]) + static_cast<double>(p.eps));
      const double scale = invstd * cf(gamma)[c];
      const double shift = cf(beta)[c] - cf(running_mean)[c] * scale;
      for_channel(d, p.layout, c, [&](int64_t i) {
        out[i] = bn_out<T>(load(in[i]) * scale + shift, p.relu, res, i);
      });
    });
  });
}

void batchnorm_backward(const BatchNormGrads& grads, const Tensor& dy, const BatchNormInput& bn,
                        const BatchNormSaved& saved, const BatchNormParams& p, const Tensor& y) {
  // The mask comes from y (bn.beta is not read).
  const Tensor &dx = grads.dx, &dgamma = grads.dgamma, &dbeta = grads.dbeta;
  const Tensor& dresidual = grads.dresidual;
  const Tensor &x = bn.x, &gamma = bn.gamma, &save_mean = saved.mean, &save_invstd = saved.invstd;
  const Dims4 d = dims4(x.shape(), p.layout);
  const double m = static_cast<double>(d.n * d.h * d.w);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data());
    const T* g = static_cast<const T*>(dy.data());
    const T* yo = p.relu ? static_cast<const T*>(y.data()) : nullptr;
    T* out = static_cast<T*>(dx.data());
    T* dres = dresidual.defined() ? static_cast<T*>(dresidual.data()) : nullptr;
    // The gradient with respect to bn(x): dy, or with the fused ReLU dy masked by y > 0.
    const auto grad = [&](int64_t i) -> double {
      return yo != nullptr ? detail::relu_grad(load(g[i]), load(yo[i])) : load(g[i]);
    };
    tbb::parallel_for(int64_t{0}, d.c, [&](int64_t c) {
      const double mean = cf(save_mean)[c];
      const double invstd = cf(save_invstd)[c];
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      for_channel(d, p.layout, c, [&](int64_t i) {
        const double gi = grad(i);
        if (dres != nullptr) dres[i] = store<T>(static_cast<float>(gi));  // dy or 0: exact
        sum_dy += gi;
        sum_dy_xhat += gi * (load(in[i]) - mean) * invstd;
      });
      mf(dbeta)[c] = static_cast<float>(mf(dbeta)[c] + sum_dy);
      mf(dgamma)[c] = static_cast<float>(mf(dgamma)[c] + sum_dy_xhat);
      const double k = cf(gamma)[c] * invstd;
      const double mean_dy = sum_dy / m;
      const double mean_dy_xhat = sum_dy_xhat / m;
      for_channel(d, p.layout, c, [&](int64_t i) {
        const double xhat = (load(in[i]) - mean) * invstd;
        // With dresidual, the dz stored by the first loop (as the GPU's dx pass reads it).
        const double gi = dres != nullptr ? load(dres[i]) : grad(i);
        out[i] = store<T>(static_cast<float>(k * (gi - mean_dy - xhat * mean_dy_xhat)));
      });
    });
  });
}

STOKER_REGISTER_STUB(batchnorm_forward_train, batchnorm_forward_train);
STOKER_REGISTER_STUB(batchnorm_forward_train_from_sums, batchnorm_forward_train_from_sums);
STOKER_REGISTER_STUB(batchnorm_forward_eval, batchnorm_forward_eval);
STOKER_REGISTER_STUB(batchnorm_backward, batchnorm_backward);

}  // namespace stoker::ops::cpu
