// Fused attention (ops/flash_attention.h) on the GPU, bf16 and f16, outputs (out, lse, dqkv)
// NaN-poisoned first, so an unwritten element fails:
//   - multi-head, D = 64, against the CPU math path (ops::attention_forward/backward in f32 on
//     the same rounded inputs), lse against a double loop, and against the unfused GPU path.
//     Shapes (B, T, H): (2,64,2) one tile, (1,77,3) a tail tile, (2,256,4) several tiles,
//     (1,1,1), (2,1024,12) GPT-2;
//   - grouped-query heads (H, KV, D): (4,4,64), (8,2,64), (32,8,64) Llama-3.2-1B, (24,8,128)
//     Llama-3.2-3B, (4,1,128), for T in {1, 63, 64, 65, 200} (B = 2) and T = 1030 (B = 1; the
//     (8,2,64) and (4,1,128) heads), causal and with a document mask (random documents of 1 to
//     T/2 tokens, length 1 included, crossing tiles; the last T/8 tokens padding, position 0;
//     i64 positions with bf16, i32 with f16), against a reference written here: the unfused
//     composition q.k, mask, softmax, .v and the analytic backward (dP = dO V^T, dS = P (dP -
//     rowsum(P dP)), dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D), dV = P^T dO, a kv head's dK and
//     dV summed over its group), in double from the same rounded inputs.
// Tolerances, relative to the largest magnitude of the reference tensor (max |got - want| <=
// tol * max |want|), and a relative L2 error bound:
//   bf16: out 1e-2, dqkv 2e-2; L2 1e-2 / 2e-2.   f16: out 2e-3, dqkv 5e-3; L2 2e-3 / 5e-3.
//   lse (f32 math on both sides): 1e-4 relative to max |lse| (+1e-5).
// Against the unfused GPU path the bounds are 3x those (bf16: out 3e-2, dqkv 6e-2), since that
// path carries its own rounding of S, P, dP and dS to the dtype (AttentionGpu allows it a
// relative L2 error of 3e-2 in bf16); the test prints every measured error, for the margins.
// Also: the backward is deterministic (two runs, same bits; grouped heads, with and without
// documents); unsupported inputs (D 96, KV not dividing H, f32, CPU) are reported by
// flash_attention_supported and refused with an error naming the reason, and so are bad
// positions; nn::CausalSelfAttention with the fused kernel (by option and by
// STOKER_ATTENTION=fused) equals the math path within the bounds used against the unfused GPU
// path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ops/flash_attention.h"
#include "stoker/nn/attention.h"
#include "stoker/ops/attention.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::gpu;

constexpr int64_t kD = 64;

struct Dims {
  int64_t b, t, h;
  int64_t c() const { return h * kD; }
};

struct Tol {
  double out, grad;
};

Tol tolerance(DType dt) { return dt == DType::bf16 ? Tol{1e-2, 2e-2} : Tol{2e-3, 5e-3}; }

// max |got - want| <= tol * max |want|, and relative L2 error <= tol; NaN fails.
template <typename Want>
::testing::AssertionResult close_rel(const std::vector<float>& got, const std::vector<Want>& want,
                                     double tol, const char* what, double* worst = nullptr) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double scale = 0.0, err2 = 0.0, norm2 = 0.0, max_err = 0.0;
  size_t at = 0;
  for (Want w : want) scale = std::max(scale, std::fabs(double(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]))
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << got[i] << " (unwritten?)";
    const double e = std::fabs(double(got[i]) - want[i]);
    if (e > max_err) max_err = e, at = i;
    err2 += e * e;
    norm2 += double(want[i]) * want[i];
  }
  const double rel_max = max_err / std::max(scale, 1e-30);
  const double rel_l2 = std::sqrt(err2 / std::max(norm2, 1e-30));
  if (worst) *worst = std::max(rel_max, rel_l2);
  if (rel_max <= tol && rel_l2 <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": max error " << max_err << " at [" << at << "] (got " << got[at] << ", want "
         << want[at] << ") = " << rel_max << " of max |want| " << scale << ", relative L2 "
         << rel_l2 << "; tolerance " << tol;
}

