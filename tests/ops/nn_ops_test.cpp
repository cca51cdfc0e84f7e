// The nn ops on the CPU backend (ops/activation.h, linear.h, layernorm.h, embedding.h, loss.h)
// against plain scalar double-precision loops on random inputs, outputs poisoned with NaN first.
// Elementwise ops whose math is shared with the GPU (ReLU, dropout, add_bias, MSE gradient) are
// checked bit for bit; the others within a tolerance stated next to each check. Also: the
// errors bad input gets (op name, tensors, what was expected).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "stoker/ops/activation.h"
#include "stoker/ops/embedding.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layernorm.h"
#include "stoker/ops/loss.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr int64_t kSizes[] = {1, 7, 1000, 100003};

// |got - want| <= atol + rtol * |want|, elementwise; NaN only matches NaN.
struct Tol {
  double rtol, atol;
};

// fp32 tolerance widened to one unit in the last place of a half output (rounding of a value
// computed slightly differently may land on the neighbouring half value).
Tol for_dtype(DType d, Tol f32) {
  switch (d) {
    case DType::f16:
      return {std::max(f32.rtol, std::ldexp(1.0, -10)), std::max(f32.atol, 6e-8)};
    case DType::bf16:
      return {std::max(f32.rtol, std::ldexp(1.0, -7)), f32.atol};
    default:
      return f32;
  }
}

::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want,
                                     Tol tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " values vs " << want.size();
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const bool ok = std::isnan(want[i])
                        ? std::isnan(got[i])
                        : !std::isnan(got[i]) && err <= tol.atol + tol.rtol * std::fabs(want[i]);
    if (!std::isnan(want[i]) && !std::isnan(err)) worst = std::max(worst, err);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const size_t f = static_cast<size_t>(first);
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " differ; first at " << first << ": got " << got[f]
         << ", want " << want[f] << " (max abs error " << worst << ")";
}

::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, Tol tol) {
  return all_close(got.to_floats(), want, tol);
}

std::vector<double> as_doubles(const Tensor& t) {
  const std::vector<float> f = t.to_floats();
  return {f.begin(), f.end()};
}

template <typename T>
Tensor ids_tensor(const std::vector<int64_t>& v, const Shape& shape) {
  std::vector<T> typed(v.begin(), v.end());
  return Tensor::from_vector<T>(typed, shape);
}

Tensor index_tensor(DType d, const std::vector<int64_t>& v, const Shape& shape) {
  return d == DType::i32 ? ids_tensor<int32_t>(v, shape) : ids_tensor<int64_t>(v, shape);
}

// GELU (tanh form) in double, written with 0.5 (1 + tanh(u)) = sigmoid(2u): the tanh spelling
// cancels catastrophically for x < -5 even in double (1 + tanh(-17) ~ 3e-15).
double gelu_u(double x) { return std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x); }

double gelu_ref(double x) { return x / (1.0 + std::exp(-2.0 * gelu_u(x))); }

double gelu_grad_ref(double x) {
  const double e = std::exp(-2.0 * gelu_u(x));
  const double s = 1.0 / (1.0 + e);  // 0.5 (1 + tanh u)
  const double du = std::sqrt(2.0 / std::numbers::pi) * (1.0 + 3.0 * 0.044715 * x * x);
  return s + 2.0 * x * s * (e * s) * du;  // 0.5 x (1 - tanh^2 u) u' = 2 x s (1 - s) u'
}

// ---------------------------------------------------------------------------------------------
// ReLU

TEST(NnOpsTest, ReluForwardAndBackwardAreExact) {
  uint32_t seed = 1;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor x = test::random_tensor({n}, d, seed++, -2.0f, 2.0f);
      const Tensor dy = test::random_tensor({n}, d, seed++, -3.0f, 3.0f);
      const Tensor y = test::poisoned({n}, d), dx = test::poisoned({n}, d);
      relu_forward(y, x);
      relu_backward(dx, dy, y);
      const std::vector<float> fx = x.to_floats(), fg = dy.to_floats();
      std::vector<float> wy(fx.size()), wdx(fx.size());
      for (size_t i = 0; i < fx.size(); ++i) {
        wy[i] = fx[i] > 0.0f ? fx[i] : 0.0f;
        wdx[i] = fx[i] > 0.0f ? fg[i] : 0.0f;
      }
      EXPECT_TRUE(test::matches_rounded(y, wy)) << dtype_name(d) << " n=" << n;
      EXPECT_TRUE(test::matches_rounded(dx, wdx)) << dtype_name(d) << " n=" << n;
    }
  }
}

