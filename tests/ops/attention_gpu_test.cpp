// Attention on the GPU against the CPU reference (ops/attention.h), f32 / bf16 / f16:
// - attention_forward: out, the saved per-head q/k/v (exact: a permutation) and the saved
//   probabilities (exactly 0 above the diagonal); outputs NaN-poisoned first;
// - attention_backward: dqkv (poisoned first);
// shapes cover T = 1, T not a multiple of the Pack width (scalar softmax path), D not a
// multiple of it (scalar permutation), and T = 2048 (the register limit); T = 2049 is refused.
// Tolerances (both sides round S, P, O, dP, dS to the dtype; only the GEMMs' fp32 summation
// order and expf differ, so an element may land one rounding step apart and pass it on):
//   per element |gpu - cpu| <= atol + rtol |cpu|, and for gradients a relative L2 error bound:
//     f32  rtol 1e-4, atol 1e-5 (forward); L2 1e-5 (backward)
//     f16  rtol 2^-8, atol 2e-4;            L2 5e-3
//     bf16 rtol 2^-5, atol 2e-3;            L2 3e-2
// - grouped-query heads (KV < H) and document masks (i32 and i64 positions: random document
//   lengths, 1 included, and padding): the same comparisons, masked probabilities exactly 0, and
//   dqkv's summed key/value heads within the L2 bounds;
// - gemm_batched on the GPU against ops::gemm on the GPU per matrix (same cuBLASLt, possibly
//   another algorithm), and batch counts that share (M, N, K) in one process, so a plan keyed
//   without the batch would compute the wrong number of matrices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "stoker/ops/attention.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::gpu;

struct Dims {
  int64_t b, t, h, d;
  int64_t c() const { return h * d; }
};

struct Tol {
  double rtol, atol, l2;
};

Tol tolerance(DType dt) {
  switch (dt) {
    case DType::f16:
      return {std::ldexp(1.0, -8), 2e-4, 5e-3};
    case DType::bf16:
      return {std::ldexp(1.0, -5), 2e-3, 3e-2};
    default:
      return {1e-4, 1e-5, 1e-5};
  }
}

::testing::AssertionResult close(const Tensor& got_t, const Tensor& want_t, const Tol& tol,
                                 const char* what) {
  const std::vector<float> got = got_t.to_floats(), want = want_t.to_floats();
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    const double lim = tol.atol + tol.rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= lim))  // NaN (an unwritten element) fails
      return ::testing::AssertionFailure() << what << "[" << i << "]: gpu " << got[i] << ", cpu "
                                           << want[i] << " (limit " << lim << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult close_l2(const Tensor& got_t, const Tensor& want_t, double tol,
                                    const char* what) {
  const std::vector<float> got = got_t.to_floats(), want = want_t.to_floats();
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]))
      return ::testing::AssertionFailure() << what << "[" << i << "] is NaN (unwritten?)";
    err += (got[i] - want[i]) * double(got[i] - want[i]);
    norm += double(want[i]) * want[i];
  }
  const double rel = std::sqrt(err / std::max(norm, 1e-30));
  if (rel <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative L2 error " << rel << " > " << tol;
}

struct AttnRun {
  Tensor out, heads, probs, dqkv;
};

AttnRun run_attention(const Tensor& qkv, const Tensor& dout, const Dims& s, Device dev) {
  AttnRun r;
  const DType dt = qkv.dtype();
  r.out = test::poisoned({s.b, s.t, s.c()}, dt, dev);
  r.heads = test::poisoned({3, s.b, s.h, s.t, s.d}, dt, dev);
  r.probs = test::poisoned({s.b, s.h, s.t, s.t}, dt, dev);
  attention_forward(r.out, r.heads, r.probs, qkv.to(dev), s.h);
  r.dqkv = test::poisoned({s.b, s.t, 3 * s.c()}, dt, dev);
  attention_backward(r.dqkv, dout.to(dev), r.heads, r.probs);
  return r;
}

TEST(AttentionGpu, MatchesCpu) {
  STOKER_REQUIRE_GPU();
  const Dims shapes[] = {{2, 1, 2, 8},    {2, 37, 3, 16},  {1, 45, 2, 5},
                         {2, 128, 4, 64}, {1, 300, 2, 32}, {1, 2048, 1, 64}};
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const Tol tol = tolerance(dt);
    for (const Dims& s : shapes) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " B=" << s.b << " T=" << s.t
                                      << " H=" << s.h << " D=" << s.d);
      // |S| stays below ~2 for half inputs, where one rounding step of S (which the two sides
      // may take differently) moves P by less than rtol; f32 takes wider, peakier rows.
      const float range = dt == DType::f32 ? 3.0f : 1.0f;
      const Tensor qkv = test::random_tensor({s.b, s.t, 3 * s.c()}, dt, seed++, -range, range);
      const Tensor dout = test::random_tensor({s.b, s.t, s.c()}, dt, seed++);
      const AttnRun cpu = run_attention(qkv, dout, s, Device::cpu());
      const AttnRun dev = run_attention(qkv, dout, s, gpu());
      EXPECT_TRUE(test::bit_identical(dev.heads, cpu.heads)) << "per-head q, k, v";
      EXPECT_TRUE(close(dev.out, cpu.out, tol, "out"));
      EXPECT_TRUE(close(dev.probs, cpu.probs, tol, "probs"));
      const std::vector<float> p = dev.probs.to_floats();
      for (size_t i = 0; i < p.size(); ++i) {
        const int64_t row = static_cast<int64_t>(i) / s.t % s.t,
                      col = static_cast<int64_t>(i) % s.t;
        if (col > row) ASSERT_EQ(p[i], 0.0f) << "future probability [" << row << ", " << col << "]";
      }
      EXPECT_TRUE(close_l2(dev.dqkv, cpu.dqkv, tol.l2, "dqkv"));
    }
  }
}