::testing::AssertionResult close_rel(const Tensor& got, const Tensor& want, double tol,
                                     const char* what, double* worst = nullptr) {
  return close_rel(got.to_floats(), want.to_floats(), tol, what, worst);
}

// lse[b, h, i] = ln sum_{j <= i} exp(q_i . k_j / 8), in double, from qkv's values.
std::vector<double> reference_lse(const Tensor& qkv, const Dims& s) {
  const std::vector<float> x = qkv.to_floats();
  const int64_t c = s.c(), ld = 3 * c;
  std::vector<double> lse(s.b * s.h * s.t), row(s.t);
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t i = 0; i < s.t; ++i) {
        const float* q = &x[(b * s.t + i) * ld + h * kD];
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = &x[(b * s.t + j) * ld + c + h * kD];
          double dot = 0.0;
          for (int64_t d = 0; d < kD; ++d) dot += double(q[d]) * k[d];
          row[j] = dot / std::sqrt(double(kD));
          mx = std::max(mx, row[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(row[j] - mx);
        lse[(b * s.h + h) * s.t + i] = mx + std::log(sum);
      }
  return lse;
}

struct Fused {
  Tensor out, lse, dqkv;
};

Fused run_fused(const Tensor& qkv_gpu, const Tensor& dout_gpu, const Dims& s) {
  const DType dt = qkv_gpu.dtype();
  Fused r;
  r.out = test::poisoned({s.b, s.t, s.c()}, dt, gpu());
  r.lse = test::poisoned({s.b, s.h, s.t}, DType::f32, gpu());
  flash_attention_forward(r.out, r.lse, qkv_gpu, s.h, s.h);
  r.dqkv = test::poisoned({s.b, s.t, 3 * s.c()}, dt, gpu());
  flash_attention_backward(r.dqkv, dout_gpu, qkv_gpu, r.out, r.lse, s.h, s.h);
  return r;
}

// The math path (ops/attention.h) on `dev` in qkv's dtype: out and dqkv.
std::pair<Tensor, Tensor> run_math(const Tensor& qkv, const Tensor& dout, const Dims& s,
                                   Device dev) {
  const DType dt = qkv.dtype();
  const Tensor q = qkv.to(dev), g = dout.to(dev);
  Tensor out = test::poisoned({s.b, s.t, s.c()}, dt, dev);
  const Tensor heads = Tensor::empty({3, s.b, s.h, s.t, kD}, dt, dev);
  const Tensor probs = Tensor::empty({s.b, s.h, s.t, s.t}, dt, dev);
  attention_forward(out, heads, probs, q, s.h);
  Tensor dqkv = test::poisoned({s.b, s.t, 3 * s.c()}, dt, dev);
  attention_backward(dqkv, g, heads, probs);
  return {out, dqkv};
}

Tensor to_f32(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  Tensor f = Tensor::empty(host.shape(), DType::f32);
  ops::cast(f, host);
  return f;
}

TEST(FlashAttentionGpu, MatchesCpuReferenceAndUnfusedGpu) {
  STOKER_REQUIRE_GPU();
  const Dims shapes[] = {{2, 64, 2}, {1, 77, 3}, {2, 256, 4}, {1, 1, 1}, {2, 1024, 12}};
  uint32_t seed = 11;
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tol tol = tolerance(dt);
    for (const Dims& s : shapes) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(dt) << " B=" << s.b << " T=" << s.t << " H=" << s.h << " D=64");
      ASSERT_TRUE(
          flash_attention_supported(Tensor::empty({s.b, s.t, 3 * s.c()}, dt, gpu()), s.h, s.h));
      // Scores q.k/8 of standard deviation ~0.9: peaked enough that P is far from uniform.
      const Tensor qkv = test::random_tensor({s.b, s.t, 3 * s.c()}, dt, seed++, -1.5f, 1.5f);
      const Tensor dout = test::random_tensor({s.b, s.t, s.c()}, dt, seed++);
      const Fused f = run_fused(qkv.to(gpu()), dout.to(gpu()), s);

      // CPU reference in f32 on the same rounded inputs.
      const auto [ref_out, ref_dqkv] = run_math(to_f32(qkv), to_f32(dout), s, Device::cpu());
      double e_out = 0, e_grad = 0, e_out_u = 0, e_grad_u = 0;
      EXPECT_TRUE(close_rel(to_f32(f.out), ref_out, tol.out, "out vs cpu", &e_out));
      EXPECT_TRUE(close_rel(to_f32(f.dqkv), ref_dqkv, tol.grad, "dqkv vs cpu", &e_grad));
      const std::vector<double> want_lse = reference_lse(qkv, s);
      const std::vector<float> got_lse = f.lse.to_floats();
      double lse_scale = 0.0;
      for (double v : want_lse) lse_scale = std::max(lse_scale, std::fabs(v));
      for (size_t i = 0; i < got_lse.size(); ++i)
        ASSERT_LE(std::fabs(got_lse[i] - want_lse[i]), 1e-4 * lse_scale + 1e-5)
            << "lse[" << i << "]: gpu " << got_lse[i] << ", reference " << want_lse[i];

      // The unfused GPU path in the same dtype.
      const auto [u_out, u_dqkv] = run_math(qkv, dout, s, gpu());
      EXPECT_TRUE(
          close_rel(to_f32(f.out), to_f32(u_out), 3 * tol.out, "out vs unfused gpu", &e_out_u));
      EXPECT_TRUE(close_rel(to_f32(f.dqkv), to_f32(u_dqkv), 3 * tol.grad, "dqkv vs unfused gpu",
                            &e_grad_u));
      std::printf(
          "[ flash    ] %s B=%lld T=%lld H=%lld: error/max out %.2e dqkv %.2e (cpu), "
          "out %.2e dqkv %.2e (unfused gpu)\n",
          std::string(dtype_name(dt)).c_str(), (long long)s.b, (long long)s.t, (long long)s.h,
          e_out, e_grad, e_out_u, e_grad_u);
    }
  }
}