TEST(NnOpsTest, ReluKeepsNanAndWorksInPlace) {
  const Tensor x = Tensor::from_floats({-1.0f, test::kNaN, 2.0f, -0.0f}, {2, 2});
  relu_forward(x, x);  // y may alias x
  const std::vector<float> v = x.to_floats();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 2.0f);
  EXPECT_EQ(v[3], 0.0f);
  // dx aliasing dy.
  const Tensor dy = Tensor::from_floats({5.0f, 6.0f, 7.0f, 8.0f}, {4});
  relu_backward(dy, dy, Tensor::from_floats({0.0f, 1.0f, 2.0f, -1.0f}, {4}));
  EXPECT_EQ(dy.to_floats(), (std::vector<float>{0.0f, 6.0f, 7.0f, 0.0f}));
}

// ---------------------------------------------------------------------------------------------
// GELU

TEST(NnOpsTest, GeluMatchesPyTorchTanhFormReferenceValues) {
  // torch.nn.functional.gelu(x, approximate="tanh") in float64.
  const Tensor x = Tensor::from_floats({1.0f, -1.0f, 0.5f, 3.0f, -3.0f}, {5});
  const Tensor y = test::poisoned({5}, DType::f32);
  gelu_forward(y, x);
  const std::vector<double> want = {0.8411919906082768, -0.15880800939172324, 0.34571400982514394,
                                    2.996362607918227, -0.0036373920817729943};
  EXPECT_TRUE(all_close(y, want, {5e-7, 1e-9}));
}

TEST(NnOpsTest, GeluForwardAndBackwardAgainstDouble) {
  // fp32: y = x * sigmoid(2u) has relative condition number ~|2u| in u for x << 0, so the few
  // ulps of rounding in u grow to ~1.5e-7 * |2u| (measured max 5.1e-6 at x = -7, |2u| = 36).
  // The derivative s + 2 x s (1 - s) u' cancels near x = -0.75: measured max absolute error
  // 1.9e-7, hence an absolute term (times |dy| <= 2).
  uint32_t seed = 20;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor x = test::random_tensor({n}, d, seed++, -7.0f, 7.0f);
      const Tensor dy = test::random_tensor({n}, d, seed++, -2.0f, 2.0f);
      const Tensor y = test::poisoned({n}, d), dx = test::poisoned({n}, d);
      gelu_forward(y, x);
      gelu_backward(dx, dy, x);
      const std::vector<float> fx = x.to_floats(), fg = dy.to_floats();
      std::vector<double> wy(fx.size()), wdx(fx.size());
      for (size_t i = 0; i < fx.size(); ++i) {
        wy[i] = gelu_ref(fx[i]);
        wdx[i] = fg[i] * gelu_grad_ref(fx[i]);
      }
      EXPECT_TRUE(all_close(y, wy, for_dtype(d, {7e-6, 1e-30}))) << dtype_name(d) << " n=" << n;
      EXPECT_TRUE(all_close(dx, wdx, for_dtype(d, {2e-6, 5e-7}))) << dtype_name(d) << " n=" << n;
    }
  }
}

TEST(NnOpsTest, GeluExtremesAndAliasing) {
  const Tensor x = Tensor::from_floats({-100.0f, 100.0f, 0.0f, test::kNaN, 1e-30f}, {5});
  const Tensor y = test::poisoned({5}, DType::f32);
  gelu_forward(y, x);
  const std::vector<float> v = y.to_floats();
  EXPECT_LE(std::fabs(v[0]), 1e-30f);  // x * sigmoid(-huge): about zero, not NaN
  EXPECT_EQ(v[1], 100.0f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_TRUE(std::isnan(v[3]));
  EXPECT_FLOAT_EQ(v[4], 0.5e-30f);
  const Tensor g = Tensor::from_floats({1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, {5});
  gelu_backward(g, g, x);  // dx aliases dy
  const std::vector<float> gv = g.to_floats();
  EXPECT_LE(std::fabs(gv[0]), 1e-25f);
  EXPECT_EQ(gv[1], 1.0f);
  EXPECT_EQ(gv[2], 0.5f);
  EXPECT_TRUE(std::isnan(gv[3]));
}

// ---------------------------------------------------------------------------------------------
// Dropout

TEST(NnOpsTest, DropoutMaskIsPhiloxUniformBelowP) {
  uint32_t seed = 40;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
        const uint64_t s = 1234 + seed, off = 17 * seed;
        const Tensor x = test::random_tensor({n}, d, seed++, -2.0f, 2.0f);
        const Tensor dy = test::random_tensor({n}, d, seed++, -2.0f, 2.0f);
        const Tensor y = test::poisoned({n}, d), dx = test::poisoned({n}, d);
        dropout_forward(y, x, p, s, off);
        dropout_backward(dx, dy, p, s, off);
        const float scale = 1.0f / (1.0f - p);
        const std::vector<float> fx = x.to_floats(), fg = dy.to_floats();
        std::vector<float> wy(fx.size()), wdx(fx.size());
        for (size_t i = 0; i < fx.size(); ++i) {
          const bool drop = core::philox_uniform(s, off, i, 0.0f, 1.0f) < p;
          wy[i] = drop ? 0.0f : fx[i] * scale;
          wdx[i] = drop ? 0.0f : fg[i] * scale;
        }
        EXPECT_TRUE(test::matches_rounded(y, wy)) << dtype_name(d) << " n=" << n << " p=" << p;
        EXPECT_TRUE(test::matches_rounded(dx, wdx)) << dtype_name(d) << " n=" << n << " p=" << p;
      }
    }
  }
}

