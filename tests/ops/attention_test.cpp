// ops::attention_forward / attention_backward on the CPU (ops/attention.h):
// - forward (out and the saved probabilities) against a naive double-precision reference for
//   several (B, T, H, D), T = 1 and non-powers of two included; future probabilities exactly 0;
// - backward against central finite differences of L = sum(out * W) computed with the double
//   reference, and, more loosely, with the f32 op itself;
// - causality: changing a later token's k and v leaves every earlier output bit-identical;
// - bf16 and f16 forward and backward within their tolerances of f32 on the same inputs;
// - input validation names the bad tensor.
#include "stoker/ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

struct Dims {
  int64_t b, t, h, d;
  int64_t c() const { return h * d; }
};

// Naive reference: out [B, T, C] and probs [B, H, T, T] in double from qkv [B, T, 3C].
struct Reference {
  std::vector<double> out, probs;
};

Reference reference(const std::vector<double>& qkv, const Dims& s) {
  const int64_t c = s.c();
  Reference r;
  r.out.assign(static_cast<size_t>(s.b * s.t * c), 0.0);
  r.probs.assign(static_cast<size_t>(s.b * s.h * s.t * s.t), 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t which, int64_t h, int64_t d) {
    return qkv[static_cast<size_t>(((b * s.t + t) * 3 + which) * c + h * s.d + d)];
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  std::vector<double> w(static_cast<size_t>(s.t));
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t i = 0; i < s.t; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < s.d; ++d) dot += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          w[j] = dot * scale;
          mx = std::max(mx, w[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += (w[j] = std::exp(w[j] - mx));
        for (int64_t j = 0; j <= i; ++j) {
          const double p = w[j] / sum;
          r.probs[static_cast<size_t>(((b * s.h + h) * s.t + i) * s.t + j)] = p;
          for (int64_t d = 0; d < s.d; ++d)
            r.out[static_cast<size_t>((b * s.t + i) * c + h * s.d + d)] += p * at(b, j, 2, h, d);
        }
      }
  return r;
}

std::vector<double> as_double(const Tensor& t) {
  const std::vector<float> f = t.to_floats();
  return {f.begin(), f.end()};
}

struct Result {
  Tensor out, heads, probs;
};

Result forward(const Tensor& qkv, const Dims& s) {
  Result r;
  r.out = test::poisoned({s.b, s.t, s.c()}, qkv.dtype());
  r.heads = test::poisoned({3, s.b, s.h, s.t, s.d}, qkv.dtype());
  r.probs = test::poisoned({s.b, s.h, s.t, s.t}, qkv.dtype());
  attention_forward(r.out, r.heads, r.probs, qkv, s.h);
  return r;
}

Tensor backward(const Result& f, const Tensor& dout, const Dims& s) {
  Tensor dqkv = test::poisoned({s.b, s.t, 3 * s.c()}, dout.dtype());
  attention_backward(dqkv, dout, f.heads, f.probs);
  return dqkv;
}

constexpr Dims kShapes[] = {{1, 1, 1, 1}, {2, 1, 3, 4},  {2, 5, 3, 4},
                            {1, 7, 2, 8}, {3, 33, 2, 5}, {2, 64, 4, 16}};

TEST(Attention, ForwardMatchesDoubleReference) {
  uint32_t seed = 1;
  for (const Dims& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "B=" << s.b << " T=" << s.t << " H=" << s.h << " D=" << s.d);
    // Wide inputs (|q k| up to ~3 D / sqrt(D)) so the softmax is far from uniform.
    const Tensor qkv = test::random_tensor({s.b, s.t, 3 * s.c()}, DType::f32, seed++, -2.0f, 2.0f);
    const Result f = forward(qkv, s);
    const Reference ref = reference(as_double(qkv), s);
    const std::vector<float> out = f.out.to_floats(), probs = f.probs.to_floats();
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], ref.out[i], 2e-5 * (1.0 + std::fabs(ref.out[i]))) << "out[" << i << "]";
    for (size_t i = 0; i < probs.size(); ++i) {
      const int64_t row = static_cast<int64_t>(i) / s.t % s.t, col = static_cast<int64_t>(i) % s.t;
      if (col > row)
        ASSERT_EQ(probs[i], 0.0f) << "future probability [" << row << ", " << col << "]";
      else
        ASSERT_NEAR(probs[i], ref.probs[i], 2e-6 + 1e-5 * ref.probs[i]) << "probs[" << i << "]";
    }
  }
}

