#include "stoker/nn/attention.h"

#include <fmt/format.h>

#include "nn/attention_kernel.h"
#include "ops/flash_attention.h"
#include "stoker/core/error.h"
#include "stoker/ops/attention.h"

namespace stoker::nn {

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t heads, AttentionKernel kernel)
    : d_model_(d_model), heads_(heads), kernel_(kernel) {
  STOKER_CHECK(d_model > 0 && heads > 0 && d_model % heads == 0,
               "CausalSelfAttention(d_model=", d_model, ", heads=", heads,
               "): d_model must be a positive multiple of the (positive) head count");
  qkv_ = &register_module("qkv", std::make_unique<Linear>(d_model, 3 * d_model));
  proj_ = &register_module("proj", std::make_unique<Linear>(d_model, d_model));
}

Tensor CausalSelfAttention::attention(const Tensor& x) {
  STOKER_CHECK(x.defined() && x.rank() == 3 && x.size(2) == d_model_, describe(), ": input ",
               x.defined() ? x.str() : std::string("undefined"), " must be [B, T, ", d_model_, "]");
  STOKER_CHECK(x.device() == device_, describe(), " is on ", device_.str(), " but its input is ",
               x.str(), "; move the model with .to(device) or the batch with Tensor::to");
  const Tensor qkv = qkv_->forward(x);
  const int64_t b = x.size(0), t = x.size(1), d = d_model_ / heads_;
  Tensor a = Tensor::empty({b, t, d_model_}, x.dtype(), device_);
  qkv_heads_ = probs_ = qkv_out_ = attn_out_ = lse_ = Tensor();
  if (use_fused(qkv)) {
    Tensor lse = Tensor::empty({b, heads_, t}, DType::f32, device_);
    ops::flash_attention_forward(a, lse, qkv, heads_, heads_);
    if (saving_activations()) {  // else inside a Checkpoint's forward: keep nothing
      qkv_out_ = qkv;
      attn_out_ = a;
      lse_ = std::move(lse);
    }
    return a;
  }
  Tensor heads = Tensor::empty({3, b, heads_, t, d}, x.dtype(), device_);
  Tensor probs = Tensor::empty({b, heads_, t, t}, x.dtype(), device_);
  ops::attention_forward(a, heads, probs, qkv, heads_);
  if (saving_activations()) {
    qkv_heads_ = std::move(heads);
    probs_ = std::move(probs);
  } else {  // inside a Checkpoint's forward: keep nothing
    qkv_heads_ = Tensor();
    probs_ = Tensor();
  }
  return a;
}

bool CausalSelfAttention::use_fused(const Tensor& qkv) const {
  const AttentionKernel k = detail::resolve_attention_kernel(kernel_, "CausalSelfAttention");
  return k == AttentionKernel::fused && ops::flash_attention_supported(qkv, heads_, heads_);
}

Tensor CausalSelfAttention::forward(const Tensor& x) { return proj_->forward(attention(x)); }

void CausalSelfAttention::forward_for_backward(const Tensor& x) {
  if (!saving_activations()) return;  // forward would keep nothing, and the output is not needed
  proj_->forward_for_backward(attention(x));
}

Tensor CausalSelfAttention::backward(const Tensor& dy) {
  if (lse_.defined()) {  // the forward ran the fused kernels
    const Tensor da = proj_->backward(dy);
    Tensor dqkv = Tensor::empty(qkv_out_.shape(), da.dtype(), device_);
    ops::flash_attention_backward(dqkv, da, qkv_out_, attn_out_, lse_, heads_, heads_);
    qkv_out_ = attn_out_ = lse_ = Tensor();
    return qkv_->backward(dqkv);
  }
  STOKER_CHECK(qkv_heads_.defined() && probs_.defined(), describe(),
               ": backward called before forward (or after a forward that saved nothing)");
  const Tensor da = proj_->backward(dy);
  Tensor dqkv =
      Tensor::empty({qkv_heads_.size(1), qkv_heads_.size(3), 3 * d_model_}, da.dtype(), device_);
  ops::attention_backward(dqkv, da, qkv_heads_, probs_);
  qkv_heads_ = Tensor();  // consumed: P and the per-head q, k, v are freed before the qkv backward
  probs_ = Tensor();
  return qkv_->backward(dqkv);
}

std::string CausalSelfAttention::describe() const {
  return fmt::format("CausalSelfAttention(d_model={}, heads={})", d_model_, heads_);
}

}  // namespace stoker::nn