// ---- grouped-query heads and document masks ----

struct Gqa {
  int64_t b, t, h, kv, d;
  int64_t c() const { return h * d; }
  int64_t width() const { return (h + 2 * kv) * d; }
};

// Per row: documents of random lengths (a third of length 1), then T/8 padding tokens
// (position 0); odd rows start inside a document (position 5 at token 0).
std::vector<int64_t> document_positions(int64_t b, int64_t t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> pos(static_cast<size_t>(b * t), 0);
  for (int64_t r = 0; r < b; ++r) {
    int64_t p = r % 2 == 1 ? 5 : 0, length = r % 2 == 1 ? 40 : 1 + gen() % 3;
    for (int64_t i = 0; i < t - t / 8; ++i) {
      pos[static_cast<size_t>(r * t + i)] = p;
      if (++p >= length) {
        p = 0;
        length =
            gen() % 3 == 0 ? 1 : 2 + gen() % static_cast<uint32_t>(std::max<int64_t>(2, t / 3));
      }
    }
  }
  return pos;
}

AttnRun run_gqa(const Tensor& qkv, const Tensor& dout, const Gqa& s, const Tensor& positions,
                Device dev) {
  AttnRun r;
  const DType dt = qkv.dtype();
  const Tensor pos = positions.defined() ? positions.to(dev) : Tensor();
  r.out = test::poisoned({s.b, s.t, s.c()}, dt, dev);
  r.heads = test::poisoned({3, s.b, s.h, s.t, s.d}, dt, dev);
  r.probs = test::poisoned({s.b, s.h, s.t, s.t}, dt, dev);
  attention_forward(r.out, r.heads, r.probs, qkv.to(dev), s.h, s.kv, pos);
  r.dqkv = test::poisoned({s.b, s.t, s.width()}, dt, dev);
  attention_backward(r.dqkv, dout.to(dev), r.heads, r.probs, s.h, s.kv, pos);
  return r;
}

TEST(AttentionGpu, GroupedQueryAndDocumentMaskMatchCpu) {
  STOKER_REQUIRE_GPU();
  const Gqa shapes[] = {{2, 1, 4, 2, 8},    {2, 37, 4, 2, 8},    {1, 45, 6, 1, 5},
                        {2, 128, 8, 2, 64}, {1, 300, 4, 1, 128}, {1, 512, 32, 8, 64}};
  uint32_t seed = 100;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const Tol tol = tolerance(dt);
    for (const Gqa& s : shapes)
      for (int mask = 0; mask < 3; ++mask) {           // none, i32 positions, i64 positions
        if (s.h == 32 && dt != DType::bf16) continue;  // the Llama shape: bf16 only
        SCOPED_TRACE(testing::Message()
                     << dtype_name(dt) << " B=" << s.b << " T=" << s.t << " H=" << s.h
                     << " KV=" << s.kv << " D=" << s.d << " mask=" << mask);
        const std::vector<int64_t> pos = document_positions(s.b, s.t, seed);
        Tensor positions;
        if (mask == 1)
          positions = Tensor::from_vector(std::vector<int32_t>(pos.begin(), pos.end()), {s.b, s.t});
        else if (mask == 2)
          positions = Tensor::from_vector(pos, {s.b, s.t});
        const float range = dt == DType::f32 ? 3.0f : 1.0f;
        const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, dt, seed++, -range, range);
        const Tensor dout = test::random_tensor({s.b, s.t, s.c()}, dt, seed++);
        const AttnRun cpu = run_gqa(qkv, dout, s, positions, Device::cpu());
        const AttnRun dev = run_gqa(qkv, dout, s, positions, gpu());
        EXPECT_TRUE(test::bit_identical(dev.heads, cpu.heads)) << "per-head q, k, v (expanded)";
        EXPECT_TRUE(close(dev.out, cpu.out, tol, "out"));
        EXPECT_TRUE(close(dev.probs, cpu.probs, tol, "probs"));
        const std::vector<float> p = dev.probs.to_floats();
        for (size_t i = 0; i < p.size(); ++i) {
          const int64_t row = static_cast<int64_t>(i) / s.t % s.t,
                        col = static_cast<int64_t>(i) % s.t,
                        b = static_cast<int64_t>(i) / (s.h * s.t * s.t);
          const int64_t first =
              mask == 0
                  ? 0
                  : row - std::clamp<int64_t>(pos[static_cast<size_t>(b * s.t + row)], 0, row);
          if (col > row || col < first)
            ASSERT_EQ(p[i], 0.0f) << "masked probability [" << b << ", " << row << ", " << col
                                  << "]";
        }
        EXPECT_TRUE(close_l2(dev.dqkv, cpu.dqkv, tol.l2, "dqkv"));
      }
  }
}

