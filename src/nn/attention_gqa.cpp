// nn::GroupedQueryAttention (stoker/nn/attention.h): Llama's attention block, qkv_proj -> RoPE in
// place -> fused or math grouped-query attention (document-masked on request) -> o_proj; and the
// attention core choice both attention modules share (nn/attention_kernel.h).
//
// Why RoPE in place on the qkv_proj output: the core reads q and k rotated, and the backward
// needs only the positions (the inverse rotation of dqkv), so no unrotated copy is kept; the
// fused path saves that rotated qkv as its input, as CausalSelfAttention saves its qkv.
#include <fmt/format.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "nn/attention_kernel.h"
#include "ops/flash_attention.h"
#include "stoker/core/error.h"
#include "stoker/nn/attention.h"
#include "stoker/ops/attention.h"

namespace stoker::nn {

namespace detail {

AttentionKernel resolve_attention_kernel(AttentionKernel chosen, std::string_view who) {
  if (chosen != AttentionKernel::from_env) return chosen;
  const char* v = std::getenv("STOKER_ATTENTION");
  const std::string_view s = v ? v : "";
  if (s.empty() || s == "fused") return AttentionKernel::fused;
  if (s == "math") return AttentionKernel::math;
  STOKER_CHECK_HINT(false, "set STOKER_ATTENTION=fused or math, or unset it", who,
                    ": environment variable STOKER_ATTENTION is '", s,
                    "'; expected 'fused' or 'math'");
  return AttentionKernel::fused;
}

}  // namespace detail

namespace {

// The options with kv_heads, head_dim and rope.head_dim filled in, checked.
GroupedQueryAttentionOptions resolved(int64_t d_model, GroupedQueryAttentionOptions o) {
  const std::string who =
      fmt::format("GroupedQueryAttention(d_model={}, heads={}, kv_heads={}, head_dim={})", d_model,
                  o.heads, o.kv_heads, o.head_dim);
  STOKER_CHECK(d_model > 0 && o.heads > 0, who, ": d_model and heads must be positive");
  if (o.kv_heads == 0) o.kv_heads = o.heads;
  STOKER_CHECK(o.kv_heads > 0 && o.heads % o.kv_heads == 0, who,
               ": kv_heads must divide heads (each key/value head serves heads / kv_heads "
               "query heads; 0 means heads)");
  if (o.head_dim == 0) {
    STOKER_CHECK(d_model % o.heads == 0, who,
                 ": d_model is not a multiple of heads; give head_dim explicitly");
    o.head_dim = d_model / o.heads;
  }
  STOKER_CHECK(o.head_dim > 0, who, ": head_dim must be positive (0: d_model / heads)");
  STOKER_CHECK(!o.use_rope || o.head_dim % 2 == 0, who,
               ": RoPE needs an even head_dim (it rotates dimension i with i + head_dim / 2); "
               "use an even head_dim or use_rope = false");
  o.rope.head_dim = o.head_dim;
  return o;
}

}  // namespace

GroupedQueryAttention::GroupedQueryAttention(int64_t d_model, GroupedQueryAttentionOptions options)
    : d_model_(d_model), options_(resolved(d_model, options)) {
  const GroupedQueryAttentionOptions& o = options_;
  qkv_proj_ = &register_module(
      "qkv_proj",
      std::make_unique<Linear>(d_model, (o.heads + 2 * o.kv_heads) * o.head_dim, o.bias));
  o_proj_ =
      &register_module("o_proj", std::make_unique<Linear>(o.heads * o.head_dim, d_model, o.bias));
  if (o.use_rope) inv_freq_host_ = ops::rope_inverse_frequencies(o.rope);
}

void GroupedQueryAttention::set_positions(const Tensor& positions, bool document_mask) {
  STOKER_CHECK(positions.defined() || !document_mask, describe(),
               ": set_positions(undefined, document_mask = true): the document mask needs each "
               "token's position in its document; pass the batch's positions");
  STOKER_CHECK(!positions.defined() ||
                   ((positions.dtype() == DType::i32 || positions.dtype() == DType::i64) &&
                    positions.rank() == 2),
               describe(), ": positions is ", positions.str(),
               "; expected i32 or i64 [B, T] (each token's position in its document)");
  positions_ = positions;
  document_mask_ = document_mask;
}

const Tensor& GroupedQueryAttention::inv_freq() {
  if (!inv_freq_.defined() || inv_freq_.device() != device_)
    inv_freq_ =
        Tensor::from_vector(inv_freq_host_, {static_cast<int64_t>(inv_freq_host_.size())}, device_);
  return inv_freq_;
}

const Tensor& GroupedQueryAttention::default_positions(int64_t b, int64_t t) {
  if (!arange_.defined() || arange_.shape() != Shape{b, t} || arange_.device() != device_) {
    std::vector<int32_t> pos(static_cast<size_t>(b * t));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i % t);
    arange_ = Tensor::from_vector(pos, {b, t}, device_);
  }
  return arange_;
}