// ---- grouped-query heads, D 64 and 128, document masks: against a double reference ----

struct Gqa {
  int64_t b, t, h, kv, d;
  int64_t width() const { return (h + 2 * kv) * d; }  // qkv, dqkv
  int64_t q_width() const { return h * d; }           // out, dout
};

struct Reference {
  std::vector<double> out, lse, dqkv;
};

// The unfused composition in double: per query head h (kv head g = h / (H / KV)) and row i,
// the scores s_j = q_i . k_j / sqrt(D) over the visible keys j (first..i; first = 0, or with
// positions i - positions[i] clamped to 0..i), P = softmax(s), out_i = sum_j P_j v_j,
// lse_i = ln sum_j exp(s_j); backward dP_j = dO_i . v_j, dS_j = P_j (dP_j - sum_j P_j dP_j),
// dQ_i = sum_j dS_j k_j / sqrt(D), dK_j += dS_j q_i / sqrt(D), dV_j += P_j dO_i (so a kv
// head's dK and dV sum over every query head of its group).
Reference reference(const std::vector<float>& qkv, const std::vector<float>& dout,
                    const std::vector<int64_t>& positions, const Gqa& s) {
  const int64_t w = s.width(), wo = s.q_width(), d = s.d, group = s.h / s.kv;
  const double scale = 1.0 / std::sqrt(double(d));
  Reference r;
  r.out.assign(static_cast<size_t>(s.b * s.t * wo), 0.0);
  r.lse.assign(static_cast<size_t>(s.b * s.h * s.t), 0.0);
  r.dqkv.assign(static_cast<size_t>(s.b * s.t * w), 0.0);
  std::vector<double> p(static_cast<size_t>(s.t)), dp(static_cast<size_t>(s.t));
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h) {
      const int64_t g = h / group, qc = h * d, kc = (s.h + g) * d, vc = (s.h + s.kv + g) * d;
      auto at = [&](int64_t row, int64_t col) {
        return static_cast<size_t>((b * s.t + row) * w + col);
      };
      for (int64_t i = 0; i < s.t; ++i) {
        int64_t first = 0;
        if (!positions.empty())
          first = i - std::clamp<int64_t>(positions[static_cast<size_t>(b * s.t + i)], 0, i);
        const float* q = &qkv[at(i, qc)];
        double mx = -INFINITY;
        for (int64_t j = first; j <= i; ++j) {
          const float* k = &qkv[at(j, kc)];
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += double(q[e]) * k[e];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = first; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        r.lse[static_cast<size_t>((b * s.h + h) * s.t + i)] = mx + std::log(sum);
        double* o = &r.out[static_cast<size_t>((b * s.t + i) * wo + qc)];
        const float* go = &dout[static_cast<size_t>((b * s.t + i) * wo + qc)];
        double rowsum = 0.0;
        for (int64_t j = first; j <= i; ++j) {
          p[j] /= sum;
          const float* v = &qkv[at(j, vc)];
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) {
            o[e] += p[j] * v[e];
            dot += double(go[e]) * v[e];
          }
          dp[j] = dot;
          rowsum += p[j] * dot;
        }
        double* dq = &r.dqkv[at(i, qc)];
        for (int64_t j = first; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - rowsum) * scale;
          const float* k = &qkv[at(j, kc)];
          double* dk = &r.dqkv[at(j, kc)];
          double* dv = &r.dqkv[at(j, vc)];
          for (int64_t e = 0; e < d; ++e) {
            dq[e] += ds * k[e];
            dk[e] += ds * q[e];
            dv[e] += p[j] * go[e];
          }
        }
      }
    }
  return r;
}

