// The Llama model of examples/llm: stock nn layers (nn::RMSNorm, nn::GroupedQueryAttention,
// nn::SwiGLU, nn::Embedding, nn::Linear) wired as transformers' LlamaForCausalLM, plus the head
// (its own Linear weight or the embedding's, applied here or by the loss).
#include "llama_model.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"

namespace stoker::llm {

namespace {

// Llama 3.2's rope_scaling: {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
// "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, rope_theta 500000.
ops::RopeOptions llama32_rope(int64_t head_dim) {
  return {.head_dim = head_dim,
          .theta = 500000.0,
          .llama3_scaling = true,
          .factor = 32.0,
          .low_freq_factor = 1.0,
          .high_freq_factor = 4.0,
          .original_max_position_embeddings = 8192};
}

}  // namespace

LlamaConfig LlamaConfig::preset(const std::string& name) {
  LlamaConfig c;
  if (name == "llama3-debug") {
    c.rope = {.head_dim = c.head_dim, .theta = 500000.0};
    c.bos_id = 1;  // the bundled text's SentencePiece ids: <s> 1, </s> 2
    c.eos_id = 2;
    return c;
  }
  if (name == "llama3.2-1b" || name == "llama3.2-3b") {
    const bool one = name == "llama3.2-1b";
    c = {.vocab = 128256,
         .d_model = one ? 2048 : 3072,
         .layers = one ? 16 : 28,
         .heads = one ? 32 : 24,
         .kv_heads = 8,
         .head_dim = one ? 64 : 128,
         .ffn = 8192,
         .context = 131072,
         .tie_embeddings = true};
    c.rope = llama32_rope(c.head_dim);
    return c;
  }
  if (name == "llama3-8b") {
    c = {.vocab = 128256,
         .d_model = 4096,
         .layers = 32,
         .heads = 32,
         .kv_heads = 8,
         .head_dim = 128,
         .ffn = 14336,
         .context = 8192,
         .tie_embeddings = false};
    c.rope = {.head_dim = 128, .theta = 500000.0};
    return c;
  }
  STOKER_THROW("LlamaConfig::preset: unknown preset '", name,
               "' (known: ", fmt::format("{}", fmt::join(preset_names(), ", ")), ")");
}

std::vector<std::string> LlamaConfig::preset_names() {
  return {"llama3-debug", "llama3.2-1b", "llama3.2-3b", "llama3-8b"};
}

std::string LlamaConfig::str() const {
  return fmt::format("V={} C={} L={} H={} KV={} D={} F={} T={} {}", vocab, d_model, layers, heads,
                     kv_heads, head_dim, ffn, context, tie_embeddings ? "tied" : "untied");
}

int64_t LlamaConfig::parameter_count() const {
  const int64_t attn = d_model * (heads + 2 * kv_heads) * head_dim + heads * head_dim * d_model;
  const int64_t mlp = 3 * d_model * ffn;
  const int64_t block = attn + mlp + 2 * d_model;
  return vocab * d_model * (tie_embeddings ? 1 : 2) + layers * block + d_model;
}

// -------------------------------------------------------------------------------- LlamaBlock

LlamaBlock::LlamaBlock(const LlamaConfig& c) {
  input_layernorm_ =
      &register_module("input_layernorm", nn::make<nn::RMSNorm>(c.d_model, c.rms_eps));
  ops::RopeOptions rope = c.rope;
  rope.head_dim = c.head_dim;
  self_attn_ = &register_module(
      "self_attn", nn::make<nn::GroupedQueryAttention>(
                       c.d_model, nn::GroupedQueryAttentionOptions{.heads = c.heads,
                                                                   .kv_heads = c.kv_heads,
                                                                   .head_dim = c.head_dim,
                                                                   .bias = false,
                                                                   .rope = rope,
                                                                   .use_rope = true}));
  post_attention_layernorm_ =
      &register_module("post_attention_layernorm", nn::make<nn::RMSNorm>(c.d_model, c.rms_eps));
  mlp_ = &register_module("mlp", nn::make<nn::SwiGLU>(c.d_model, c.ffn));
}

Tensor LlamaBlock::attention_half(const Tensor& x, Tensor* h) {
  Tensor a = self_attn_->forward(input_layernorm_->forward(x));
  // The attention's output is kept by nobody, so the residual add may overwrite it; the norm
  // keeps h for its backward.
  const core::ModuleScope scope("post_attention_layernorm");
  *h = a;
  return post_attention_layernorm_->forward_add(a, x, a);
}

Tensor LlamaBlock::forward(const Tensor& x) {
  Tensor h;
  const Tensor z = attention_half(x, &h);
  Tensor y = mlp_->forward(z);  // down_proj's output: kept by nobody
  ops::add(y, y, h);
  return y;
}

void LlamaBlock::forward_for_backward(const Tensor& x) {
  Tensor h;
  mlp_->forward_for_backward(attention_half(x, &h));
}

Tensor LlamaBlock::backward(const Tensor& dy) {
  Tensor dz = mlp_->backward(dy);
  // dL/dh = dy + norm'(h)^T mlp'(z)^T dy in one pass, into dz (kept by nobody).
  Tensor dh;
  {
    const core::ModuleScope scope("post_attention_layernorm");
    dh = post_attention_layernorm_->backward_add(dz, dy, dz);
  }
  Tensor dx = input_layernorm_->backward(self_attn_->backward(dh));
  ops::add(dx, dx, dh);
  return dx;
}

std::string LlamaBlock::describe() const { return "LlamaBlock"; }

// ------------------------------------------------------------------------------------- Llama

Llama::Llama(LlamaConfig config) : config_(config) {
  const LlamaConfig& c = config_;
  STOKER_CHECK(c.vocab > 0 && c.d_model > 0 && c.layers > 0 && c.heads > 0 && c.kv_heads > 0 &&
                   c.head_dim > 0 && c.ffn > 0 && c.context > 0,
               "Llama: every size must be positive, got ", c.str());
  STOKER_CHECK(c.heads % c.kv_heads == 0, "Llama: num_key_value_heads ", c.kv_heads,
               " must divide num_attention_heads ", c.heads);
  STOKER_CHECK(c.head_dim % 2 == 0, "Llama: head_dim ", c.head_dim,
               " must be even (rotary embeddings rotate pairs)");
  STOKER_CHECK(c.rms_eps > 0.0f && c.init_std > 0.0f, "Llama: rms_norm_eps ", c.rms_eps,
               " and initializer_range ", c.init_std, " must be positive");
  embed_tokens_ = &register_module("embed_tokens", nn::make<nn::Embedding>(c.vocab, c.d_model));
  layers_ = &register_module("layers", nn::make<nn::Sequential>());
  for (int64_t l = 0; l < c.layers; ++l) {
    auto block = nn::make<LlamaBlock>(c);
    blocks_.push_back(block.get());
    layers_->add(std::move(block));
  }
  norm_ = &register_module("norm", nn::make<nn::RMSNorm>(c.d_model, c.rms_eps));
  if (!c.tie_embeddings)
    lm_head_ = &register_module("lm_head", nn::make<nn::Linear>(c.d_model, c.vocab, false));

  // transformers' LlamaPreTrainedModel._init_weights: Linear and Embedding N(0, std), RMSNorm 1;
  // redrawn in parameter order so a seed fixes the model.
  visit_parameters("", [&](const std::string& name, nn::Parameter& p) {
    if (p.shape().rank() == 1) return;  // the RMSNorm weights keep their 1
    p.set_value(nn::init_normal(p.shape(), c.init_std));
  });
}

LlamaBlock& Llama::layer(int64_t l) {
  STOKER_CHECK(l >= 0 && l < static_cast<int64_t>(blocks_.size()), describe(), ": no layer ", l);
  return *blocks_[static_cast<size_t>(l)];
}

nn::Parameter& Llama::head_weight() {
  return lm_head_ ? lm_head_->weight() : embed_tokens_->weight();
}

void Llama::set_positions(const Tensor& positions, bool document_mask) {
  for (LlamaBlock* b : blocks_) b->self_attn().set_positions(positions, document_mask);
}

Tensor Llama::forward(const Tensor& ids) {
  STOKER_CHECK(
      ids.defined() && ids.rank() == 2 && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64),
      describe(), ": ids must be [B, T] i32 or i64, got ",
      ids.defined() ? ids.str() : std::string("undefined"));
  STOKER_CHECK(ids.size(1) <= config_.context, describe(), ": ", ids.size(1),
               " tokens per row is more than max_position_embeddings ", config_.context,
               "; pass windows of at most that many");
  STOKER_CHECK(ids.device() == device_, describe(), " is on ", device_.str(), " but its ids are ",
               ids.str(), "; move the model with .to(device) or the ids with Tensor::to");
  const int64_t b = ids.size(0), t = ids.size(1), c = config_.d_model;
  Tensor x = embed_tokens_->forward(ids);  // [B, T, C] in the compute dtype
  x = layers_->forward(x);
  const Tensor h = norm_->forward(x).reshape({b * t, c});
  b_ = b;
  t_ = t;
  h_ = Tensor();
  w_head_ = Tensor();
  if (head_in_loss_) return h;
  const Tensor& w = head_weight().compute_value(h.dtype());
  Tensor logits = Tensor::empty({b * t, config_.vocab}, h.dtype(), device_);
  {
    const core::ModuleScope scope("lm_head");
    ops::gemm(logits, h, w, {.trans_b = true});
  }
  if (nn::saving_activations()) {
    h_ = h;
    w_head_ = w;
  }
  return logits;
}