// L(qkv) = sum(out * w) with the double reference.
double loss_ref(const std::vector<double>& qkv, const std::vector<double>& w, const Dims& s) {
  const Reference r = reference(qkv, s);
  double l = 0.0;
  for (size_t i = 0; i < w.size(); ++i) l += r.out[i] * w[i];
  return l;
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (const Dims& s : {Dims{2, 6, 2, 3}, Dims{1, 9, 3, 4}, Dims{1, 1, 2, 2}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.b << " T=" << s.t << " H=" << s.h << " D=" << s.d);
    const Tensor qkv = test::random_tensor({s.b, s.t, 3 * s.c()}, DType::f32, 11, -1.5f, 1.5f);
    const Tensor w = test::random_tensor({s.b, s.t, s.c()}, DType::f32, 12);
    const Result f = forward(qkv, s);
    const std::vector<float> grad = backward(f, w, s).to_floats();

    // Against the double reference: the op's gradient formulas, to f32 precision.
    std::vector<double> x = as_double(qkv);
    const std::vector<double> wd = as_double(w);
    const double eps = 1e-5;
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + eps;
      const double lp = loss_ref(x, wd, s);
      x[i] = x0 - eps;
      const double lm = loss_ref(x, wd, s);
      x[i] = x0;
      const double fd = (lp - lm) / (2 * eps);
      ASSERT_NEAR(grad[i], fd, 1e-5 + 1e-4 * std::fabs(fd)) << "dqkv[" << i << "]";
    }

    // Against the f32 op itself (f32 round-off / eps dominates: a looser bound).
    const std::vector<float> xf = qkv.to_floats();
    const std::vector<float> wf = w.to_floats();
    auto loss_op = [&](const std::vector<float>& v) {
      const std::vector<float> out =
          forward(Tensor::from_floats(v, qkv.shape()), s).out.to_floats();
      double l = 0.0;
      for (size_t i = 0; i < out.size(); ++i) l += static_cast<double>(out[i]) * wf[i];
      return l;
    };
    const float h = 1e-2f;
    for (size_t i = 0; i < xf.size(); i += 3) {
      std::vector<float> xp = xf, xm = xf;
      xp[i] += h;
      xm[i] -= h;
      const double fd = (loss_op(xp) - loss_op(xm)) / (static_cast<double>(xp[i]) - xm[i]);
      ASSERT_NEAR(grad[i], fd, 2e-3 + 1e-2 * std::fabs(fd)) << "dqkv[" << i << "] (f32 op)";
    }
  }
}

TEST(Attention, FutureTokensDoNotChangeEarlierOutputs) {
  const Dims s{2, 12, 3, 4};
  const Tensor qkv = test::random_tensor({s.b, s.t, 3 * s.c()}, DType::f32, 21);
  const Result base = forward(qkv, s);
  for (int64_t t0 : {int64_t{0}, int64_t{5}, s.t - 1}) {
    SCOPED_TRACE(testing::Message() << "changed token " << t0);
    std::vector<float> v = qkv.to_floats();
    for (int64_t b = 0; b < s.b; ++b)
      for (int64_t j = s.c(); j < 3 * s.c(); ++j)  // k and v of token t0, every head
        v[static_cast<size_t>((b * s.t + t0) * 3 * s.c() + j)] += 0.75f;
    const Result changed = forward(Tensor::from_floats(v, qkv.shape()), s);
    const int64_t row = s.t * s.c();
    const std::vector<float> a = base.out.to_floats(), c = changed.out.to_floats();
    for (int64_t b = 0; b < s.b; ++b) {
      for (int64_t i = 0; i < t0 * s.c(); ++i)
        ASSERT_EQ(core::float_bits(a[b * row + i]), core::float_bits(c[b * row + i]))
            << "batch " << b << " element " << i << " (before token " << t0 << ")";
      double diff = 0.0;  // token t0 itself sees its own k and v
      for (int64_t i = t0 * s.c(); i < (t0 + 1) * s.c(); ++i)
        diff += std::fabs(a[b * row + i] - c[b * row + i]);
      EXPECT_GT(diff, 0.0) << "token " << t0 << " of batch " << b << " ignored its own k/v";
    }
  }
}

