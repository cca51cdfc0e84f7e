// ops::attention_forward / attention_backward on the CPU (ops/attention.h):
// - forward (out and the saved probabilities) against a naive double-precision reference for
//   several (B, T, H, D), T = 1 and non-powers of two included; future probabilities exactly 0;
// - backward against central finite differences of L = sum(out * W) computed with the double
//   reference, and, more loosely, with the f32 op itself;
// - causality: changing a later token's k and v leaves every earlier output bit-identical;
// - bf16 and f16 forward and backward within their tolerances of f32 on the same inputs;
// - input validation names the bad tensor.
// Grouped-query attention (KV < H) and the document mask (positions):
// - forward against the double reference with each query head reading key/value head
//   h / (H / KV) and query i seeing keys i - positions[i]..i (H 4 KV 2 D 8, H 6 KV 1 D 16,
//   T 1..37; f32 tight, bf16 within its rounding); masked probabilities exactly 0;
// - against the unfused composition on the same tensors: multi-head attention on qkv with the
//   key/value heads repeated (repeat_kv) gives the same out and probs bit for bit, and its
//   gradient summed over each group (fp32, rounded once) is the grouped dqkv bit for bit;
// - backward (grouped, masked) against central finite differences of the double reference;
// - documents: random lengths (1 included), a padded tail (position 0 on every pad) and a
//   sequence that starts inside a document; changing an earlier document leaves later ones
//   bit-identical; i32 and i64 positions agree; positions 0..T-1 and KV = H equal the defaults
//   (plain causal multi-head attention) bit for bit;
// - errors for KV not dividing H, a dqkv of the wrong width, positions of the wrong shape or
//   dtype.
#include "stoker/ops/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

// kv = 0: multi-head (KV = H).
struct Dims {
  int64_t b, t, h, d, kv = 0;
  int64_t c() const { return h * d; }
  int64_t kvh() const { return kv == 0 ? h : kv; }
  int64_t width() const { return (h + 2 * kvh()) * d; }  // of the packed qkv
};

// Naive reference: out [B, T, H D] and probs [B, H, T, T] in double from qkv
// [B, T, (H + 2 KV) D]; query head h reads key/value head h / (H / KV); with positions [B, T]
// query i sees keys i - positions[i]..i (clamped to 0..i).
struct Reference {
  std::vector<double> out, probs;
};

Reference reference(const std::vector<double>& qkv, const Dims& s,
                    const std::vector<int64_t>& positions = {}) {
  const int64_t c = s.c(), kv = s.kvh(), group = s.h / kv;
  Reference r;
  r.out.assign(static_cast<size_t>(s.b * s.t * c), 0.0);
  r.probs.assign(static_cast<size_t>(s.b * s.h * s.t * s.t), 0.0);
  // Head `slot` of the token's H + 2 KV heads.
  auto at = [&](int64_t b, int64_t t, int64_t slot, int64_t d) {
    return qkv[static_cast<size_t>((b * s.t + t) * s.width() + slot * s.d + d)];
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  std::vector<double> w(static_cast<size_t>(s.t));
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t i = 0; i < s.t; ++i) {
        const int64_t ks = s.h + h / group, vs = s.h + kv + h / group;
        int64_t first = 0;
        if (!positions.empty())
          first = i - std::clamp<int64_t>(positions[static_cast<size_t>(b * s.t + i)], 0, i);
        double mx = -INFINITY;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < s.d; ++d) dot += at(b, i, h, d) * at(b, j, ks, d);
          w[j] = dot * scale;
          mx = std::max(mx, w[j]);
        }
        double sum = 0.0;
        for (int64_t j = first; j <= i; ++j) sum += (w[j] = std::exp(w[j] - mx));
        for (int64_t j = first; j <= i; ++j) {
          const double p = w[j] / sum;
          r.probs[static_cast<size_t>(((b * s.h + h) * s.t + i) * s.t + j)] = p;
          for (int64_t d = 0; d < s.d; ++d)
            r.out[static_cast<size_t>((b * s.t + i) * c + h * s.d + d)] += p * at(b, j, vs, d);
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

// The defaults (multi-head, no positions) unless the shape has kv or positions are given.
Result forward(const Tensor& qkv, const Dims& s, const Tensor& positions = Tensor()) {
  Result r;
  r.out = test::poisoned({s.b, s.t, s.c()}, qkv.dtype());
  r.heads = test::poisoned({3, s.b, s.h, s.t, s.d}, qkv.dtype());
  r.probs = test::poisoned({s.b, s.h, s.t, s.t}, qkv.dtype());
  if (s.kv == 0 && !positions.defined())
    attention_forward(r.out, r.heads, r.probs, qkv, s.h);
  else
    attention_forward(r.out, r.heads, r.probs, qkv, s.h, s.kv, positions);
  return r;
}

Tensor backward(const Result& f, const Tensor& dout, const Dims& s,
                const Tensor& positions = Tensor()) {
  Tensor dqkv = test::poisoned({s.b, s.t, s.width()}, dout.dtype());
  if (s.kv == 0 && !positions.defined())
    attention_backward(dqkv, dout, f.heads, f.probs);
  else
    attention_backward(dqkv, dout, f.heads, f.probs, s.h, s.kv, positions);
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
                                      {"dout", "[B, T, H * D]"}));
}

