// CPU batch normalization against the formulas evaluated in fp64: batch statistics with the
// biased variance, running statistics updated with momentum and the UNBIASED variance (as
// PyTorch), evaluation with running statistics, and the backward's closed form with dgamma /
// dbeta accumulated. Both layouts, poisoned outputs, half inputs, and the bad-input messages.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/batchnorm.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

struct BnRef {
  std::vector<double> mean, var, invstd, y;  // var: biased
};

BnRef naive_bn_train(const Dims4& d, Layout l, const std::vector<float>& x,
                     const std::vector<float>& gamma, const std::vector<float>& beta, double eps) {
  BnRef r;
  const double m = static_cast<double>(d.n * d.h * d.w);
  r.y.resize(x.size());
  for (int64_t c = 0; c < d.c; ++c) {
    double sum = 0.0, sq = 0.0;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w) sum += x[idx(at4(d, l, n, c, h, w))];
    const double mean = sum / m;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w) {
          const double dv = x[idx(at4(d, l, n, c, h, w))] - mean;
          sq += dv * dv;
        }
    const double var = sq / m, invstd = 1.0 / std::sqrt(var + eps);
    r.mean.push_back(mean), r.var.push_back(var), r.invstd.push_back(invstd);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w) {
          const size_t i = idx(at4(d, l, n, c, h, w));
          r.y[i] = (x[i] - mean) * invstd * gamma[idx(c)] + beta[idx(c)];
        }
  }
  return r;
}

struct BnGrads {
  std::vector<double> dx, dgamma, dbeta;
};

// Gradients of sum(dy * y) for the training forward, by the chain rule written out per element
// (not the closed form the implementation uses): y_i = g * (x_i - mu) * s + b, with mu and s
// depending on every x of the channel.
BnGrads naive_bn_backward(const Dims4& d, Layout l, const std::vector<float>& x,
                          const std::vector<float>& dy, const std::vector<float>& gamma,
                          const BnRef& ref) {
  BnGrads g{std::vector<double>(x.size(), 0.0), {}, {}};
  const double m = static_cast<double>(d.n * d.h * d.w);
  for (int64_t c = 0; c < d.c; ++c) {
    std::vector<size_t> at;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w) at.push_back(idx(at4(d, l, n, c, h, w)));
    const double mu = ref.mean[idx(c)], s = ref.invstd[idx(c)], gm = gamma[idx(c)];
    double dgamma = 0.0, dbeta = 0.0, dmu = 0.0, dvar = 0.0;
    for (size_t i : at) {
      dgamma += dy[i] * (x[i] - mu) * s;
      dbeta += dy[i];
      // y depends on var through s = (var + eps)^-1/2: ds/dvar = -s^3 / 2.
      dvar += dy[i] * gm * (x[i] - mu) * (-0.5 * s * s * s);
      dmu += -dy[i] * gm * s;
    }
    // var = mean((x - mu)^2): dvar/dx_j = 2 (x_j - mu) / m (the mu-dependence sums to zero).
    for (size_t i : at) g.dx[i] = dy[i] * gm * s + dvar * 2.0 * (x[i] - mu) / m + dmu / m;
    g.dgamma.push_back(dgamma), g.dbeta.push_back(dbeta);
  }
  return g;
}

const Dims4 kDims[] = {{3, 5, 7, 7}, {2, 4, 13, 5}, {8, 3, 1, 1}, {1, 6, 4, 9}};

class BatchNormCpu : public ::testing::TestWithParam<std::tuple<int, Layout>> {
 protected:
  const Dims4& dims() const { return kDims[std::get<0>(GetParam())]; }
  Layout layout() const { return std::get<1>(GetParam()); }
};