TEST(AttentionGpu, RefusesSequencesBeyondTheKernelLimit) {
  STOKER_REQUIRE_GPU();
  const int64_t t = kAttentionMaxSeqLenCuda + 1;
  const Tensor qkv = Tensor::empty({1, t, 3 * 8}, DType::bf16, gpu());
  const Tensor out = Tensor::empty({1, t, 8}, DType::bf16, gpu());
  const Tensor heads = Tensor::empty({3, 1, 1, t, 8}, DType::bf16, gpu());
  const Tensor probs = Tensor::empty({1, 1, t, t}, DType::bf16, gpu());
  EXPECT_TRUE(test::throws_error_with([&] { attention_forward(out, heads, probs, qkv, 1); },
                                      {"T = 2049", "limit 2048"}));
}

// gemm_batched vs one ops::gemm per matrix, both on the GPU.
void batched_case(const Shape& batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb, DType in,
                  DType out, float beta, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "batch " << batch << " m=" << m << " n=" << n << " k=" << k
                                  << (ta ? " A^T" : " A") << (tb ? " B^T " : " B ")
                                  << dtype_name(in) << "->" << dtype_name(out) << " beta=" << beta);
  std::vector<int64_t> da, db, dc;
  for (int i = 0; i < batch.rank(); ++i) {
    da.push_back(batch[i]);
    db.push_back(batch[i]);
    dc.push_back(batch[i]);
  }
  const int64_t nb = batch.numel();
  const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  da.insert(da.end(), {ar, ac});
  db.insert(db.end(), {br, bc});
  dc.insert(dc.end(), {m, n});
  const Tensor a = test::random_tensor(Shape(da), in, seed).to(gpu());
  const Tensor b = test::random_tensor(Shape(db), in, seed + 1).to(gpu());
  const Tensor c0 =
      beta != 0.0f ? test::random_tensor(Shape(dc), out, seed + 2) : test::poisoned(Shape(dc), out);
  const Tensor c = c0.to(gpu());
  const GemmOptions o{.trans_a = ta, .trans_b = tb, .alpha = 0.75f, .beta = beta};
  gemm_batched(c, a, b, o);
  const Tensor want = c0.to(gpu()).reshape({nb, m, n});
  const Tensor a3 = a.reshape({nb, ar, ac}), b3 = b.reshape({nb, br, bc});
  for (int64_t i = 0; i < nb; ++i)
    gemm(want.slice(i, i + 1).reshape({m, n}), a3.slice(i, i + 1).reshape({ar, ac}),
         b3.slice(i, i + 1).reshape({br, bc}), o);
  // Two cuBLASLt algorithms may sum in other orders: fp32 round-off of a k-term sum, or one
  // rounding step of a half output.
  const double rtol = out == DType::f32 ? 1e-5 * std::sqrt(double(k)) : std::ldexp(1.0, -7);
  EXPECT_TRUE(close(c.reshape({nb, m, n}), want, {rtol, 1e-5, 0.0}, "c"));
}

TEST(GemmBatchedGpu, MatchesGemmPerMatrix) {
  STOKER_REQUIRE_GPU();
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      for (const Shape& batch : {Shape{1}, Shape{4}, Shape{2, 3}})  // same (m, n, k), 3 batches
        batched_case(batch, 33, 65, 17, ta, tb, DType::f32, DType::f32, 0.0f, seed += 3);
      batched_case({5}, 64, 48, 32, ta, tb, DType::f32, DType::f32, 1.0f, seed += 3);
    }
  for (DType in : {DType::bf16, DType::f16})
    for (DType out : {in, DType::f32}) {
      // Attention's own shapes: S = q k^T, O = P v, dV = P^T dO.
      batched_case({2, 3}, 128, 128, 64, false, true, in, out, 0.0f, seed += 3);
      batched_case({6}, 128, 64, 128, false, false, in, out, 0.0f, seed += 3);
      batched_case({6}, 128, 64, 128, true, false, in, out, 1.0f, seed += 3);
      batched_case({3}, 7, 5, 9, false, false, in, out, 0.0f, seed += 3);  // odd, unaligned
    }
}

}  // namespace
}  // namespace stoker::ops