// ---- grouped-query attention and document masks ----

// Document positions [B, T]: documents of random lengths (1 frequent), odd rows starting inside
// a document (position 3 at token 0), and row 0 ending in `pad` padding tokens (position 0 each,
// as data::SequenceBatches pads a document's tail).
std::vector<int64_t> document_positions(int64_t b, int64_t t, uint32_t seed, int64_t pad = 3) {
  std::mt19937 gen(seed);
  const int64_t lengths[] = {1, 1, 2, 3, 5, 8, 13};
  std::uniform_int_distribution<int> pick(0, 6);
  std::vector<int64_t> pos(static_cast<size_t>(b * t));
  for (int64_t r = 0; r < b; ++r) {
    int64_t p = r % 2 == 1 ? 3 : 0, length = r % 2 == 1 ? 9 : lengths[pick(gen)];
    for (int64_t i = 0; i < t; ++i) {
      const bool padding = r == 0 && i >= t - pad;
      pos[static_cast<size_t>(r * t + i)] = padding ? 0 : p;
      if (++p == length) {
        p = 0;
        length = lengths[pick(gen)];
      }
    }
  }
  return pos;
}

Tensor positions_tensor(const std::vector<int64_t>& pos, const Dims& s, DType dtype) {
  if (dtype == DType::i64) return Tensor::from_vector(pos, {s.b, s.t});
  return Tensor::from_vector(std::vector<int32_t>(pos.begin(), pos.end()), {s.b, s.t});
}

std::vector<int64_t> arange_positions(const Dims& s) {
  std::vector<int64_t> pos(static_cast<size_t>(s.b * s.t));
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i) % s.t;
  return pos;
}

// Whether key j is visible to query i of batch element b.
bool visible(const std::vector<int64_t>& pos, const Dims& s, int64_t b, int64_t i, int64_t j) {
  const int64_t p = pos.empty() ? i : pos[static_cast<size_t>(b * s.t + i)];
  return j <= i && j >= i - std::clamp<int64_t>(p, 0, i);
}

// out and probs against the double reference; probabilities of masked keys exactly 0.
void expect_forward_matches(const Result& f, const Tensor& qkv, const Dims& s,
                            const std::vector<int64_t>& pos, double rtol, double ptol) {
  const Reference ref = reference(as_double(qkv), s, pos);
  const std::vector<float> out = f.out.to_floats(), probs = f.probs.to_floats();
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(out[i], ref.out[i], rtol * (1.0 + std::fabs(ref.out[i]))) << "out[" << i << "]";
  for (size_t i = 0; i < probs.size(); ++i) {
    const int64_t row = static_cast<int64_t>(i) / s.t % s.t, col = static_cast<int64_t>(i) % s.t;
    const int64_t b = static_cast<int64_t>(i) / (s.h * s.t * s.t);
    if (!visible(pos, s, b, row, col))
      ASSERT_EQ(probs[i], 0.0f) << "masked probability [" << b << ", " << row << ", " << col << "]";
    else
      ASSERT_NEAR(probs[i], ref.probs[i], ptol * (0.1 + ref.probs[i])) << "probs[" << i << "]";
  }
}

constexpr Dims kGqaShapes[] = {{2, 1, 4, 8, 2},  {2, 2, 4, 8, 2},  {1, 7, 4, 8, 2},
                               {2, 16, 4, 8, 2}, {2, 37, 4, 8, 2}, {1, 1, 6, 16, 1},
                               {2, 9, 6, 16, 1}, {2, 37, 6, 16, 1}};