// Each row of [B, T]: documents of random lengths (a quarter of length 1, a quarter 2..8, the
// rest up to T/2, so some cross 64-row tiles), positions 0, 1, ... within each, then T/8
// padding tokens of position 0.
std::vector<int64_t> document_positions(int64_t b, int64_t t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> pos(static_cast<size_t>(b * t), 0);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t end = t - t / 8;
    int64_t i = 0;
    while (i < end) {
      const uint32_t kind = gen() % 4;
      const int64_t len = kind == 0 ? 1
                          : kind == 1
                              ? 2 + gen() % 7
                              : 9 + gen() % static_cast<uint32_t>(std::max<int64_t>(1, t / 2));
      for (int64_t k = 0; k < len && i < end; ++k, ++i) pos[static_cast<size_t>(r * t + i)] = k;
    }
  }
  return pos;
}

Tensor positions_tensor(const std::vector<int64_t>& pos, const Gqa& s, DType dt) {
  if (dt == DType::i64) return Tensor::from_vector(pos, {s.b, s.t}, gpu());
  const std::vector<int32_t> p32(pos.begin(), pos.end());
  return Tensor::from_vector(p32, {s.b, s.t}, gpu());
}

Fused run_fused_gqa(const Tensor& qkv, const Tensor& dout, const Tensor& positions, const Gqa& s) {
  const DType dt = qkv.dtype();
  Fused r;
  r.out = test::poisoned({s.b, s.t, s.q_width()}, dt, gpu());
  r.lse = test::poisoned({s.b, s.h, s.t}, DType::f32, gpu());
  flash_attention_forward(r.out, r.lse, qkv, s.h, s.kv, positions);
  r.dqkv = test::poisoned({s.b, s.t, s.width()}, dt, gpu());
  flash_attention_backward(r.dqkv, dout, qkv, r.out, r.lse, s.h, s.kv, positions);
  return r;
}