Tensor Llama::backward(const Tensor& dy) {
  const int64_t n = b_ * t_, c = config_.d_model;
  if (head_in_loss_) {  // dy is the loss's gradient of norm's output; the loss did the head
    STOKER_CHECK(b_ > 0, describe(), ": backward called before forward");
    STOKER_CHECK(dy.defined() && dy.numel() == n * c, describe(), ": gradient ",
                 dy.defined() ? dy.str() : "undefined", " must be [", n, ", ", c,
                 "] (norm's output: the head is in the loss)");
    return backward_trunk(dy.reshape({b_, t_, c}));
  }
  STOKER_CHECK(h_.defined(), describe(), ": backward called before forward");
  STOKER_CHECK(dy.defined() && dy.numel() == n * config_.vocab && dy.dtype() == h_.dtype(),
               describe(), ": gradient ", dy.defined() ? dy.str() : "undefined", " must be [", n,
               ", ", config_.vocab, "] in ", dtype_name(h_.dtype()));
  const Tensor dl = dy.reshape({n, config_.vocab});
  nn::Parameter& w = head_weight();
  Tensor dh = Tensor::empty({n, c}, dl.dtype(), device_);
  {
    const core::ModuleScope scope("lm_head");
    // Tied: the head's half of the embedding's gradient comes first (it may overwrite after
    // zero_grad); the embedding's scatter-add accumulates onto it and announces it.
    if (w.requires_grad) {
      float beta = 1.0f;
      const Tensor& dw = w.grad_for_write(beta);
      ops::gemm(dw, dl, h_, {.trans_a = true, .beta = beta});
      if (lm_head_) w.grad_ready();
    }
    ops::gemm(dh, dl, w_head_);
  }
  h_ = Tensor();
  w_head_ = Tensor();
  return backward_trunk(dh.reshape({b_, t_, c}));
}