TEST(GroupedQueryAttention, ForwardMatchesDoubleReference) {
  uint32_t seed = 200;
  for (const Dims& s : kGqaShapes)
    for (bool masked : {false, true}) {
      SCOPED_TRACE(testing::Message() << "B=" << s.b << " T=" << s.t << " H=" << s.h
                                      << " KV=" << s.kv << " D=" << s.d << " masked=" << masked);
      const std::vector<int64_t> pos =
          masked ? document_positions(s.b, s.t, seed) : arange_positions(s);
      const Tensor qkv =
          test::random_tensor({s.b, s.t, s.width()}, DType::f32, seed++, -2.0f, 2.0f);
      const Result f = forward(qkv, s, masked ? positions_tensor(pos, s, DType::i32) : Tensor());
      expect_forward_matches(f, qkv, s, masked ? pos : std::vector<int64_t>{}, 2e-5, 1e-5);
    }
}

// bf16 inputs (exact in f32 too): the bf16 run rounds S, P and O to bf16 (relative 2^-9 each).
TEST(GroupedQueryAttention, Bf16WithinItsRounding) {
  uint32_t seed = 300;
  for (const Dims& s : {Dims{2, 37, 4, 8, 2}, Dims{2, 23, 6, 16, 1}}) {
    SCOPED_TRACE(testing::Message() << "H=" << s.h << " KV=" << s.kv);
    const std::vector<int64_t> pos = document_positions(s.b, s.t, seed);
    const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, DType::bf16, seed++, -1.5f, 1.5f);
    const Result f = forward(qkv, s, positions_tensor(pos, s, DType::i64));
    EXPECT_EQ(f.out.dtype(), DType::bf16);
    expect_forward_matches(f, qkv, s, pos, 2e-2, 2e-2);
  }
}

// Multi-head attention on qkv with each key/value head repeated for its group (transformers'
// repeat_kv) is the same computation: equal out and probs, and the grouped gradient is the
// multi-head one with each group's dK and dV rows summed (fp32, rounded once).
TEST(GroupedQueryAttention, EqualsMultiHeadOnRepeatedKeyValueHeads) {
  uint32_t seed = 400;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Dims& s : {Dims{2, 13, 4, 8, 2}, Dims{1, 37, 6, 16, 1}, Dims{2, 5, 6, 4, 3}})
      for (bool masked : {false, true}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " T=" << s.t << " H=" << s.h
                                        << " KV=" << s.kv << " masked=" << masked);
        const int64_t group = s.h / s.kv, mha_width = 3 * s.c();
        const Tensor pos =
            masked ? positions_tensor(document_positions(s.b, s.t, seed), s, DType::i32) : Tensor();
        const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, dt, seed++, -2.0f, 2.0f);
        const Tensor dout = test::random_tensor({s.b, s.t, s.c()}, dt, seed++);
        // Repeat: slot h of k (and v) in the multi-head layout is kv slot h / group.
        const std::vector<float> x = qkv.to_floats();
        std::vector<float> rep(static_cast<size_t>(s.b * s.t * mha_width));
        for (int64_t tok = 0; tok < s.b * s.t; ++tok)
          for (int64_t slot = 0; slot < 3 * s.h; ++slot) {
            const int64_t which = slot / s.h, h = slot % s.h;
            const int64_t from = which == 0 ? h : s.h + (which - 1) * s.kv + h / group;
            for (int64_t d = 0; d < s.d; ++d)
              rep[static_cast<size_t>(tok * mha_width + slot * s.d + d)] =
                  x[static_cast<size_t>(tok * s.width() + from * s.d + d)];
          }
        const Dims mha{s.b, s.t, s.h, s.d};
        const Tensor qkv_rep = Tensor::from_floats(rep, {s.b, s.t, mha_width}, dt);
        const Result g = forward(qkv, s, pos), m = forward(qkv_rep, mha, pos);
        EXPECT_TRUE(test::bit_identical(g.heads, m.heads));
        EXPECT_TRUE(test::bit_identical(g.probs, m.probs));
        EXPECT_TRUE(test::bit_identical(g.out, m.out));
        const std::vector<float> dg = backward(g, dout, s, pos).to_floats();
        const std::vector<float> dm = backward(m, dout, mha, pos).to_floats();
        // The expected grouped gradient: q slots copied, k/v slots summed over their group.
        std::vector<float> want(dg.size());
        for (int64_t tok = 0; tok < s.b * s.t; ++tok)
          for (int64_t slot = 0; slot < s.h + 2 * s.kv; ++slot)
            for (int64_t d = 0; d < s.d; ++d) {
              float acc = 0.0f;
              if (slot < s.h) {
                acc = dm[static_cast<size_t>(tok * mha_width + slot * s.d + d)];
              } else {
                const int64_t which = 1 + (slot - s.h) / s.kv, kvh = (slot - s.h) % s.kv;
                for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
                  acc += dm[static_cast<size_t>(tok * mha_width + (which * s.h + h) * s.d + d)];
              }
              want[static_cast<size_t>(tok * s.width() + slot * s.d + d)] = test::round_to(dt, acc);
            }
        for (size_t i = 0; i < dg.size(); ++i)
          ASSERT_EQ(core::float_bits(dg[i]), core::float_bits(want[i]))
              << "dqkv[" << i << "]: " << dg[i] << " vs " << want[i];
      }
}