// One shape in bf16 and f16, causal and with documents, against reference().
void check_against_reference(const Gqa& s, uint32_t seed) {
  for (DType dt : {DType::bf16, DType::f16}) {
    const Tol tol = tolerance(dt);
    for (bool docs : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(dt) << " B=" << s.b << " T=" << s.t << " H=" << s.h
                   << " KV=" << s.kv << " D=" << s.d << (docs ? " documents" : " causal"));
      const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, dt, seed++, -1.5f, 1.5f);
      const Tensor dout = test::random_tensor({s.b, s.t, s.q_width()}, dt, seed++);
      ASSERT_TRUE(flash_attention_supported(qkv.to(gpu()), s.h, s.kv));
      const std::vector<int64_t> pos =
          docs ? document_positions(s.b, s.t, seed++) : std::vector<int64_t>{};
      // i64 positions with bf16, i32 with f16: both index types run.
      const Tensor positions =
          docs ? positions_tensor(pos, s, dt == DType::bf16 ? DType::i64 : DType::i32) : Tensor();
      const Fused f = run_fused_gqa(qkv.to(gpu()), dout.to(gpu()), positions, s);
      const Reference want = reference(qkv.to_floats(), dout.to_floats(), pos, s);

      double e_out = 0, e_grad = 0;
      EXPECT_TRUE(close_rel(f.out.to_floats(), want.out, tol.out, "out", &e_out));
      EXPECT_TRUE(close_rel(f.dqkv.to_floats(), want.dqkv, tol.grad, "dqkv", &e_grad));
      const std::vector<float> got_lse = f.lse.to_floats();
      double lse_scale = 0.0;
      for (double v : want.lse) lse_scale = std::max(lse_scale, std::fabs(v));
      for (size_t i = 0; i < got_lse.size(); ++i)
        ASSERT_LE(std::fabs(got_lse[i] - want.lse[i]), 1e-4 * lse_scale + 1e-5)
            << "lse[" << i << "]: gpu " << got_lse[i] << ", reference " << want.lse[i];
      std::printf(
          "[ flash    ] %s B=%lld T=%lld H=%lld KV=%lld D=%lld %s: error/max out %.2e "
          "dqkv %.2e\n",
          std::string(dtype_name(dt)).c_str(), (long long)s.b, (long long)s.t, (long long)s.h,
          (long long)s.kv, (long long)s.d, docs ? "documents" : "causal", e_out, e_grad);
    }
  }
}

// The reference itself, against an independent implementation: the CPU math path
// (ops::attention_forward/backward with kv heads and positions, f32) on the same inputs. Needs
// no GPU, so it runs on every machine.
TEST(FlashAttentionGpu, ReferenceAgreesWithTheCpuMathPath) {
  for (const Gqa& s : {Gqa{2, 130, 4, 2, 64}, Gqa{1, 70, 3, 1, 128}}) {
    for (bool docs : {false, true}) {
      SCOPED_TRACE(testing::Message() << "H=" << s.h << " KV=" << s.kv << " D=" << s.d
                                      << (docs ? " documents" : " causal"));
      const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, DType::f32, 21, -1.5f, 1.5f);
      const Tensor dout = test::random_tensor({s.b, s.t, s.q_width()}, DType::f32, 22);
      const std::vector<int64_t> pos =
          docs ? document_positions(s.b, s.t, 23) : std::vector<int64_t>{};
      const Tensor positions = docs ? Tensor::from_vector(pos, {s.b, s.t}) : Tensor();
      const Tensor out = Tensor::empty({s.b, s.t, s.q_width()}, DType::f32);
      const Tensor heads = Tensor::empty({3, s.b, s.h, s.t, s.d}, DType::f32);
      const Tensor probs = Tensor::empty({s.b, s.h, s.t, s.t}, DType::f32);
      const Tensor dqkv = Tensor::empty({s.b, s.t, s.width()}, DType::f32);
      attention_forward(out, heads, probs, qkv, s.h, s.kv, positions);
      attention_backward(dqkv, dout, heads, probs, s.h, s.kv, positions);
      const Reference want = reference(qkv.to_floats(), dout.to_floats(), pos, s);
      EXPECT_TRUE(close_rel(out.to_floats(), want.out, 1e-5, "out"));
      EXPECT_TRUE(close_rel(dqkv.to_floats(), want.dqkv, 1e-5, "dqkv"));
    }
  }
}