Tensor GroupedQueryAttention::attention(const Tensor& x) {
  STOKER_CHECK(x.defined() && x.rank() == 3 && x.size(2) == d_model_, describe(), ": input ",
               x.defined() ? x.str() : std::string("undefined"), " must be [B, T, ", d_model_, "]");
  STOKER_CHECK(x.device() == device_, describe(), " is on ", device_.str(), " but its input is ",
               x.str(), "; move the model with .to(device) or the batch with Tensor::to");
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t h = options_.heads, kv = options_.kv_heads, d = options_.head_dim;
  const bool positions_fit = !positions_.defined() ||
                             (positions_.shape() == Shape{b, t} && positions_.device() == device_);
  STOKER_CHECK(positions_fit, describe(), ": positions ", positions_.str(),
               " do not fit the input ", x.str(), "; expected [", b, ", ", t, "] on ",
               device_.str(),
               " — call set_positions with this batch's positions (or an undefined tensor for "
               "0..T-1)");
  const Tensor rope_pos = positions_.defined() ? positions_ : default_positions(b, t);
  const Tensor mask_pos = document_mask_ ? positions_ : Tensor();
  const Tensor qkv = qkv_proj_->forward(x);
  if (options_.use_rope) ops::rope_qkv_forward(qkv, rope_pos, inv_freq(), h, kv);
  Tensor a = Tensor::empty({b, t, h * d}, x.dtype(), device_);
  qkv_heads_ = probs_ = qkv_out_ = attn_out_ = lse_ = rope_pos_ = mask_pos_ = Tensor();
  const bool fused = detail::resolve_attention_kernel(options_.kernel, "GroupedQueryAttention") ==
                         AttentionKernel::fused &&
                     ops::flash_attention_supported(qkv, h, kv);
  if (fused) {
    Tensor lse = Tensor::empty({b, h, t}, DType::f32, device_);
    ops::flash_attention_forward(a, lse, qkv, h, kv, mask_pos);
    if (saving_activations()) {  // else inside a Checkpoint's forward: keep nothing
      qkv_out_ = qkv;
      attn_out_ = a;
      lse_ = std::move(lse);
    }
  } else {
    Tensor heads = Tensor::empty({3, b, h, t, d}, x.dtype(), device_);
    Tensor probs = Tensor::empty({b, h, t, t}, x.dtype(), device_);
    ops::attention_forward(a, heads, probs, qkv, h, kv, mask_pos);
    if (saving_activations()) {
      qkv_heads_ = std::move(heads);
      probs_ = std::move(probs);
    }
  }
  if (saving_activations()) {
    rope_pos_ = rope_pos;
    mask_pos_ = mask_pos;
  }
  return a;
}

Tensor GroupedQueryAttention::forward(const Tensor& x) { return o_proj_->forward(attention(x)); }

void GroupedQueryAttention::forward_for_backward(const Tensor& x) {
  if (!saving_activations()) return;  // forward would keep nothing, and the output is not needed
  o_proj_->forward_for_backward(attention(x));
}

Tensor GroupedQueryAttention::backward(const Tensor& dy) {
  STOKER_CHECK(lse_.defined() || (qkv_heads_.defined() && probs_.defined()), describe(),
               ": backward called before forward (or after a forward that saved nothing)");
  const int64_t h = options_.heads, kv = options_.kv_heads;
  const Tensor da = o_proj_->backward(dy);
  Tensor dqkv;
  if (lse_.defined()) {  // the forward ran the fused kernels
    dqkv = Tensor::empty(qkv_out_.shape(), da.dtype(), device_);
    ops::flash_attention_backward(dqkv, da, qkv_out_, attn_out_, lse_, h, kv, mask_pos_);
  } else {
    dqkv = Tensor::empty({qkv_heads_.size(1), qkv_heads_.size(3), (h + 2 * kv) * head_dim()},
                         da.dtype(), device_);
    ops::attention_backward(dqkv, da, qkv_heads_, probs_, h, kv, mask_pos_);
  }
  // Consumed: P, the per-head q, k, v (or the fused path's qkv) are freed before qkv_proj's
  // backward.
  qkv_heads_ = probs_ = qkv_out_ = attn_out_ = lse_ = Tensor();
  if (options_.use_rope) ops::rope_qkv_backward(dqkv, rope_pos_, inv_freq(), h, kv);
  rope_pos_ = mask_pos_ = Tensor();
  return qkv_proj_->backward(dqkv);
}

std::string GroupedQueryAttention::describe() const {
  return fmt::format("GroupedQueryAttention(d_model={}, heads={}, kv_heads={}, head_dim={})",
                     d_model_, options_.heads, options_.kv_heads, options_.head_dim);
}

}  // namespace stoker::nn