TEST(NnOpsTest, DropoutDropsAboutPAndOffsetsGiveFreshMasks) {
  const int64_t n = 200003;
  const Tensor x = Tensor::from_floats(std::vector<float>(n, 1.0f), {n});
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const Tensor y = test::poisoned({n}, DType::f32);
    dropout_forward(y, x, p, 7, 0);
    int64_t dropped = 0;
    for (float v : y.to_floats()) dropped += v == 0.0f;
    // Binomial(n, p): 6 standard deviations.
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 6.0 * std::sqrt(p * (1 - p) / n)) << p;
  }
  const Tensor a = test::poisoned({n}, DType::f32), b = test::poisoned({n}, DType::f32);
  dropout_forward(a, x, 0.5f, 7, 0);
  dropout_forward(b, x, 0.5f, 7, (n + 3) / 4);  // the next Generator range
  int64_t same = 0;
  const std::vector<float> va = a.to_floats(), vb = b.to_floats();
  for (size_t i = 0; i < va.size(); ++i) same += va[i] == vb[i];
  EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 0.01);
}

// ---------------------------------------------------------------------------------------------
// add_bias, bias_grad

TEST(NnOpsTest, AddBiasIsOneRoundedAdd) {
  uint32_t seed = 60;
  for (DType d : kFloatTypes) {
    for (const Shape& s : {Shape{1, 1}, Shape{3, 7}, Shape{129, 1000}, Shape{2, 3, 5}}) {
      const int64_t c = s[s.rank() - 1];
      const Tensor y = test::random_tensor(s, d, seed++, -4.0f, 4.0f);
      const Tensor b = test::random_tensor({c}, DType::f32, seed++, -1.0f, 1.0f);
      const std::vector<float> fy = y.to_floats(), fb = b.to_floats();
      add_bias(y, b);
      std::vector<float> want(fy.size());
      for (size_t i = 0; i < fy.size(); ++i) want[i] = fy[i] + fb[i % static_cast<size_t>(c)];
      EXPECT_TRUE(test::matches_rounded(y, want)) << dtype_name(d) << " " << s;
    }
  }
}