TEST(GroupedQueryAttention, BackwardMatchesFiniteDifferences) {
  uint32_t seed = 500;
  for (const Dims& s : {Dims{1, 6, 4, 3, 2}, Dims{2, 5, 6, 2, 1}, Dims{1, 1, 2, 2, 1}})
    for (bool masked : {false, true}) {
      SCOPED_TRACE(testing::Message() << "B=" << s.b << " T=" << s.t << " H=" << s.h
                                      << " KV=" << s.kv << " D=" << s.d << " masked=" << masked);
      const std::vector<int64_t> pos =
          masked ? document_positions(s.b, s.t, seed, 1) : std::vector<int64_t>{};
      const Tensor qkv =
          test::random_tensor({s.b, s.t, s.width()}, DType::f32, seed++, -1.5f, 1.5f);
      const Tensor w = test::random_tensor({s.b, s.t, s.c()}, DType::f32, seed++);
      const Tensor pt = masked ? positions_tensor(pos, s, DType::i64) : Tensor();
      const std::vector<float> grad = backward(forward(qkv, s, pt), w, s, pt).to_floats();
      std::vector<double> x = as_double(qkv);
      const std::vector<double> wd = as_double(w);
      auto loss = [&] {
        const Reference r = reference(x, s, pos);
        double l = 0.0;
        for (size_t i = 0; i < wd.size(); ++i) l += r.out[i] * wd[i];
        return l;
      };
      const double eps = 1e-5;
      for (size_t i = 0; i < x.size(); ++i) {
        const double x0 = x[i];
        x[i] = x0 + eps;
        const double lp = loss();
        x[i] = x0 - eps;
        const double lm = loss();
        x[i] = x0;
        const double fd = (lp - lm) / (2 * eps);
        ASSERT_NEAR(grad[i], fd, 1e-5 + 1e-4 * std::fabs(fd)) << "dqkv[" << i << "]";
      }
    }
}

// Tokens of an earlier document (and their k, v) do not reach a later document's outputs, and
// the key/value gradients of a document come only from its own queries.
TEST(GroupedQueryAttention, DocumentsAreIsolated) {
  const Dims s{1, 12, 4, 4, 2};
  // Documents [0, 5), [5, 6), [6, 12).
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5};
  const Tensor pt = positions_tensor(pos, s, DType::i32);
  const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, DType::f32, 601);
  const Result base = forward(qkv, s, pt);
  std::vector<float> v = qkv.to_floats();
  for (int64_t i = 0; i < 5 * s.width(); ++i) v[static_cast<size_t>(i)] += 0.5f;  // document 0
  const Result changed = forward(Tensor::from_floats(v, qkv.shape()), s, pt);
  const std::vector<float> a = base.out.to_floats(), c = changed.out.to_floats();
  for (int64_t i = 5 * s.c(); i < s.t * s.c(); ++i)
    ASSERT_EQ(core::float_bits(a[i]), core::float_bits(c[i])) << "out[" << i << "]";
  EXPECT_NE(a[0], c[0]) << "document 0 itself changed";
  // A single-token document attends to itself only: its output is its own v heads.
  const std::vector<float> x = qkv.to_floats();
  for (int64_t h = 0; h < s.h; ++h)
    for (int64_t d = 0; d < s.d; ++d)
      EXPECT_EQ(a[static_cast<size_t>(5 * s.c() + h * s.d + d)],
                x[static_cast<size_t>(5 * s.width() + (s.h + s.kv + h / 2) * s.d + d)]);
  // dout only on document 2's tokens: documents 0 and 1 get no gradient at all.
  std::vector<float> g(static_cast<size_t>(s.t * s.c()), 0.0f);
  for (int64_t i = 6 * s.c(); i < s.t * s.c(); ++i) g[static_cast<size_t>(i)] = 1.0f;
  const std::vector<float> dq =
      backward(base, Tensor::from_floats(g, {s.b, s.t, s.c()}), s, pt).to_floats();
  for (int64_t i = 0; i < 6 * s.width(); ++i) ASSERT_EQ(dq[i], 0.0f) << "dqkv[" << i << "]";
  double rest = 0.0;
  for (int64_t i = 6 * s.width(); i < s.t * s.width(); ++i) rest += std::fabs(dq[i]);
  EXPECT_GT(rest, 0.0);
}

