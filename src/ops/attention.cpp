// Public attention_forward / attention_backward: validation, then the same composition on every
// device — head permutations, batched GEMMs (ops::gemm_batched) and the fused causal softmax
// kernels (ops/attention_stubs.h).
//
// Why this design (the unfused "math" attention) rather than a flash-attention kernel: it is
// built from pieces that each have a simple CPU reference and a GPU test, the GEMMs run at
// cuBLASLt's speed, and the backward needs no recomputation. What it costs is memory traffic
// on the T x T matrices: the forward writes S, reads it and writes P in place (causal rows are
// read only up to the diagonal), the backward writes dP, reads it with P and writes dS in place.
// At GPT-2 124M's B = 16, T = 1024 that is ~0.4 GB per pass in bf16, a few hundred microseconds
// per layer on an H200 next to ~0.15 ms of attention GEMMs: a fused kernel would save most of
// it, and is the next step if attention shows up in the profile.
//
// Why permute into [3, B, H, T, D]: the per-head matrices of the packed qkv [B, T, 3, H, D]
// are not one uniform stride apart (batch stride T*3C, head stride D), and a strided-batched
// GEMM needs one. One pass over 3BTC elements makes q, k and v contiguous [B*H, T, D] batches,
// and the permuted tensor is what the forward saves, so the backward needs no second pass.
//
// Precision: S and dP are rounded to the compute dtype once (as PyTorch's unfused path does);
// the softmax and its backward read them in fp32, with fp32 row statistics.
//
// Grouped-query attention (KV < H key/value heads) is the unfused composition transformers'
// eager Llama runs (repeat_kv): the permutation expands each key/value head to the H / KV query
// heads of its group, the multi-head math runs unchanged, and the inverse permutation sums the
// group's dK and dV rows (fp32, rounded once). It costs the expanded copies (2BTC instead of
// 2BTC * KV / H) and is meant as the reference and fallback of the fused kernel, not its rival.
// The document mask only narrows each softmax row to its visible keys, so plain causal
// attention (undefined positions) runs exactly the code and bits it ran before.
#include "stoker/ops/attention.h"

#include <cmath>

#include "ops/attention_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

namespace {

struct Dims {
  int64_t b, t, h, kv, d;
  int64_t c() const { return h * d; }               // attention output width
  int64_t qkv() const { return (h + 2 * kv) * d; }  // packed qkv width
};

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& ref,
                const char* ref_name, const Shape& expected, const char* what) {
  detail::check_float(op, name, t);
  detail::check_same_device(op, ref_name, ref, name, t);
  detail::check_same_dtype(op, ref_name, ref, name, t);
  STOKER_CHECK(t.shape() == expected, "ops::", op, ": ", name, " is ", t.str(), "; expected ",
               expected, " (", what, ")");
}

void check_seq_len(const char* op, const Tensor& t, int64_t seq) {
  if (!t.device().is_cuda()) return;
  STOKER_CHECK_HINT(seq <= kAttentionMaxSeqLenCuda,
                    "use a shorter context, or run attention on the CPU", "ops::", op,
                    ": sequence length T = ", seq, " exceeds the CUDA kernels' limit ",
                    kAttentionMaxSeqLenCuda, " (each softmax row is held in one warp's registers)");
}

// num_kv_heads (0: num_heads) resolved and checked against num_heads.
int64_t kv_heads(const char* op, int64_t num_heads, int64_t num_kv_heads) {
  const int64_t kv = num_kv_heads == 0 ? num_heads : num_kv_heads;
  STOKER_CHECK(num_heads > 0 && kv > 0 && num_heads % kv == 0, "ops::", op,
               ": num_heads = ", num_heads, " and num_kv_heads = ", num_kv_heads,
               " must be positive with num_kv_heads dividing num_heads (grouped-query attention: "
               "query head h uses key/value head h / (num_heads / num_kv_heads); 0 means "
               "num_heads)");
  return kv;
}

// positions: undefined, or one i32/i64 document position per token [B, T] on `ref`'s device.
void check_positions(const char* op, const Tensor& positions, const Tensor& ref,
                     const char* ref_name, const Dims& s) {
  if (!positions.defined()) return;
  const bool ok = (positions.dtype() == DType::i32 || positions.dtype() == DType::i64) &&
                  positions.shape() == Shape{s.b, s.t} && positions.device() == ref.device();
  STOKER_CHECK(ok, "ops::", op, ": positions is ", positions.str(), " for ", ref_name, " ",
               ref.str(), "; expected i32 or i64 [B, T] = [", s.b, ", ", s.t, "] on ",
               ref.device().str(),
               " (each token's position in its document, 0 at its first token), or an "
               "undefined tensor for plain causal attention");
}

float softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// The g-th [B*H, T, D] batch of a [3, B, H, T, D] tensor.
Tensor group(const Tensor& heads, int64_t g, const Dims& s) {
  return heads.slice(g, g + 1).reshape({s.b * s.h, s.t, s.d});
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& heads, const Tensor& probs,
                       const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads,
                       const Tensor& positions) {
  const char* op = "attention_forward";
  detail::check_float(op, "qkv", qkv);
  detail::check_backend(op, qkv);
  const int64_t kv = kv_heads(op, num_heads, num_kv_heads);
  const int64_t slots = num_heads + 2 * kv;
  STOKER_CHECK(qkv.rank() == 3 && qkv.size(2) > 0 && qkv.size(2) % slots == 0, "ops::", op,
               ": qkv is ", qkv.str(), "; its last dimension is not divisible into ", num_heads,
               " heads + 2 x ", kv, " key/value heads of one head dim D (expected [B, T, (",
               num_heads, " + 2 * ", kv,
               ") * D]: per token the query, key and value heads side by side); choose head "
               "counts that divide the model width");
  const Dims s{qkv.size(0), qkv.size(1), num_heads, kv, qkv.size(2) / slots};
  check_like(op, "out", out, qkv, "qkv", {s.b, s.t, s.c()}, "[B, T, H * D]");
  check_like(op, "heads", heads, qkv, "qkv", {3, s.b, s.h, s.t, s.d}, "[3, B, H, T, D]");
  check_like(op, "probs", probs, qkv, "qkv", {s.b, s.h, s.t, s.t}, "[B, H, T, T]");
  check_positions(op, positions, qkv, "qkv", s);
  check_seq_len(op, qkv, s.t);
  if (qkv.numel() == 0) return;
  const Device dev = qkv.device();
  heads_from_tokens_stub(dev, heads, qkv, s.b, s.t, 3, s.h, s.kv, s.d);
  const Tensor q = group(heads, 0, s), k = group(heads, 1, s), v = group(heads, 2, s);
  const Tensor p = probs.reshape({s.b * s.h, s.t, s.t});
  gemm_batched(p, q, k, {.trans_b = true, .alpha = softmax_scale(s.d)});  // S, scaled
  causal_softmax_forward_stub(dev, p, p, s.t, positions, s.h);            // P over S
  const Tensor o = Tensor::empty({s.b * s.h, s.t, s.d}, qkv.dtype(), dev);
  gemm_batched(o, p, v);
  tokens_from_heads_stub(dev, out, o, s.b, s.t, 1, s.h, s.h, s.d);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& heads,
                        const Tensor& probs, int64_t num_heads, int64_t num_kv_heads,
                        const Tensor& positions) {
  const char* op = "attention_backward";
  detail::check_float(op, "heads", heads);
  detail::check_backend(op, heads);
  STOKER_CHECK(heads.rank() == 5 && heads.size(0) == 3, "ops::", op, ": heads is ", heads.str(),
               "; expected the forward's [3, B, H, T, D]");
  STOKER_CHECK(num_heads == 0 || num_heads == heads.size(2), "ops::", op,
               ": num_heads = ", num_heads, " but heads ", heads.str(), " holds ", heads.size(2),
               " heads; pass the forward's num_heads (or 0)");
  const int64_t h = heads.size(2);
  const Dims s{heads.size(1), heads.size(3), h, kv_heads(op, h, num_kv_heads), heads.size(4)};
  check_like(op, "probs", probs, heads, "heads", {s.b, s.h, s.t, s.t},
             "the forward's [B, H, T, T]");
  check_like(op, "dout", dout, heads, "heads", {s.b, s.t, s.c()}, "[B, T, H * D]");
  check_like(op, "dqkv", dqkv, heads, "heads", {s.b, s.t, s.qkv()},
             "[B, T, (H + 2 KV) * D], KV = num_kv_heads (0: H)");
  check_positions(op, positions, heads, "heads", s);
  check_seq_len(op, heads, s.t);
  if (dqkv.numel() == 0) return;
  const Device dev = heads.device();
  const DType dt = heads.dtype();
  const Tensor q = group(heads, 0, s), k = group(heads, 1, s), v = group(heads, 2, s);
  const Tensor p = probs.reshape({s.b * s.h, s.t, s.t});
  const Tensor dgrads = Tensor::empty({3, s.b, s.h, s.t, s.d}, dt, dev);
  const Tensor dq = group(dgrads, 0, s), dk = group(dgrads, 1, s), dv = group(dgrads, 2, s);
  const Tensor ds = Tensor::empty({s.b * s.h, s.t, s.t}, dt, dev);
  {
    const Tensor d_o = Tensor::empty({s.b * s.h, s.t, s.d}, dt, dev);
    heads_from_tokens_stub(dev, d_o, dout, s.b, s.t, 1, s.h, s.h, s.d);
    gemm_batched(dv, p, d_o, {.trans_a = true});  // dV = P^T dO
    gemm_batched(ds, d_o, v, {.trans_b = true});  // dP = dO V^T
  }
  causal_softmax_backward_stub(dev, ds, ds, p, s.t, softmax_scale(s.d), positions,
                               s.h);                                       // dS over dP
  gemm_batched(dq, ds, k);                                                 // dQ = dS K
  gemm_batched(dk, ds, q, {.trans_a = true});                              // dK = dS^T Q
  tokens_from_heads_stub(dev, dqkv, dgrads, s.b, s.t, 3, s.h, s.kv, s.d);  // sums kv groups
}

}  // namespace stoker::ops