TEST(NnOpsTest, BiasGradAccumulatesColumnSums) {
  // fp64 accumulation, one rounding of (dbias + sum): within an ulp of the double result.
  uint32_t seed = 80;
  for (DType d : kFloatTypes) {
    for (const Shape& s :
         {Shape{1, 1}, Shape{3, 7}, Shape{129, 1000}, Shape{4097, 33}, Shape{2, 3, 5}}) {
      const int64_t c = s[s.rank() - 1], n = s.numel() / c;
      const Tensor dy = test::random_tensor(s, d, seed++, -1.0f, 1.0f);
      const Tensor db = test::random_tensor({c}, DType::f32, seed++, -1.0f, 1.0f);
      std::vector<double> want = as_doubles(db);
      const std::vector<float> g = dy.to_floats();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < c; ++j)
          want[static_cast<size_t>(j)] += g[static_cast<size_t>(r * c + j)];
      bias_grad(db, dy);
      EXPECT_TRUE(all_close(db, want, {1.2e-7, 1e-12})) << dtype_name(d) << " " << s;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

struct LayerNormRef {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

LayerNormRef layernorm_ref(const std::vector<float>& x, const std::vector<float>& gamma,
                           const std::vector<float>& beta, const std::vector<float>& dy, int64_t n,
                           int64_t c, double eps, const std::vector<float>& dgamma0,
                           const std::vector<float>& dbeta0) {
  LayerNormRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dgamma.assign(dgamma0.begin(), dgamma0.end());
  r.dbeta.assign(dbeta0.begin(), dbeta0.end());
  for (int64_t i = 0; i < n; ++i) {
    const size_t o = static_cast<size_t>(i * c);
    double m = 0.0, v = 0.0;
    for (int64_t j = 0; j < c; ++j) m += x[o + j];
    m /= c;
    for (int64_t j = 0; j < c; ++j) v += (x[o + j] - m) * (x[o + j] - m);
    v /= c;
    const double rs = 1.0 / std::sqrt(v + eps);
    r.mean.push_back(m);
    r.rstd.push_back(rs);
    double a = 0.0, b = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (x[o + j] - m) * rs;
      r.y[o + j] = xh * gamma[j] + beta[j];
      a += dy[o + j] * gamma[j];
      b += dy[o + j] * gamma[j] * xh;
      r.dgamma[j] += dy[o + j] * xh;
      r.dbeta[j] += dy[o + j];
    }
    a /= c;
    b /= c;
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (x[o + j] - m) * rs;
      r.dx[o + j] = rs * (dy[o + j] * gamma[j] - a - xh * b);
    }
  }
  return r;
}

TEST(NnOpsTest, LayerNormForwardAndBackwardAgainstDouble) {
  // The CPU computes in fp64 and rounds each output once; the reference uses the same inputs.
  // mean/rstd are stored as f32, and the backward uses the stored values: 1e-6 relative covers
  // that rounding propagated through dx (values O(1), dx O(rstd)).
  uint32_t seed = 100;
  for (DType d : kFloatTypes) {
    for (const Shape& s :
         {Shape{1, 1}, Shape{3, 7}, Shape{129, 1000}, Shape{2, 3, 5}, Shape{5, 4099}}) {
      const int64_t c = s[s.rank() - 1], n = s.numel() / c;
      const Tensor x = test::random_tensor(s, d, seed++, -2.0f, 3.0f);
      const Tensor dy = test::random_tensor(s, d, seed++, -1.0f, 1.0f);
      const Tensor gamma = test::random_tensor({c}, DType::f32, seed++, 0.5f, 1.5f);
      const Tensor beta = test::random_tensor({c}, DType::f32, seed++, -0.5f, 0.5f);
      const Tensor dgamma = test::random_tensor({c}, DType::f32, seed++);
      const Tensor dbeta = test::random_tensor({c}, DType::f32, seed++);
      const LayerNormRef ref =
          layernorm_ref(x.to_floats(), gamma.to_floats(), beta.to_floats(), dy.to_floats(), n, c,
                        1e-5, dgamma.to_floats(), dbeta.to_floats());
      const Tensor y = test::poisoned(s, d), dx = test::poisoned(s, d);
      const Tensor mean = test::poisoned({n}, DType::f32), rstd = test::poisoned({n}, DType::f32);
      layernorm_forward(y, mean, rstd, x, gamma, beta, 1e-5f);
      layernorm_backward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma);
      const std::string what = std::string(dtype_name(d)) + " " + s.str();
      EXPECT_TRUE(all_close(mean, ref.mean, {1.2e-7, 1e-7})) << what;
      EXPECT_TRUE(all_close(rstd, ref.rstd, {1.2e-7, 0})) << what;
      EXPECT_TRUE(all_close(y, ref.y, for_dtype(d, {1e-6, 1e-6}))) << what;
      // c == 1: xhat is 0 and dx is 0 up to rounding; the absolute term covers it.
      EXPECT_TRUE(all_close(dx, ref.dx, for_dtype(d, {1e-5, 1e-5}))) << what;
      EXPECT_TRUE(all_close(dgamma, ref.dgamma, {1e-6, 1e-6})) << what;
      EXPECT_TRUE(all_close(dbeta, ref.dbeta, {1.2e-7, 1e-7})) << what;
    }
  }
}

