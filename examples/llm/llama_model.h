// A Llama-3-architecture decoder (examples/llm): token embedding, pre-RMSNorm blocks of
// grouped-query causal self-attention with rotary positions and a SwiGLU MLP, a final RMSNorm
// and an LM head (its own weight, or tied to the embedding).
//
//   ids [B, T] (i32/i64) -> x = embed_tokens[ids]                                 [B, T, C]
//   block l:   h = x + self_attn(input_layernorm(x))          (RoPE inside, GQA)
//              x = h + mlp(post_attention_layernorm(h))       (SwiGLU: one gate|up GEMM)
//   logits    = norm(x) lm_head^T                                                 [B * T, V]
// The residual add before post_attention_layernorm is fused with it (nn::RMSNorm::forward_add).
// With the head in the loss (set_head_in_loss, what stoker_llm does) forward stops at norm's
// output [B * T, C] and nn::LinearCrossEntropyLoss applies the head a chunk of rows at a time, so
// the [B * T, V] logits (V = 128,256 for Llama 3) never exist whole.
//
// Parameter names follow transformers' LlamaForCausalLM without its "model." prefix, with two
// fused weights (hf_llama.h converts both ways):
//   embed_tokens.weight [V, C]
//   layers.<l>.input_layernorm.weight [C]
//   layers.<l>.self_attn.qkv_proj.weight [(H + 2 KV) D, C]  = q_proj | k_proj | v_proj rows
//   layers.<l>.self_attn.o_proj.weight [C, H D]
//   layers.<l>.post_attention_layernorm.weight [C]
//   layers.<l>.mlp.gate_up_proj.weight [2 F, C]              = gate_proj | up_proj rows
//   layers.<l>.mlp.down_proj.weight [C, F]
//   norm.weight [C]
//   lm_head.weight [V, C]                                    (absent when tied)
// No biases (Llama has none). Initialization is transformers' _init_weights: every Linear and
// the embedding N(0, initializer_range), RMSNorm weights 1.
//
// Positions: RoPE uses 0..T-1 in every row unless set_positions() gives each token's position
// in its document (data::SequenceBatches' Batch::positions); with document_mask the attention
// also stops at document starts. Saved for backward: what the blocks save (nn/attention.h,
// nn/layernorm.h, nn/linear.h) and the head's input. Work runs on the current stream of the
// model's device. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/nn/attention.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/embedding.h"
#include "stoker/nn/layernorm.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/module.h"
#include "stoker/ops/attention.h"

namespace stoker::llm {

// The fields of a transformers LlamaConfig (config.json) that define the network.
struct LlamaConfig {
  int64_t vocab = 1024;         // vocab_size
  int64_t d_model = 128;        // hidden_size (C)
  int64_t layers = 4;           // num_hidden_layers
  int64_t heads = 4;            // num_attention_heads (H)
  int64_t kv_heads = 2;         // num_key_value_heads (KV, divides H)
  int64_t head_dim = 32;        // head_dim (D; transformers' default C / H)
  int64_t ffn = 384;            // intermediate_size (F)
  int64_t context = 256;        // max_position_embeddings (longest sequence trained or generated)
  float rms_eps = 1e-5f;        // rms_norm_eps
  ops::RopeOptions rope;        // rope_theta and rope_scaling (head_dim is kept equal to D)
  bool tie_embeddings = false;  // tie_word_embeddings
  float init_std = 0.02f;       // initializer_range
  int64_t bos_id = 128000;      // bos_token_id, eos_token_id: recorded in config.json
  int64_t eos_id = 128001;

