// Public rope_inverse_frequencies (host arithmetic) and rope_qkv_forward / rope_qkv_backward
// (ops/attention.h): validation, then dispatch.
//
// The inverse frequencies follow transformers' float32 tensor arithmetic operation by operation
// (modeling_rope_utils.py, run on the CPU when a model is built): each step below is one torch
// op, rounded to float32 as it rounds it. `scalar / tensor` is torch's reciprocal(tensor) *
// scalar (Tensor.__rtruediv__), so it is written that way. theta ** (2i / D) is powf; torch
// evaluates it with SLEEF's 1-ulp powf, which pow in double rounded to float matched for head
// dims 64 and 128 at rope_theta 1e4 and 5e5 (tests/ops/llama_reference.py's fixture), where
// glibc's and numpy's float32 pow differ from it in several places.
#include <cmath>
#include <numbers>
#include <vector>

#include "ops/rope_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/attention.h"

namespace stoker::ops {

std::vector<float> rope_inverse_frequencies(const RopeOptions& o) {
  STOKER_CHECK(o.head_dim > 0 && o.head_dim % 2 == 0,
               "rope_inverse_frequencies: head_dim = ", o.head_dim,
               " must be positive and even (rotate-half pairs dimension i with i + D/2)");
  STOKER_CHECK(o.theta > 0.0 && std::isfinite(o.theta),
               "rope_inverse_frequencies: rope_theta = ", o.theta, " must be finite and positive");
  if (o.llama3_scaling) {
    STOKER_CHECK(o.factor > 0.0 && std::isfinite(o.factor),
                 "rope_inverse_frequencies: llama3 factor = ", o.factor,
                 " must be finite and positive (Llama 3.1 uses 8, Llama 3.2 32)");
    STOKER_CHECK(o.low_freq_factor > 0.0 && o.high_freq_factor > o.low_freq_factor &&
                     std::isfinite(o.high_freq_factor),
                 "rope_inverse_frequencies: llama3 low_freq_factor = ", o.low_freq_factor,
                 " and high_freq_factor = ", o.high_freq_factor,
                 " must satisfy 0 < low < high (Llama 3 uses 1 and 4)");
    STOKER_CHECK(o.original_max_position_embeddings > 0,
                 "rope_inverse_frequencies: llama3 original_max_position_embeddings = ",
                 o.original_max_position_embeddings, " must be positive (Llama 3 uses 8192)");
  }
  const int64_t half = o.head_dim / 2;
  const float base = static_cast<float>(o.theta);
  const float dim = static_cast<float>(o.head_dim);
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / dim;  // arange(0, dim, 2).float() / dim
    const float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }
  if (!o.llama3_scaling) return inv;
  const double old_len = static_cast<double>(o.original_max_position_embeddings);
  // Python floats, compared with (or dividing) a float32 tensor as float32 scalars.
  const float low_wavelen = static_cast<float>(old_len / o.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / o.high_freq_factor);
  const float factor = static_cast<float>(o.factor);
  const float low = static_cast<float>(o.low_freq_factor);
  const float span = static_cast<float>(o.high_freq_factor - o.low_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;  // 2 * math.pi / inv_freq
    const float llama = wavelen > low_wavelen ? f / factor : f;
    const float ratio = (1.0f / wavelen) * static_cast<float>(old_len);  // old_len / wavelen
    const float smooth = (ratio - low) / span;
    const float one_minus = 1.0f - smooth;
    const float a = (one_minus * llama) / factor;
    const float b = smooth * llama;
    const float smoothed = a + b;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : llama;
  }
  return inv;
}

namespace {
void check_rope(const char* op, const char* name, const Tensor& qkv, const Tensor& positions,
                const Tensor& inv_freq, int64_t num_heads, int64_t num_kv_heads) {
  detail::check_float(op, name, qkv);
  detail::check_backend(op, qkv);
  STOKER_CHECK(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0, "ops::", op,
               ": num_heads = ", num_heads, " and num_kv_heads = ", num_kv_heads,
               " must be positive, num_heads a multiple of num_kv_heads (grouped-query attention)");
  const int64_t heads = num_heads + 2 * num_kv_heads;
  STOKER_CHECK(qkv.rank() >= 1 && qkv.size(-1) % heads == 0 && (qkv.size(-1) / heads) % 2 == 0 &&
                   qkv.size(-1) > 0,
               "ops::", op, ": ", name, " is ", qkv.str(), "; expected [..., (", num_heads,
               " + 2 * ", num_kv_heads,
               ") * D] (query, key and value heads of an even head dim D)");
  const int64_t d = qkv.size(-1) / heads;
  detail::check_defined(op, "inv_freq", inv_freq);
  detail::check_same_device(op, name, qkv, "inv_freq", inv_freq);
  STOKER_CHECK(inv_freq.dtype() == DType::f32 && inv_freq.rank() == 1 && inv_freq.size(0) == d / 2,
               "ops::", op, ": inv_freq is ", inv_freq.str(), " for head dim ", d,
               "; expected f32[", d / 2, "] (rope_inverse_frequencies with head_dim = ", d, ")");
  detail::check_defined(op, "positions", positions);
  detail::check_same_device(op, name, qkv, "positions", positions);
  const int64_t tokens = qkv.numel() / qkv.size(-1);
  STOKER_CHECK((positions.dtype() == DType::i32 || positions.dtype() == DType::i64) &&
                   positions.numel() == tokens,
               "ops::", op, ": positions is ", positions.str(), " for ", name, " ", qkv.str(),
               "; expected i32 or i64 with one position per token (", tokens, ")");
}
}  // namespace

void rope_qkv_forward(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                      int64_t num_heads, int64_t num_kv_heads) {
  check_rope("rope_qkv_forward", "qkv", qkv, positions, inv_freq, num_heads, num_kv_heads);
  if (qkv.numel() > 0)
    rope_qkv_stub(qkv.device(), qkv, positions, inv_freq, num_heads, num_kv_heads, 1.0f);
}

void rope_qkv_backward(const Tensor& dqkv, const Tensor& positions, const Tensor& inv_freq,
                       int64_t num_heads, int64_t num_kv_heads) {
  check_rope("rope_qkv_backward", "dqkv", dqkv, positions, inv_freq, num_heads, num_kv_heads);
  if (dqkv.numel() > 0)
    rope_qkv_stub(dqkv.device(), dqkv, positions, inv_freq, num_heads, num_kv_heads, -1.0f);
}

}  // namespace stoker::ops
