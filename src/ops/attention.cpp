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
#include "stoker/ops/attention.h"

#include <cmath>

#include "ops/attention_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

namespace {

struct Dims {
  int64_t b, t, h, d;
  int64_t c() const { return h * d; }
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

float softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// The g-th [B*H, T, D] batch of a [3, B, H, T, D] tensor.
Tensor group(const Tensor& heads, int64_t g, const Dims& s) {
  return heads.slice(g, g + 1).reshape({s.b * s.h, s.t, s.d});
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& heads, const Tensor& probs,
                       const Tensor& qkv, int64_t num_heads) {
  const char* op = "attention_forward";
  detail::check_float(op, "qkv", qkv);
  detail::check_backend(op, qkv);
  STOKER_CHECK(qkv.rank() == 3 && qkv.size(2) % 3 == 0, "ops::", op, ": qkv is ", qkv.str(),
               "; expected [B, T, 3C] (q, k, v of C features per token, side by side)");
  const int64_t c = qkv.size(2) / 3;
  STOKER_CHECK(num_heads > 0 && c % num_heads == 0 && c > 0, "ops::", op, ": C = ", c, " (qkv ",
               qkv.str(), ") is not divisible into ", num_heads,
               " heads; choose a head count that divides the model width");
  const Dims s{qkv.size(0), qkv.size(1), num_heads, c / num_heads};
  check_like(op, "out", out, qkv, "qkv", {s.b, s.t, c}, "[B, T, C]");
  check_like(op, "heads", heads, qkv, "qkv", {3, s.b, s.h, s.t, s.d}, "[3, B, H, T, D]");
  check_like(op, "probs", probs, qkv, "qkv", {s.b, s.h, s.t, s.t}, "[B, H, T, T]");
  check_seq_len(op, qkv, s.t);
  if (qkv.numel() == 0) return;
  const Device dev = qkv.device();
  heads_from_tokens_stub(dev, heads, qkv, s.b, s.t, 3, s.h, s.d);
  const Tensor q = group(heads, 0, s), k = group(heads, 1, s), v = group(heads, 2, s);
  const Tensor p = probs.reshape({s.b * s.h, s.t, s.t});
  gemm_batched(p, q, k, {.trans_b = true, .alpha = softmax_scale(s.d)});  // S, scaled
  causal_softmax_forward_stub(dev, p, p, s.t);                            // P over S
  const Tensor o = Tensor::empty({s.b * s.h, s.t, s.d}, qkv.dtype(), dev);
  gemm_batched(o, p, v);
  tokens_from_heads_stub(dev, out, o, s.b, s.t, 1, s.h, s.d);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& heads,
                        const Tensor& probs) {
  const char* op = "attention_backward";
  detail::check_float(op, "heads", heads);
  detail::check_backend(op, heads);
  STOKER_CHECK(heads.rank() == 5 && heads.size(0) == 3, "ops::", op, ": heads is ", heads.str(),
               "; expected the forward's [3, B, H, T, D]");
  const Dims s{heads.size(1), heads.size(3), heads.size(2), heads.size(4)};
  const int64_t c = s.c();
  check_like(op, "probs", probs, heads, "heads", {s.b, s.h, s.t, s.t},
             "the forward's [B, H, T, T]");
  check_like(op, "dout", dout, heads, "heads", {s.b, s.t, c}, "[B, T, C]");
  check_like(op, "dqkv", dqkv, heads, "heads", {s.b, s.t, 3 * c}, "[B, T, 3C]");
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
    heads_from_tokens_stub(dev, d_o, dout, s.b, s.t, 1, s.h, s.d);
    gemm_batched(dv, p, d_o, {.trans_a = true});  // dV = P^T dO
    gemm_batched(ds, d_o, v, {.trans_b = true});  // dP = dO V^T
  }
  causal_softmax_backward_stub(dev, ds, ds, p, s.t, softmax_scale(s.d));  // dS over dP
  gemm_batched(dq, ds, k);                                                // dQ = dS K
  gemm_batched(dk, ds, q, {.trans_a = true});                             // dK = dS^T Q
  tokens_from_heads_stub(dev, dqkv, dgrads, s.b, s.t, 3, s.h, s.d);
}

}  // namespace stoker::ops