TEST_P(BatchNormCpu, TrainForwardAndRunningStatistics) {
  const Dims4& d = dims();
  const Layout l = layout();
  const ops::BatchNormParams p{.eps = 1e-5f, .momentum = 0.1f, .layout = l};
  const BnInputs t = make_bn_inputs(d, l, DType::f32, 10);
  const std::vector<float> rm0 = t.rm.to_floats(), rv0 = t.rv.to_floats();
  const Tensor y = poisoned(shape4(d, l), DType::f32);
  const Tensor mean = poisoned({d.c}, DType::f32), invstd = poisoned({d.c}, DType::f32);
  ops::batchnorm_forward_train(y, {mean, invstd}, {t.rm, t.rv}, {t.x, t.gamma, t.beta}, p);
  const BnRef ref =
      naive_bn_train(d, l, t.x.to_floats(), t.gamma.to_floats(), t.beta.to_floats(), p.eps);
  EXPECT_TRUE(all_close(y, ref.y, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(mean, ref.mean, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(invstd, ref.invstd, 1e-6, 1e-6));
  const double m = static_cast<double>(d.n * d.h * d.w);
  std::vector<double> want_rm, want_rv;
  for (size_t c = 0; c < rm0.size(); ++c) {
    want_rm.push_back(0.9 * rm0[c] + 0.1 * ref.mean[c]);
    want_rv.push_back(0.9 * rv0[c] + 0.1 * ref.var[c] * m / (m - 1.0));  // unbiased
  }
  EXPECT_TRUE(all_close(t.rm, want_rm, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(t.rv, want_rv, 1e-6, 1e-6));
}

TEST_P(BatchNormCpu, EvalUsesRunningStatistics) {
  const Dims4& d = dims();
  const Layout l = layout();
  const ops::BatchNormParams p{.eps = 1e-3f, .layout = l};
  const BnInputs t = make_bn_inputs(d, l, DType::f32, 20);
  const std::vector<float> x = t.x.to_floats(), g = t.gamma.to_floats(), b = t.beta.to_floats();
  const std::vector<float> rm = t.rm.to_floats(), rv = t.rv.to_floats();
  std::vector<double> want(x.size());
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w) {
          const size_t i = idx(at4(d, l, n, c, h, w));
          want[i] = (x[i] - rm[idx(c)]) / std::sqrt(rv[idx(c)] + 1e-3) * g[idx(c)] + b[idx(c)];
        }
  const Tensor y = poisoned(shape4(d, l), DType::f32);
  ops::batchnorm_forward_eval(y, {t.x, t.gamma, t.beta}, {t.rm, t.rv}, p);
  EXPECT_TRUE(all_close(y, want, 1e-5, 1e-5));
}

TEST_P(BatchNormCpu, BackwardMatchesChainRule) {
  const Dims4& d = dims();
  const Layout l = layout();
  const ops::BatchNormParams p{.layout = l};
  const BnInputs t = make_bn_inputs(d, l, DType::f32, 30);
  const Tensor y = poisoned(shape4(d, l), DType::f32);
  const Tensor mean = poisoned({d.c}, DType::f32), invstd = poisoned({d.c}, DType::f32);
  ops::batchnorm_forward_train(y, {mean, invstd}, {}, {t.x, t.gamma, t.beta}, p);
  const std::vector<float> dg0 = t.dgamma.to_floats(), db0 = t.dbeta.to_floats();
  const Tensor dx = poisoned(shape4(d, l), DType::f32);
  ops::batchnorm_backward({dx, t.dgamma, t.dbeta}, t.dy, {t.x, t.gamma}, {mean, invstd}, p);
  const BnRef ref =
      naive_bn_train(d, l, t.x.to_floats(), t.gamma.to_floats(), t.beta.to_floats(), p.eps);
  BnGrads g = naive_bn_backward(d, l, t.x.to_floats(), t.dy.to_floats(), t.gamma.to_floats(), ref);
  for (size_t c = 0; c < dg0.size(); ++c) g.dgamma[c] += dg0[c], g.dbeta[c] += db0[c];
  EXPECT_TRUE(all_close(dx, g.dx, 1e-4, 1e-5));
  EXPECT_TRUE(all_close(t.dgamma, g.dgamma, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(t.dbeta, g.dbeta, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormCpu,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kDims))),
                                            ::testing::Values(Layout::nchw, Layout::nhwc)));

TEST(BatchNormCpuHalf, HalfInputsMatchWithinRounding) {
  const Dims4 d{3, 5, 7, 7};
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const BnInputs t = make_bn_inputs(d, Layout::nhwc, dtype, 40);
    const ops::BatchNormParams p{.layout = Layout::nhwc};
    const Tensor y = poisoned(shape4(d, Layout::nhwc), dtype);
    const Tensor mean = poisoned({d.c}, DType::f32), invstd = poisoned({d.c}, DType::f32);
    ops::batchnorm_forward_train(y, {mean, invstd}, {t.rm, t.rv}, {t.x, t.gamma, t.beta}, p);
    const BnRef ref = naive_bn_train(d, Layout::nhwc, t.x.to_floats(), t.gamma.to_floats(),
                                     t.beta.to_floats(), p.eps);
    const double tol = dtype == DType::bf16 ? 1e-2 : 2e-3;
    EXPECT_TRUE(all_close(y, ref.y, tol, tol)) << dtype_name(dtype);
    EXPECT_TRUE(all_close(mean, ref.mean, 1e-6, 1e-6));
    const Tensor dx = poisoned(shape4(d, Layout::nhwc), dtype);
    ops::batchnorm_backward({dx, t.dgamma, t.dbeta}, t.dy, {t.x, t.gamma}, {mean, invstd}, p);
    const std::vector<float> dx_values = dx.to_floats();
    for (float v : dx_values) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(BatchNormCpuErrors, PerChannelTensorsAndLayout) {
  const Tensor x = random_tensor({2, 8, 8, 3}, DType::f32, 1);  // NHWC data
  const Tensor y = Tensor::empty({2, 8, 8, 3}, DType::f32);
  const Tensor c3 = Tensor::zeros({3}, DType::f32);
  // Read as NCHW, the channel extent is 8: every [3] vector is wrong.
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_forward_train(y, {c3, c3}, {c3, c3}, {x, c3, c3}, {});
      },
      {"ops::batchnorm_forward_train", "gamma is f32[3]", "expected f32[8]", "NCHW, C=8"}));
  ops::batchnorm_forward_train(y, {c3, Tensor::zeros({3}, DType::f32)}, {},
                               {x, Tensor::zeros({3}, DType::f32), c3}, {.layout = Layout::nhwc});
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_forward_train(y, {c3, c3}, {c3}, {x, c3, c3}, {.layout = Layout::nhwc});
      },
      {"ops::batchnorm_forward_train", "running_mean and running_var"}));
  const Tensor x3 = random_tensor({8, 8, 3}, DType::f32, 2);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_forward_eval(y, {x3, c3, c3}, {c3, c3}, {});
      },
      {"ops::batchnorm_forward_eval", "x is f32[8, 8, 3]", "expected rank 4"}));
}

TEST(BatchNormCpuErrors, OneValuePerChannelAndBadParams) {
  const Tensor x = random_tensor({1, 3, 1, 1}, DType::f32, 1);
  const Tensor y = Tensor::empty({1, 3, 1, 1}, DType::f32);
  const Tensor c3 = Tensor::zeros({3}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_forward_train(y, {c3, c3}, {}, {x, c3, c3}, {});
      },
      {"ops::batchnorm_forward_train", "more than one"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_forward_eval(y, {x, c3, c3}, {c3, c3}, {.eps = 0.0f});
      },
      {"ops::batchnorm_forward_eval", "eps 0"}));
  const Tensor dx = Tensor::empty({1, 3, 2, 1}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, y, {x, c3}, {c3, c3}, {});
      },
      {"ops::batchnorm_backward", "dx is f32[1, 3, 2, 1]", "expected [1, 3, 1, 1]"}));
}

}  // namespace
}  // namespace stoker::test