// T of one tile, one row short of and past a tile, a tail after three tiles; B = 2.
constexpr int64_t kSeqLens[] = {1, 63, 64, 65, 200};

TEST(FlashAttentionGpu, MultiHeadD64MatchesReference) {
  STOKER_REQUIRE_GPU();
  for (int64_t t : kSeqLens) check_against_reference({2, t, 4, 4, 64}, 100);
}

TEST(FlashAttentionGpu, GroupedQueryD64MatchesReference) {
  STOKER_REQUIRE_GPU();
  for (int64_t t : kSeqLens) check_against_reference({2, t, 8, 2, 64}, 200);
  check_against_reference({1, 1030, 8, 2, 64}, 250);
}

TEST(FlashAttentionGpu, Llama1BHeadsMatchReference) {
  STOKER_REQUIRE_GPU();
  for (int64_t t : kSeqLens) check_against_reference({2, t, 32, 8, 64}, 300);
}

TEST(FlashAttentionGpu, Llama3BHeadsD128MatchReference) {
  STOKER_REQUIRE_GPU();
  for (int64_t t : kSeqLens) check_against_reference({2, t, 24, 8, 128}, 400);
}

TEST(FlashAttentionGpu, OneKvHeadD128MatchesReference) {
  STOKER_REQUIRE_GPU();
  for (int64_t t : kSeqLens) check_against_reference({2, t, 4, 1, 128}, 500);
  check_against_reference({1, 1030, 4, 1, 128}, 550);
}

TEST(FlashAttentionGpu, BackwardIsDeterministic) {
  STOKER_REQUIRE_GPU();
  {
    const Dims s{2, 300, 3};
    const Tensor qkv = test::random_tensor({s.b, s.t, 3 * s.c()}, DType::bf16, 3).to(gpu());
    const Tensor dout = test::random_tensor({s.b, s.t, s.c()}, DType::bf16, 4).to(gpu());
    const Fused a = run_fused(qkv, dout, s), b = run_fused(qkv, dout, s);
    EXPECT_TRUE(test::bit_identical(a.out, b.out));
    EXPECT_TRUE(test::bit_identical(a.lse, b.lse));
    EXPECT_TRUE(test::bit_identical(a.dqkv, b.dqkv));
  }
  // Grouped heads (dK, dV summed over the group in one CTA), with and without documents.
  for (const Gqa& s : {Gqa{2, 300, 8, 2, 64}, Gqa{2, 300, 4, 1, 128}}) {
    for (bool docs : {false, true}) {
      SCOPED_TRACE(testing::Message() << "H=" << s.h << " KV=" << s.kv << " D=" << s.d
                                      << (docs ? " documents" : " causal"));
      const Tensor qkv = test::random_tensor({s.b, s.t, s.width()}, DType::bf16, 5).to(gpu());
      const Tensor dout = test::random_tensor({s.b, s.t, s.q_width()}, DType::bf16, 6).to(gpu());
      const Tensor positions =
          docs ? positions_tensor(document_positions(s.b, s.t, 7), s, DType::i32) : Tensor();
      const Fused a = run_fused_gqa(qkv, dout, positions, s);
      const Fused b = run_fused_gqa(qkv, dout, positions, s);
      EXPECT_TRUE(test::bit_identical(a.out, b.out));
      EXPECT_TRUE(test::bit_identical(a.lse, b.lse));
      EXPECT_TRUE(test::bit_identical(a.dqkv, b.dqkv));
    }
  }
}