// KV = H and positions 0..T-1 select the plain multi-head causal path: the same bits as the
// defaults, forward and backward; i32 and i64 positions agree.
TEST(GroupedQueryAttention, DefaultsAreMultiHeadCausal) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Dims s{2, 19, 3, 8};
    const Dims explicit_kv{2, 19, 3, 8, 3};
    SCOPED_TRACE(dtype_name(dt));
    const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, dt, 701, -2.0f, 2.0f);
    const Tensor dout = test::random_tensor({s.b, s.t, s.c()}, dt, 702);
    const Result plain = forward(qkv, s);
    const Tensor dplain = backward(plain, dout, s);
    for (DType pdt : {DType::i32, DType::i64}) {
      const Tensor pos = positions_tensor(arange_positions(s), s, pdt);
      const Result r = forward(qkv, explicit_kv, pos);
      EXPECT_TRUE(test::bit_identical(r.out, plain.out));
      EXPECT_TRUE(test::bit_identical(r.probs, plain.probs));
      EXPECT_TRUE(test::bit_identical(backward(r, dout, explicit_kv, pos), dplain));
    }
    const std::vector<int64_t> docs = document_positions(s.b, s.t, 703);
    const Result a = forward(qkv, explicit_kv, positions_tensor(docs, s, DType::i32));
    const Result b = forward(qkv, explicit_kv, positions_tensor(docs, s, DType::i64));
    EXPECT_TRUE(test::bit_identical(a.out, b.out));
    EXPECT_FALSE(test::bit_identical(a.out, plain.out)) << "the mask should change something";
  }
}

TEST(GroupedQueryAttention, RejectsBadInputs) {
  const Dims s{2, 4, 4, 2, 2};
  const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, DType::f32, 801);
  const Result f = forward(qkv, s);
  // KV not dividing H.
  EXPECT_TRUE(
      test::throws_error_with([&] { attention_forward(f.out, f.heads, f.probs, qkv, 4, 3); },
                              {"num_kv_heads = 3", "dividing num_heads"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { attention_forward(f.out, f.heads, f.probs, qkv, 4, -2); }, {"num_kv_heads = -2"}));
  // qkv not splittable into H + 2 KV heads.
  const Tensor odd = test::random_tensor({s.b, s.t, s.width() + 2}, DType::f32, 802);
  EXPECT_TRUE(
      test::throws_error_with([&] { attention_forward(f.out, f.heads, f.probs, odd, 4, 2); },
                              {"qkv", "not divisible into 4 heads + 2 x 2 key/value heads"}));
  // The backward with a multi-head-wide dqkv for grouped heads, or another H.
  const Tensor dout = test::random_tensor({s.b, s.t, s.c()}, DType::f32, 803);
  const Tensor wide = Tensor::empty({s.b, s.t, 3 * s.c()}, DType::f32);
  EXPECT_TRUE(test::throws_error_with(
      [&] { attention_backward(wide, dout, f.heads, f.probs, 4, 2); }, {"dqkv", "(H + 2 KV)"}));
  const Tensor dqkv = Tensor::empty({s.b, s.t, s.width()}, DType::f32);
  EXPECT_TRUE(test::throws_error_with(
      [&] { attention_backward(dqkv, dout, f.heads, f.probs, 8, 2); }, {"num_heads = 8"}));
  // Positions: wrong shape, wrong dtype.
  const Tensor long_pos =
      Tensor::from_vector(std::vector<int32_t>(s.b * (s.t + 1)), {s.b, s.t + 1});
  const Tensor flat_pos = Tensor::from_vector(std::vector<int64_t>(s.b * s.t), {s.b * s.t});
  const Tensor float_pos = Tensor::zeros({s.b, s.t}, DType::f32);
  for (const Tensor* p : {&long_pos, &flat_pos, &float_pos}) {
    SCOPED_TRACE(p->str());
    EXPECT_TRUE(
        test::throws_error_with([&] { attention_forward(f.out, f.heads, f.probs, qkv, 4, 2, *p); },
                                {"positions is", "i32 or i64 [B, T] = [2, 4]"}));
    EXPECT_TRUE(test::throws_error_with(
        [&] { attention_backward(dqkv, dout, f.heads, f.probs, 4, 2, *p); }, {"positions is"}));
  }
}

}  // namespace
}  // namespace stoker::ops