TEST(NnOpsTest, LayerNormIsExactOnAShiftedRow) {
  // A large common offset: E[x^2] - E[x]^2 in fp32 would lose every digit; two passes do not.
  std::vector<float> v;
  for (int j = 0; j < 64; ++j) v.push_back(10000.0f + static_cast<float>(j % 8) - 3.5f);
  const Tensor x = Tensor::from_floats(v, {1, 64});
  const Tensor y = test::poisoned({1, 64}, DType::f32);
  const Tensor mean = test::poisoned({1}, DType::f32), rstd = test::poisoned({1}, DType::f32);
  const Tensor g = Tensor::from_floats(std::vector<float>(64, 1.0f), {64});
  const Tensor b = Tensor::zeros({64}, DType::f32);
  layernorm_forward(y, mean, rstd, x, g, b, 0.0f);
  EXPECT_EQ(mean.item(), 10000.0);
  EXPECT_NEAR(rstd.item(), 1.0 / std::sqrt(5.25), 1e-6);
  EXPECT_NEAR(y.to_floats()[0], -3.5 / std::sqrt(5.25), 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Embedding

TEST(NnOpsTest, EmbeddingForwardCopiesRowsAndBackwardScatterAdds) {
  uint32_t seed = 120;
  for (DType id_type : {DType::i32, DType::i64}) {
    for (DType out : kFloatTypes) {
      const std::vector<std::tuple<int64_t, int64_t, Shape>> cases = {{1, 1, Shape{1}},
                                                                      {10, 7, Shape{3, 5}},
                                                                      {1000, 33, Shape{4097}},
                                                                      {50, 128, Shape{2, 3, 4}}};
      for (const auto& [v, dim, shape] : cases) {
        const int64_t n = shape.numel();
        std::vector<int64_t> ids(static_cast<size_t>(n));
        std::mt19937 gen(seed++);
        for (auto& i : ids) i = std::uniform_int_distribution<int64_t>(0, v - 1)(gen);
        const Tensor id = index_tensor(id_type, ids, shape);
        const Tensor table = test::random_tensor({v, dim}, DType::f32, seed++, -2.0f, 2.0f);
        const Tensor y = test::poisoned({n, dim}, out);
        embedding_forward(y, id, table);
        const std::vector<float> t = table.to_floats();
        std::vector<float> want;
        for (int64_t i : ids)
          want.insert(want.end(), t.begin() + i * dim, t.begin() + (i + 1) * dim);
        EXPECT_TRUE(test::matches_rounded(y, want)) << dtype_name(out) << " " << shape;

        // Backward: dtable += dy scattered by id (repeated ids add up), f32 adds in id order.
        const Tensor dy = test::random_tensor({n, dim}, out, seed++, -1.0f, 1.0f);
        const Tensor dtable = test::random_tensor({v, dim}, DType::f32, seed++);
        std::vector<double> wd = as_doubles(dtable);
        const std::vector<float> g = dy.to_floats();
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < dim; ++j)
            wd[static_cast<size_t>(ids[static_cast<size_t>(r)] * dim + j)] +=
                g[static_cast<size_t>(r * dim + j)];
        embedding_backward(dtable, dy, id);
        // fp32 sums of up to ~n/v + 1 terms of O(1): a few ulps each.
        EXPECT_TRUE(all_close(dtable, wd, {1e-6, 1e-6})) << dtype_name(out) << " " << shape;
      }
    }
  }
}

TEST(NnOpsTest, EmbeddingOutOfRangeIdThrowsNamingItsPosition) {
  const Tensor table = test::random_tensor({10, 4}, DType::f32, 1);
  for (DType id_type : {DType::i32, DType::i64}) {
    const Tensor ids = index_tensor(id_type, {1, 2, 3, 17, 4, 99}, {2, 3});
    const Tensor y = test::poisoned({6, 4}, DType::f32);
    EXPECT_TRUE(throws_error_with([&] { embedding_forward(y, ids, table); },
                                  {"embedding_forward", "id 17", "position 3", "[0, 10)"}));
    for (float v : y.to_floats()) EXPECT_TRUE(std::isnan(v));  // nothing written
    const Tensor neg = index_tensor(id_type, {0, -1}, {2});
    EXPECT_TRUE(throws_error_with(
        [&] {
          embedding_backward(Tensor::zeros({10, 4}, DType::f32), Tensor::zeros({2, 4}, DType::f32),
                             neg);
        },
        {"embedding_backward", "id -1", "position 1"}));
  }
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy

struct XentRef {
  double loss = 0.0, count = 0.0;
  std::vector<double> lse, dlogits;
};

// PyTorch's nn.CrossEntropyLoss(reduction="mean", ignore_index, label_smoothing), in double.
XentRef xent_ref(const std::vector<float>& x, const std::vector<int64_t>& t, int64_t n, int64_t c,
                 int64_t ignore, double s, double scale) {
  XentRef r;
  r.dlogits.assign(x.size(), 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x.data() + i * c;
    double m = -INFINITY;
    for (int64_t j = 0; j < c; ++j) m = std::max<double>(m, row[j]);
    double se = 0.0, sx = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      se += std::exp(row[j] - m);
      sx += row[j];
    }
    const double lse = m + std::log(se);
    r.lse.push_back(lse);
    if (t[i] == ignore) continue;
    r.count += 1;
    total += (1 - s) * (lse - row[t[i]]) + s * (lse - sx / c);
  }
  r.loss = total / r.count;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore) continue;
    for (int64_t j = 0; j < c; ++j) {
      const double p = std::exp(x[i * c + j] - r.lse[i]);
      r.dlogits[i * c + j] = scale / r.count * (p - ((j == t[i] ? 1 - s : 0.0) + s / c));
    }
  }
  return r;
}