Tensor Llama::backward_trunk(const Tensor& dh) {
  Tensor dx = norm_->backward(dh);
  dx = layers_->backward(dx);
  embed_tokens_->backward(dx);  // scatter-add; with a tied head, onto the head's part
  return Tensor();
}

std::unique_ptr<nn::Loss> Llama::make_loss(int64_t ignore_index) {
  if (!head_in_loss_)
    return std::make_unique<nn::CrossEntropyLoss>(
        nn::CrossEntropyOptions{.ignore_index = ignore_index});
  return std::make_unique<nn::LinearCrossEntropyLoss>(
      head_weight(), nn::LinearCrossEntropyOptions{.ignore_index = ignore_index,
                                                   .weight_shared = lm_head_ == nullptr});
}

Tensor Llama::logits(const Tensor& h) {
  STOKER_CHECK(h.defined() && h.rank() == 2 && h.size(1) == config_.d_model, describe(),
               ": head input must be [N, ", config_.d_model, "], got ",
               h.defined() ? h.str() : std::string("undefined"));
  const Tensor& w = head_weight().compute_value(h.dtype());
  Tensor out = Tensor::empty({h.size(0), config_.vocab}, h.dtype(), device_);
  ops::gemm(out, h, w, {.trans_b = true});
  return out;
}

std::string Llama::describe() const { return "Llama(" + config_.str() + ")"; }

int Llama::checkpoint_blocks(int every) { return nn::checkpoint_every(*layers_, every); }

}  // namespace stoker::llm