TEST(FlashAttentionGpu, ReportsAndRefusesUnsupportedInputs) {
  STOKER_REQUIRE_GPU();
  const Tensor qkv = Tensor::empty({1, 5, 3 * 128}, DType::bf16, gpu());  // H = KV = 2: D 64
  EXPECT_TRUE(flash_attention_supported(qkv, 2, 2));
  EXPECT_TRUE(flash_attention_supported(Tensor::empty({1, 5, 6 * 128}, DType::bf16, gpu()), 4, 1))
      << "H 4, KV 1, D 128";
  EXPECT_FALSE(flash_attention_supported(qkv, 4, 4)) << "D = 32";
  EXPECT_FALSE(flash_attention_supported(Tensor::empty({1, 5, 4 * 96}, DType::bf16, gpu()), 2, 1))
      << "D = 96";
  EXPECT_FALSE(flash_attention_supported(Tensor::empty({1, 5, 7 * 64}, DType::bf16, gpu()), 3, 2))
      << "KV does not divide H";
  EXPECT_FALSE(flash_attention_supported(Tensor::empty({1, 5, 3 * 128}, DType::f32, gpu()), 2, 2));
  EXPECT_FALSE(flash_attention_supported(Tensor::empty({1, 5, 3 * 128}, DType::bf16), 2, 2))
      << "CPU";

  // forward refuses each with the reason.
  auto refused = [](const Tensor& q, int64_t h, int64_t kv, const char* reason) {
    const int64_t d = 64;  // out and lse are valid for H heads of 64 where it matters
    const Tensor out = Tensor::empty({1, 5, h * d}, DType::bf16, gpu());
    const Tensor lse = Tensor::empty({1, h, 5}, DType::f32, gpu());
    return test::throws_error_with([&] { flash_attention_forward(out, lse, q, h, kv); },
                                   {"flash_attention_forward", reason});
  };
  EXPECT_TRUE(refused(qkv, 4, 4, "head dim 32"));
  EXPECT_TRUE(refused(Tensor::empty({1, 5, 4 * 96}, DType::bf16, gpu()), 2, 1, "head dim 96"));
  EXPECT_TRUE(refused(Tensor::empty({1, 5, 7 * 64}, DType::bf16, gpu()), 3, 2, "does not divide"));
  EXPECT_TRUE(refused(Tensor::empty({1, 5, 3 * 128}, DType::f32, gpu()), 2, 2, "bf16 or f16"));
  EXPECT_TRUE(refused(Tensor::empty({1, 5, 3 * 128}, DType::bf16), 2, 2, "CUDA device"));

  const Tensor out = Tensor::empty({1, 5, 128}, DType::bf16, gpu());
  const Tensor lse = Tensor::empty({1, 2, 5}, DType::f32, gpu());
  const Tensor lse_bad = Tensor::empty({1, 2, 5}, DType::bf16, gpu());
  EXPECT_TRUE(test::throws_error_with([&] { flash_attention_forward(out, lse_bad, qkv, 2, 2); },
                                      {"lse", "f32"}));
  // positions: [B, T] i32 or i64 on qkv's device.
  const Tensor pos_shape = Tensor::zeros({1, 4}, DType::i32, gpu());
  const Tensor pos_dtype = Tensor::zeros({1, 5}, DType::f32, gpu());
  const Tensor pos_cpu = Tensor::zeros({1, 5}, DType::i64);
  for (const Tensor* p : {&pos_shape, &pos_dtype}) {
    EXPECT_TRUE(test::throws_error_with(
        [&] { flash_attention_forward(out, lse, qkv, 2, 2, *p); },
        {"flash_attention_forward", "positions", "i32 or i64", "plain causal"}));
    const Tensor dqkv = Tensor::empty({1, 5, 3 * 128}, DType::bf16, gpu());
    EXPECT_TRUE(test::throws_error_with(
        [&] { flash_attention_backward(dqkv, out, qkv, out, lse, 2, 2, *p); },
        {"flash_attention_backward", "positions"}));
  }
  EXPECT_TRUE(
      test::throws_error_with([&] { flash_attention_forward(out, lse, qkv, 2, 2, pos_cpu); },
                              {"flash_attention_forward", "positions"}));
}

// ---- nn::CausalSelfAttention: fused vs math ----

struct ModulePass {
  Tensor y, dx;
  std::vector<Tensor> grads;
};