TEST(NnOpsTest, CrossEntropyMatchesPyTorchSemantics) {
  uint32_t seed = 140;
  for (DType d : kFloatTypes) {
    for (DType td : {DType::i32, DType::i64}) {
      const std::vector<std::pair<int64_t, int64_t>> shapes = {
          {1, 1}, {3, 7}, {129, 1000}, {4097, 33}};
      for (const auto& [n, c] : shapes) {
        for (float s : {0.0f, 0.1f}) {
          const int64_t ignore = -100;
          const Tensor logits = test::random_tensor({n, c}, d, seed++, -4.0f, 4.0f);
          std::mt19937 gen(seed++);
          std::vector<int64_t> t(static_cast<size_t>(n));
          for (auto& v : t) v = std::uniform_int_distribution<int64_t>(0, c - 1)(gen);
          if (n > 2) t[1] = ignore;  // some ignored rows
          if (n > 100) t[100] = ignore;
          const Tensor target = index_tensor(td, t, {n});
          const Tensor loss = test::poisoned({}, DType::f32),
                       count = test::poisoned({}, DType::f32);
          const Tensor lse = test::poisoned({n}, DType::f32);
          cross_entropy_forward(loss, count, lse, logits, target, ignore, s);
          const float scale = 0.75f;
          const Tensor dl = test::poisoned({n, c}, d);
          cross_entropy_backward(dl, logits, target, lse, count, ignore, s, scale);
          const XentRef ref = xent_ref(logits.to_floats(), t, n, c, ignore, s, scale);
          const std::string what = std::string(dtype_name(d)) + " " + std::to_string(n) + "x" +
                                   std::to_string(c) + " s=" + std::to_string(s);
          EXPECT_EQ(count.item(), ref.count) << what;
          EXPECT_NEAR(loss.item(), ref.loss, 1.2e-7 * std::fabs(ref.loss) + 1e-12) << what;
          EXPECT_TRUE(all_close(lse, ref.lse, {1.2e-7, 1e-12})) << what;
          // lse enters the gradient rounded to f32: exp(x - lse) inherits its ~1e-7 relative error.
          EXPECT_TRUE(all_close(dl, ref.dlogits, for_dtype(d, {2e-6, 1e-12}))) << what;
        }
      }
    }
  }
}

TEST(NnOpsTest, CrossEntropyIsStableForHugeLogitsAndAllIgnoredIsNan) {
  // Logits around 1e4: a naive exp overflows; lse = max + log(sum exp(x - max)) does not.
  const Tensor logits =
      Tensor::from_floats({10000.0f, 10001.0f, 9999.0f, -10000.0f, 0.0f, 10000.0f}, {2, 3});
  const Tensor target = index_tensor(DType::i64, {1, 2}, {2});
  const Tensor loss = test::poisoned({}, DType::f32), count = test::poisoned({}, DType::f32);
  const Tensor lse = test::poisoned({2}, DType::f32);
  cross_entropy_forward(loss, count, lse, logits, target, -100, 0.0f);
  const double l0 = 10001.0 + std::log(std::exp(-1.0) + 1.0 + std::exp(-2.0));
  EXPECT_NEAR(lse.to_floats()[0], l0, 1e-3);
  EXPECT_NEAR(loss.item(), ((l0 - 10001.0) + std::log1p(std::exp(-10000.0))) / 2, 1e-3);
  EXPECT_EQ(count.item(), 2.0);

  const Tensor all_ignored = index_tensor(DType::i32, {5, 5}, {2});
  cross_entropy_forward(loss, count, lse, logits, all_ignored, 5, 0.2f);
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_EQ(count.item(), 0.0);
  const Tensor dl = test::poisoned({2, 3}, DType::f32);
  cross_entropy_backward(dl, logits, all_ignored, lse, count, 5, 0.2f, 1.0f);
  for (float v : dl.to_floats()) EXPECT_EQ(v, 0.0f);  // ignored rows: zero gradient, no 0/0
}