// bf16/f16: the same (half-representable) inputs as f32; the half run rounds S, P, O (and dP,
// dS, the gradients) to the dtype, each a relative error of one half-ulp (2^-9 bf16, 2^-12
// f16) of values of order 1-3, a few of which add up.
TEST(Attention, HalfPrecisionWithinToleranceOfF32) {
  const Dims s{2, 37, 2, 16};
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::bf16 ? 2e-2 : 3e-3;
    const Tensor qkv_h = test::random_tensor({s.b, s.t, 3 * s.c()}, dt, 31, -1.5f, 1.5f);
    const Tensor w_h = test::random_tensor({s.b, s.t, s.c()}, dt, 32);
    const Tensor qkv = Tensor::from_floats(qkv_h.to_floats(), qkv_h.shape());
    const Tensor w = Tensor::from_floats(w_h.to_floats(), w_h.shape());
    const Result f32 = forward(qkv, s), half = forward(qkv_h, s);
    const std::vector<float> a = f32.out.to_floats(), b = half.out.to_floats();
    double max_err = 0.0;
    for (size_t i = 0; i < a.size(); ++i)
      max_err = std::max(max_err, double(std::fabs(a[i] - b[i])));
    EXPECT_LT(max_err, tol) << "forward";
    EXPECT_GT(max_err, 0.0) << "the half run should round somewhere";
    const std::vector<float> ga = backward(f32, w, s).to_floats(),
                             gb = backward(half, w_h, s).to_floats();
    double gmax = 0.0, gerr = 0.0;
    for (size_t i = 0; i < ga.size(); ++i) {
      gmax = std::max(gmax, double(std::fabs(ga[i])));
      gerr = std::max(gerr, double(std::fabs(ga[i] - gb[i])));
    }
    EXPECT_LT(gerr, 2 * tol * std::max(1.0, gmax)) << "backward (max |grad| " << gmax << ")";
  }
}

TEST(Attention, RejectsBadInputs) {
  const Dims s{1, 4, 2, 3};
  const Tensor qkv = test::random_tensor({s.b, s.t, 3 * s.c()}, DType::f32, 41);
  Result f = forward(qkv, s);
  EXPECT_TRUE(test::throws_error_with([&] { attention_forward(f.out, f.heads, f.probs, qkv, 4); },
                                      {"not divisible", "4 heads"}));
  const Tensor small_probs = Tensor::empty({s.b, s.h, s.t, s.t - 1}, DType::f32);
  EXPECT_TRUE(
      test::throws_error_with([&] { attention_forward(f.out, f.heads, small_probs, qkv, s.h); },
                              {"probs", "[B, H, T, T]"}));
  const Tensor half_out = Tensor::empty({s.b, s.t, s.c()}, DType::bf16);
  EXPECT_TRUE(test::throws_error_with(
      [&] { attention_forward(half_out, f.heads, f.probs, qkv, s.h); }, {"out", "dtypes"}));
  const Tensor dqkv = Tensor::empty({s.b, s.t, 3 * s.c()}, DType::f32);
  const Tensor bad_dout = Tensor::empty({s.b, s.t + 1, s.c()}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { attention_backward(dqkv, bad_dout, f.heads, f.probs); },
                                      {"dout", "[B, T, C]"}));
}

}  // namespace
}  // namespace stoker::ops