ModulePass module_pass(nn::AttentionKernel kernel, DType dt, bool checkpoint_like) {
  nn::manual_seed(7);
  nn::CausalSelfAttention attn(128, 2, kernel);  // D = 64
  attn.to(gpu());
  for (nn::Parameter* p : attn.parameters()) p->zero_grad();
  const Tensor x = test::random_tensor({2, 200, 128}, dt, 70).to(gpu());
  const Tensor dy = test::random_tensor({2, 200, 128}, dt, 71).to(gpu());
  ModulePass r;
  if (checkpoint_like) {  // what nn::Checkpoint does: a no-save forward, then recompute
    {
      nn::NoSaveScope no_save;
      r.y = attn.forward(x);
    }
    attn.forward_for_backward(x);
  } else {
    r.y = attn.forward(x);
  }
  r.dx = attn.backward(dy);
  for (nn::Parameter* p : attn.parameters()) r.grads.push_back(p->grad().to(Device::cpu()));
  return r;
}

void expect_module_close(const ModulePass& got, const ModulePass& want, DType dt) {
  const Tol tol = tolerance(dt);
  EXPECT_TRUE(close_rel(to_f32(got.y), to_f32(want.y), 3 * tol.out, "y"));
  EXPECT_TRUE(close_rel(to_f32(got.dx), to_f32(want.dx), 3 * tol.grad, "dx"));
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i)
    EXPECT_TRUE(close_rel(to_f32(got.grads[i]), to_f32(want.grads[i]), 3 * tol.grad,
                          ("parameter gradient " + std::to_string(i)).c_str()));
}

TEST(FlashAttentionGpu, ModuleFusedEqualsMathPath) {
  STOKER_REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const ModulePass math = module_pass(nn::AttentionKernel::math, dt, false);
    const ModulePass fused = module_pass(nn::AttentionKernel::fused, dt, false);
    expect_module_close(fused, math, dt);
    // The fused path really ran: its output differs from the math path's in some bits.
    EXPECT_FALSE(test::bit_identical(fused.y, math.y));
    const ModulePass fused_ckpt = module_pass(nn::AttentionKernel::fused, dt, true);
    EXPECT_TRUE(test::bit_identical(fused_ckpt.y, fused.y));
    EXPECT_TRUE(test::bit_identical(fused_ckpt.dx, fused.dx));
  }
}

TEST(FlashAttentionGpu, ModuleFollowsTheEnvironmentVariable) {
  STOKER_REQUIRE_GPU();
  const DType dt = DType::bf16;
  const char* old = std::getenv("STOKER_ATTENTION");
  const std::string saved = old ? old : "";
  ::unsetenv("STOKER_ATTENTION");
  const ModulePass unset = module_pass(nn::AttentionKernel::from_env, dt, false);
  const ModulePass math = module_pass(nn::AttentionKernel::math, dt, false);
  ::setenv("STOKER_ATTENTION", "math", 1);
  const ModulePass env_math = module_pass(nn::AttentionKernel::from_env, dt, false);
  ::setenv("STOKER_ATTENTION", "fused", 1);
  const ModulePass env_fused = module_pass(nn::AttentionKernel::from_env, dt, false);
  ::setenv("STOKER_ATTENTION", "flash", 1);
  EXPECT_TRUE(test::throws_error_with(
      [&] { module_pass(nn::AttentionKernel::from_env, dt, false); }, {"STOKER_ATTENTION"}));
  if (old)
    ::setenv("STOKER_ATTENTION", saved.c_str(), 1);
  else
    ::unsetenv("STOKER_ATTENTION");
  const ModulePass fused = module_pass(nn::AttentionKernel::fused, dt, false);
  EXPECT_TRUE(test::bit_identical(unset.y, fused.y)) << "unset means fused";
  EXPECT_TRUE(test::bit_identical(unset.dx, fused.dx));
  EXPECT_TRUE(test::bit_identical(env_math.y, math.y)) << "math from the environment";
  EXPECT_TRUE(test::bit_identical(env_math.dx, math.dx));
  EXPECT_TRUE(test::bit_identical(env_fused.y, fused.y)) << "fused from the environment";
  EXPECT_TRUE(test::bit_identical(env_fused.dx, fused.dx));
  expect_module_close(env_fused, math, dt);
}

}  // namespace
}  // namespace stoker::ops