TEST(NnOpsTest, CrossEntropyBadTargetThrowsNamingRow) {
  const Tensor logits = test::random_tensor({4, 3}, DType::f32, 5);
  const Tensor target = index_tensor(DType::i64, {0, -100, 3, 1}, {4});
  const Tensor loss = Tensor::empty({}, DType::f32), count = Tensor::empty({}, DType::f32);
  const Tensor lse = Tensor::empty({4}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { cross_entropy_forward(loss, count, lse, logits, target, -100, 0.0f); },
      {"cross_entropy_forward", "target 3", "row 2", "[0, 3)"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        cross_entropy_backward(Tensor::empty({4, 3}, DType::f32), logits, target, lse, count, -100,
                               0.0f, 1.0f);
      },
      {"cross_entropy_backward", "target 3", "row 2"}));
}

// ---------------------------------------------------------------------------------------------
// MSE

TEST(NnOpsTest, MseForwardAndBackward) {
  uint32_t seed = 160;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor p = test::random_tensor({n}, d, seed++, -3.0f, 3.0f);
      const Tensor t = test::random_tensor({n}, d, seed++, -3.0f, 3.0f);
      const Tensor loss = test::poisoned({}, DType::f32);
      mse_forward(loss, p, t);
      const std::vector<float> fp = p.to_floats(), ft = t.to_floats();
      double sum = 0.0;
      for (size_t i = 0; i < fp.size(); ++i)
        sum += (double(fp[i]) - ft[i]) * (double(fp[i]) - ft[i]);
      EXPECT_NEAR(loss.item(), sum / n, 1.2e-7 * sum / n) << dtype_name(d) << " n=" << n;
      const float scale = 0.5f;
      const Tensor dp = test::poisoned({n}, d);
      mse_backward(dp, p, t, scale);
      const float k = static_cast<float>(2.0 * scale / n);
      std::vector<float> want(fp.size());
      for (size_t i = 0; i < fp.size(); ++i) want[i] = k * (fp[i] - ft[i]);
      EXPECT_TRUE(test::matches_rounded(dp, want)) << dtype_name(d) << " n=" << n;
    }
  }
  const Tensor empty_loss = Tensor::empty({}, DType::f32);
  mse_forward(empty_loss, Tensor::empty({0}, DType::f32), Tensor::empty({0}, DType::f32));
  EXPECT_TRUE(std::isnan(empty_loss.item()));
}

// ---------------------------------------------------------------------------------------------
// Bad input