  // "llama3-debug": V 1024 (the bundled text's tokenizer), C 128, 4 layers, H 4, KV 2, D 32,
  //   F 384, T 256 — trains on two CPU cores in a minute or two;
  // "llama3.2-1b": V 128256, C 2048, 16 layers, H 32, KV 8, D 64, F 8192, tied, RoPE theta
  //   500000 with llama3 scaling (factor 32, 1, 4, 8192), T 131072;
  // "llama3.2-3b": C 3072, 28 layers, H 24, KV 8, D 128, F 8192, tied, as 1B otherwise;
  // "llama3-8b": C 4096, 32 layers, H 32, KV 8, D 128, F 14336, untied, theta 500000 without
  //   scaling, T 8192. Other names throw, listing these.
  static LlamaConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  // "V=128256 C=2048 L=16 H=32 KV=8 D=64 F=8192 T=131072 tied".
  std::string str() const;
  // Parameters (embedding and head counted once when tied).
  int64_t parameter_count() const;
};

// One pre-RMSNorm block. Children "input_layernorm", "self_attn", "post_attention_layernorm",
// "mlp" (transformers' LlamaDecoderLayer).
class LlamaBlock : public nn::Module {
 public:
  explicit LlamaBlock(const LlamaConfig& config);

  // x [B, T, C] -> [B, T, C].
  Tensor forward(const Tensor& x) override;
  void forward_for_backward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;

  nn::RMSNorm& input_layernorm() { return *input_layernorm_; }
  nn::GroupedQueryAttention& self_attn() { return *self_attn_; }
  nn::RMSNorm& post_attention_layernorm() { return *post_attention_layernorm_; }
  nn::SwiGLU& mlp() { return *mlp_; }

 private:
  // h = x + self_attn(input_layernorm(x)) into *h; returns post_attention_layernorm(h).
  Tensor attention_half(const Tensor& x, Tensor* h);

  nn::RMSNorm* input_layernorm_ = nullptr;
  nn::GroupedQueryAttention* self_attn_ = nullptr;
  nn::RMSNorm* post_attention_layernorm_ = nullptr;
  nn::SwiGLU* mlp_ = nullptr;
};

class Llama : public nn::Module {
 public:
  // Draws the initial weights from nn::init_generator() (seed it with nn::manual_seed).
  explicit Llama(LlamaConfig config);

  // ids [B, T] (i32 or i64) -> logits [B * T, V] (the compute dtype under mixed precision, else
  // f32), or norm's output [B * T, C] with the head in the loss.
  Tensor forward(const Tensor& ids) override;
  // The gradient of what forward returned -> an undefined tensor.
  Tensor backward(const Tensor& dy) override;

  // Positions [B, T] (i32/i64; each token's position in its document) for the next forwards'
  // RoPE, and with document_mask for the attention's document boundaries; undefined: 0..T-1.
  void set_positions(const Tensor& positions, bool document_mask);

  // The head applied by the loss instead of forward (see the file comment); pair with
  // make_loss(). Set it before training starts.
  void set_head_in_loss(bool on) { head_in_loss_ = on; }
  bool head_in_loss() const { return head_in_loss_; }
  // nn::CrossEntropyLoss, or with the head in the loss an nn::LinearCrossEntropyLoss over the
  // head's weight (embed_tokens' when tied). It borrows the weight: the model must outlive it.
  std::unique_ptr<nn::Loss> make_loss(int64_t ignore_index = -100);
  // logits [N, V] of norm outputs h [N, C] (the head, without saving anything).
  Tensor logits(const Tensor& h);
  std::string describe() const override;

  const LlamaConfig& config() const { return config_; }
  nn::Embedding& embed_tokens() { return *embed_tokens_; }
  nn::Sequential& layers() { return *layers_; }
  LlamaBlock& layer(int64_t l);
  nn::RMSNorm& norm() { return *norm_; }
  // The head's weight [V, C]: lm_head's, or embed_tokens' when tied.
  nn::Parameter& head_weight();
  // Wraps blocks 0, k, 2k, ... in nn::Checkpoint (k = 1: every block); returns how many.
  int checkpoint_blocks(int every);

 private:
  Tensor backward_trunk(const Tensor& dh);

  LlamaConfig config_;
  nn::Embedding* embed_tokens_ = nullptr;
  nn::Sequential* layers_ = nullptr;
  nn::RMSNorm* norm_ = nullptr;
  nn::Linear* lm_head_ = nullptr;  // nullptr when tied
  std::vector<LlamaBlock*> blocks_;
  bool head_in_loss_ = false;
  Tensor h_;       // saved: norm's output [B * T, C], the head's input
  Tensor w_head_;  // saved: the head's weight in h_'s dtype
  int64_t b_ = 0, t_ = 0;
};

}  // namespace stoker::llm
