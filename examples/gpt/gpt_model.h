// A GPT-2-style decoder (examples/gpt): token and position embeddings, pre-LayerNorm blocks of
// causal self-attention and a GELU MLP, a final LayerNorm and an LM head tied to the token
// embedding.
//
//   ids [B, T] (i32/i64) -> x = wte[ids] + wpe[0..T)                       [B, T, C]
//   block l:   x = x + attn(ln1(x));  x = x + fc2(gelu(fc(ln2(x))))        (+ dropout)
//   logits    = lnf(x) wte^T                                               [B * T, V]
// The logits are flattened to [B * T, V] so nn::CrossEntropyLoss takes them next to targets
// [B * T] (data::TokenBatches gives both). With the head in the loss (set_head_in_loss, what
// stoker_gpt does), forward stops at lnf's output [B * T, C] and the loss applies the tied head
// a chunk of rows at a time (nn::LinearCrossEntropyLoss, make_loss()): the [B * T, V] logits —
// 1.6 GB in bf16 for GPT-2 at B 16, T 1024, and as much again for their gradient — never exist
// whole.
//
// Parameters and their names are those of the PyTorch peer model (benchmarks/peers/gpt_model.py's
// GPT): "wte.weight", "wpe.weight", "blocks.<l>.ln1.weight", "blocks.<l>.qkv.weight", ...,
// "blocks.<l>.fc2.bias", "lnf.weight", "lnf.bias". The head has no parameter of its own: it
// reads wte's, so the tied weight appears once in parameters() and in weight files (as in a
// PyTorch state_dict whose head.weight is wte.weight).
//
// The tie: one Parameter, two uses. The head's backward runs first and writes dW with
// Parameter::grad_for_write (overwriting after zero_grad, accumulating across micro-batches);
// the embedding's backward runs last and scatter-adds into the same gradient, then calls
// grad_ready() — once per backward, after both uses, which is what the data-parallel
// gradient sync needs before it reduces the bucket holding wte. Under mixed precision the head
// multiplies by the parameter's half compute copy, the lookup rounds the fp32 master rows.
//
// Activation checkpointing: the blocks live in an nn::Sequential (blocks()), so
// nn::checkpoint_every(model.blocks(), k) — or checkpoint_blocks(k) — wraps them in
// nn::Checkpoint without changing names. (TrainerOptions::activation_checkpoint_every needs the
// model itself to be a Sequential; call checkpoint_blocks before building the Trainer instead.)
// Selective recomputation (nn::set_selective_recompute) reaches each block's MLP, an
// nn::Sequential(fc, fc2[, dropout]) whose fc carries the GELU (or, unfused,
// Sequential(fc, gelu, fc2[, dropout])): fc2 gives up its input, the GELU's output, which fc
// (or the GELU) rebuilds from the pre-activation it keeps; the block itself lets fc give up its
// input (ln2's output) and rebuilds it from ln2 before the MLP's backward, as the Sequential
// would with ln2 as its first child.
//
// Fusion: the attention half's residual add and ln2 are one kernel (nn::LayerNorm::forward_add,
// ops::add_layernorm_forward), and in backward ln2's gradient and the residual gradient are one
// (backward_add). The results have the bits of the unfused add + LayerNorm. The MLP's GELU
// rides in fc's forward GEMM and fc2's input-gradient GEMM (GptConfig::fuse_gelu, nn/linear.h):
// on the CPU the bits of the unfused MLP, on the GPU within rounding of them.
//
// Saved for backward: the final LayerNorm's output (the head's input), the blocks' own saves
// (nn/attention.h, nn/layernorm.h, nn/linear.h), the ids. Work runs on the current stream of
// the model's device. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/nn/activation.h"
#include "stoker/nn/attention.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/embedding.h"
#include "stoker/nn/layernorm.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/module.h"

namespace stoker::gpt {

enum class GptInit {
  gpt2,   // GPT-2's: weights and embeddings N(0, 0.02), biases 0, the residual projections
          // (proj, fc2) N(0, 0.02 / sqrt(2 * layers)); LayerNorms 1 and 0
  torch,  // PyTorch's module defaults, as the peer model gets them: Linear U(+-1/sqrt(in)),
          // Embedding N(0, 1) (the tied head included), LayerNorm 1 and 0
};

struct GptConfig {
  int64_t vocab = 256;    // V
  int64_t context = 256;  // T_max: positions in wpe
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t d_model = 128;  // C, divisible by heads
  float dropout = 0.0f;   // after the embeddings, attention's proj and the MLP (0: none)
  GptInit init = GptInit::gpt2;
  // The MLP's GELU fused into its GEMMs (fc: nn::Linear with Activation::gelu, the GELU in the
  // forward GEMM's epilogue; fc2's input-gradient GEMM applies gelu' in its epilogue) instead
  // of a separate nn::GELU module with its own passes. Same parameters and names either way;
  // on the CPU the same bits, on the GPU within an ulp of the compute dtype per GELU
  // (nn/linear.h). false: the unfused Sequential(fc, gelu, fc2), the reference.
  bool fuse_gelu = true;