TEST(NnOpsTest, BadInputErrorsNameTheOpTheTensorsAndWhatWasExpected) {
  const Tensor f = Tensor::zeros({4, 3}, DType::f32);
  const Tensor h = Tensor::zeros({4, 3}, DType::f16);
  const Tensor i = Tensor::zeros({4, 3}, DType::i32);
  const Tensor f5 = Tensor::zeros({5}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { relu_forward(h, f); },
                                {"relu_forward", "f16[4, 3]", "f32[4, 3]", "equal dtypes"}));
  EXPECT_TRUE(throws_error_with([&] { relu_forward(f5, f); },
                                {"relu_forward", "f32[5]", "equal element counts"}));
  EXPECT_TRUE(
      throws_error_with([&] { gelu_forward(i, i); }, {"gelu_forward", "i32[4, 3]", "float dtype"}));
  EXPECT_TRUE(throws_error_with([&] { gelu_backward(f, f, h); }, {"gelu_backward", "x", "f16"}));
  EXPECT_TRUE(
      throws_error_with([&] { relu_backward(f, f, Tensor()); }, {"relu_backward", "undefined"}));
  EXPECT_TRUE(throws_error_with([&] { dropout_forward(f, f, 1.0f, 1, 0); },
                                {"dropout_forward", "p = 1", "[0, 1)"}));
  EXPECT_TRUE(throws_error_with([&] { dropout_backward(f, f, -0.1f, 1, 0); },
                                {"dropout_backward", "[0, 1)"}));

  EXPECT_TRUE(throws_error_with([&] { add_bias(f, Tensor::zeros({4}, DType::f32)); },
                                {"add_bias", "f32[4]", "f32[4, 3]", "expected bias f32[3]"}));
  EXPECT_TRUE(throws_error_with([&] { add_bias(f, Tensor::zeros({3}, DType::f16)); },
                                {"add_bias", "f16[3]"}));
  EXPECT_TRUE(throws_error_with([&] { bias_grad(Tensor::zeros({2}, DType::f32), f); },
                                {"bias_grad", "dbias", "f32[2]", "expected dbias f32[3]"}));

  const Tensor mean = Tensor::zeros({4}, DType::f32), rstd = Tensor::zeros({4}, DType::f32);
  const Tensor g3 = Tensor::zeros({3}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { layernorm_forward(f, mean, rstd, f, f5, g3, 1e-5f); },
                                {"layernorm_forward", "gamma", "f32[5]", "expected f32[3]"}));
  EXPECT_TRUE(throws_error_with([&] { layernorm_forward(f, f5, rstd, f, g3, g3, 1e-5f); },
                                {"layernorm_forward", "mean", "f32[5]", "expected f32[4]"}));
  EXPECT_TRUE(throws_error_with([&] { layernorm_forward(h, mean, rstd, f, g3, g3, 1e-5f); },
                                {"layernorm_forward", "y", "f16[4, 3]", "equal dtypes"}));
  EXPECT_TRUE(throws_error_with([&] { layernorm_forward(f, mean, rstd, f, g3, g3, -1.0f); },
                                {"layernorm_forward", "eps"}));
  EXPECT_TRUE(throws_error_with(
      [&] { layernorm_backward(f, g3, Tensor::zeros({3}, DType::f16), f, f, mean, rstd, g3); },
      {"layernorm_backward", "dbeta", "f16[3]", "expected f32[3]"}));

  const Tensor table = Tensor::zeros({10, 3}, DType::f32);
  EXPECT_TRUE(
      throws_error_with([&] { embedding_forward(f, Tensor::zeros({4}, DType::f32), table); },
                        {"embedding_forward", "ids", "f32[4]", "i32 or i64"}));
  EXPECT_TRUE(
      throws_error_with([&] { embedding_forward(f, Tensor::zeros({5}, DType::i64), table); },
                        {"embedding_forward", "y", "f32[4, 3]", "expected [5, 3]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        embedding_forward(f, Tensor::zeros({4}, DType::i32), Tensor::zeros({10, 3}, DType::f16));
      },
      {"embedding_forward", "table", "f16[10, 3]", "f32[V, D]"}));

  const Tensor loss = Tensor::zeros({}, DType::f32), count = Tensor::zeros({}, DType::f32);
  const Tensor t4 = Tensor::zeros({4}, DType::i64);
  EXPECT_TRUE(
      throws_error_with([&] { cross_entropy_forward(loss, count, mean, f, f5, -100, 0.0f); },
                        {"cross_entropy_forward", "target", "f32[5]", "i64[4]"}));
  EXPECT_TRUE(throws_error_with([&] { cross_entropy_forward(f5, count, mean, f, t4, -100, 0.0f); },
                                {"cross_entropy_forward", "loss", "f32[5]", "rank-0 f32"}));
  EXPECT_TRUE(throws_error_with([&] { cross_entropy_forward(loss, count, f5, f, t4, -100, 0.0f); },
                                {"cross_entropy_forward", "lse", "f32[5]", "expected f32[4]"}));
  EXPECT_TRUE(
      throws_error_with([&] { cross_entropy_forward(loss, count, mean, f, t4, -100, 1.5f); },
                        {"cross_entropy_forward", "label_smoothing"}));
  EXPECT_TRUE(
      throws_error_with([&] { cross_entropy_forward(loss, count, mean, f5, t4, -100, 0.0f); },
                        {"cross_entropy_forward", "logits", "f32[5]", "[N, C]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        cross_entropy_backward(Tensor::zeros({3, 4}, DType::f32), f, t4, mean, count, -100, 0.0f,
                               1.0f);
      },
      {"cross_entropy_backward", "dlogits", "f32[3, 4]", "same shape"}));
  EXPECT_TRUE(throws_error_with([&] { mse_forward(loss, f, h); },
                                {"mse_forward", "f32[4, 3]", "f16[4, 3]"}));
  EXPECT_TRUE(throws_error_with([&] { mse_backward(f5, f, f, 1.0f); },
                                {"mse_backward", "dpred", "f32[5]"}));
}

}  // namespace
}  // namespace stoker::ops