  // "gpt2-124m": V 50304 (GPT-2's 50257 padded to a multiple of 64), T 1024, 12 layers,
  // 12 heads, C 768 — the benchmark model; "tiny": byte-level V 256, T 128, 4 layers, 4 heads,
  // C 128 — trains on two CPU cores in about a minute; "gpt2-350m" (24 layers, 16 heads, C 1024),
  // "gpt2-774m" (36, 20, 1280) and "gpt2-1.5b" (48, 25, 1600) with 124M's V and T. Other names
  // throw.
  static GptConfig preset(const std::string& name);
  // "V=50304 T=1024 L=12 H=12 C=768 dropout=0".
  std::string str() const;
};

// One pre-LayerNorm transformer block. Parameters "ln1.*", "qkv.*", "proj.*", "ln2.*", "fc.*",
// "fc2.*" (PyTorch's Block).
class GptBlock : public nn::Module {
 public:
  // fuse_gelu: see GptConfig::fuse_gelu.
  GptBlock(int64_t d_model, int64_t heads, float dropout, bool fuse_gelu = true);

  // x [B, T, C] -> [B, T, C].
  Tensor forward(const Tensor& x) override;
  // Everything forward saves, without the MLP's last GEMM and the final residual add (an
  // nn::Checkpoint's recomputation).
  void forward_for_backward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;

  nn::LayerNorm& ln1() { return *ln1_; }
  nn::CausalSelfAttention& attn() { return *attn_; }
  // Applied by the block, fused with the attention half's residual add.
  nn::LayerNorm& ln2() { return *ln2_; }
  // fc (with its fused GELU), fc2 — or fc, gelu, fc2 unfused — and a Dropout when dropout > 0.
  nn::Sequential& mlp() { return *mlp_; }

 private:
  // h = x + dropout(attn(ln1(x))), the residual stream after the attention half, written into
  // *h; returns ln2(h), the MLP's input (one fused add + LayerNorm).
  Tensor attention_half(const Tensor& x, Tensor* h);

  // Registered children (GptBlock's constructor gives their names).
  nn::LayerNorm* ln1_ = nullptr;
  nn::CausalSelfAttention* attn_ = nullptr;
  nn::Dropout* drop_ = nullptr;  // nullptr when dropout == 0
  nn::LayerNorm* ln2_ = nullptr;
  nn::Sequential* mlp_ = nullptr;
  // Selective recomputation: fc gave up its input after the forward; the backward rebuilds it.
  bool fc_input_released_ = false;
};

class Gpt : public nn::Module {
 public:
  // Draws the initial weights from nn::init_generator() (seed it with nn::manual_seed).
  explicit Gpt(GptConfig config);

  // ids [B, T] (i32 or i64, T <= context) -> logits [B * T, V] (the compute dtype under mixed
  // precision, else f32), or lnf's output [B * T, C] with the head in the loss.
  Tensor forward(const Tensor& ids) override;
  // The gradient of what forward returned -> an undefined tensor (ids have no gradient); adds
  // into every parameter's gradient and calls each grad_ready() once (wte's: after the loss
  // wrote the head's part, when the head is in the loss).
  Tensor backward(const Tensor& dy) override;

  // The head (h wte^T) applied by the loss instead of forward: see the file comment. Set it
  // before training starts, and pair it with make_loss().
  void set_head_in_loss(bool on) { head_in_loss_ = on; }
  bool head_in_loss() const { return head_in_loss_; }
  // The training loss for the current head mode: nn::CrossEntropyLoss, or with the head in the
  // loss an nn::LinearCrossEntropyLoss over wte (weight_shared: the embedding's backward
  // announces the tied gradient). It borrows wte: the model must outlive it.
  std::unique_ptr<nn::Loss> make_loss(int64_t ignore_index = -100);
  // logits [N, V] of lnf outputs h [N, C] (the head, without saving anything).
  Tensor logits(const Tensor& h);
  std::string describe() const override;

  const GptConfig& config() const { return config_; }
  nn::Sequential& blocks() { return *blocks_; }
  nn::Embedding& wte() { return *wte_; }
  nn::Embedding& wpe() { return *wpe_; }
  nn::LayerNorm& lnf() { return *lnf_; }
  // Wraps blocks 0, k, 2k, ... in nn::Checkpoint (k = 1: every block); returns how many.
  int checkpoint_blocks(int every);

 private:
  // The backward below the head: dh [B, T, C] (lnf's output gradient) down to the embeddings.
  Tensor backward_trunk(const Tensor& dh);

  GptConfig config_;
  // Registered children "wte", "wpe", "drop", "blocks", "lnf". The head has no parameter of its
  // own: it reads wte's.
  nn::Embedding* wte_ = nullptr;
  nn::Embedding* wpe_ = nullptr;
  nn::Dropout* drop_ = nullptr;  // nullptr when dropout == 0
  nn::Sequential* blocks_ = nullptr;
  nn::LayerNorm* lnf_ = nullptr;
  bool head_in_loss_ = false;
  Tensor h_;       // saved: lnf's output [B * T, C], the head's input
  Tensor w_head_;  // saved: wte in h_'s dtype (the master or its half copy)
  int64_t b_ = 0, t_ = 0;
};

// Greedy (top_k <= 1) or top-k sampling of `count` tokens after `prompt`, in evaluation mode
// with nothing saved (nn::NoSaveScope); the window slides when it passes the context. The
// draws are a pure function of `seed`. Restores the model's training mode. Returns the new
// tokens only.
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t count,
                              int top_k, float temperature, uint64_t seed);

}  // namespace stoker::gpt
