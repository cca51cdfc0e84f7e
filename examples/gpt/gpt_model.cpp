// The GPT model of examples/gpt. The only parts that are not stock nn layers are the position
// add (the [T, C] position rows broadcast over the batch: one add_bias over x viewed [B, T*C],
// its gradient one bias_grad — both deterministic) and the tied head (two GEMMs on wte's
// parameter; see gpt_model.h for how the tied gradient is written and announced).
#include "gpt_model.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"
#include "stoker/core/rng.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"

namespace stoker::gpt {

GptConfig GptConfig::preset(const std::string& name) {
  if (name == "gpt2-124m") {
    return {.vocab = 50304, .context = 1024, .layers = 12, .heads = 12, .d_model = 768};
  }
  // GPT-2's larger sizes, with 124M's padded vocabulary.
  if (name == "gpt2-350m") {
    return {.vocab = 50304, .context = 1024, .layers = 24, .heads = 16, .d_model = 1024};
  }
  if (name == "gpt2-774m") {
    return {.vocab = 50304, .context = 1024, .layers = 36, .heads = 20, .d_model = 1280};
  }
  if (name == "gpt2-1.5b") {
    return {.vocab = 50304, .context = 1024, .layers = 48, .heads = 25, .d_model = 1600};
  }
  if (name == "tiny") {
    return {.vocab = 256, .context = 128, .layers = 4, .heads = 4, .d_model = 128};
  }
  STOKER_THROW("GptConfig::preset: unknown preset '", name,
               "' (known: tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b)");
}

std::string GptConfig::str() const {
  return fmt::format("V={} T={} L={} H={} C={} dropout={:g} init={}", vocab, context, layers, heads,
                     d_model, dropout, init == GptInit::gpt2 ? "gpt2" : "torch");
}

// ---------------------------------------------------------------------------------- GptBlock

// Names: attention and MLP add no level, so the parameters are "ln1.*", "qkv.*", "proj.*",
// "ln2.*", "fc.*", "fc2.*" (PyTorch's Block), in that order; the dropouts' generators are
// "attn_drop.generator" and "mlp.4.generator" (the names training checkpoints have always had:
// the MLP's dropout was its child 4 when ln2 was its child 0). ln2 is the block's own child,
// registered between attention and the MLP, so names and their order are what they were when
// it was the MLP's first child.
GptBlock::GptBlock(int64_t d_model, int64_t heads, float dropout, bool fuse_gelu) {
  ln1_ = &register_module("ln1", nn::make<nn::LayerNorm>(d_model));
  attn_ = &register_module("", nn::make<nn::CausalSelfAttention>(d_model, heads));
  if (dropout > 0.0f) drop_ = &register_module("attn_drop", nn::make<nn::Dropout>(dropout));
  // Built fc2 first, then fc: the order in which the arguments of the former one-call
  // Sequential(ln2, fc, gelu, fc2) were evaluated (GCC: right to left), so a seed still gives
  // the same weights under GptInit::torch (a LayerNorm draws nothing).
  auto fc2 = nn::make<nn::Linear>(4 * d_model, d_model);
  auto fc = nn::make<nn::Linear>(d_model, 4 * d_model);
  ln2_ = &register_module("ln2", nn::make<nn::LayerNorm>(d_model));
  auto mlp = nn::make<nn::Sequential>();
  // Fused: fc computes gelu(x W^T + b) in its GEMM's epilogue and fc2's input-gradient GEMM
  // applies gelu' (nn/linear.h); the GELU module, which has no parameters, is gone, so the
  // names are the same. Unfused: the GELU as its own module.
  if (fuse_gelu) {
    fc->set_activation(nn::Activation::gelu);
    fc2->set_input_activation_from(fc.get());
    mlp->add("fc", std::move(fc));
  } else {
    mlp->add("fc", std::move(fc));
    mlp->add("gelu", nn::make<nn::GELU>());
  }
  mlp->add("fc2", std::move(fc2));
  if (dropout > 0.0f) mlp->add("mlp.4", nn::make<nn::Dropout>(dropout));
  mlp_ = &register_module("", std::move(mlp));
}

Tensor GptBlock::attention_half(const Tensor& x, Tensor* h) {
  Tensor a = attn_->forward(ln1_->forward(x));
  if (drop_) a = drop_->forward(a);
  // attn's (or dropout's) output is kept by nobody, so the residual add may overwrite it; ln2
  // keeps h (by reference) for its backward.
  const core::ModuleScope scope("ln2");  // op timing: where the ops come from
  *h = a;
  return ln2_->forward_add(a, x, a);
}

Tensor GptBlock::forward(const Tensor& x) {
  Tensor h;
  const Tensor z = attention_half(x, &h);
  Tensor y = mlp_->forward(z);  // fc2's (or dropout's) output: kept by nobody
  ops::add(y, y, h);
  // Selective recomputation, as the Sequential does inside the MLP: ln2's output is one
  // normalization pass away from the h ln2 keeps, so fc does not keep it.
  fc_input_released_ = mlp_->selective_recompute() && nn::saving_activations() &&
                       !nn::recomputing() &&
                       ln2_->output_recompute() == OutputRecompute::from_own_state &&
                       (*mlp_)[0].release_saved_input();
  return y;
}

void GptBlock::forward_for_backward(const Tensor& x) {
  Tensor h;
  mlp_->forward_for_backward(attention_half(x, &h));
  fc_input_released_ = false;  // a Checkpoint's recomputation: no selective recomputation
}

Tensor GptBlock::backward(const Tensor& dy) {
  if (fc_input_released_) {
    // Rebuilt before the whole MLP's backward, not just before fc's as a Sequential would: this
    // [B*T, C] tensor lives through fc2's (and an unfused GELU's) backward too.
    fc_input_released_ = false;
    const core::ModuleScope scope("ln2");
    (*mlp_)[0].restore_saved_input(ln2_->recompute_output(Tensor()));
  }
  Tensor dz = mlp_->backward(dy);
  // The residual: dL/dh = dy + ln2'(h)^T MLP'(z)^T dy, in one pass, into dz (kept by nobody).
  Tensor dh;
  {
    const core::ModuleScope scope("ln2");
    dh = ln2_->backward_add(dz, dy, dz);
  }
  const Tensor da = drop_ ? drop_->backward(dh) : dh;
  Tensor dx = ln1_->backward(attn_->backward(da));
  ops::add(dx, dx, dh);
  return dx;
}

std::string GptBlock::describe() const {
  return fmt::format("GptBlock(C={}, heads={}{}", attn_->d_model(), attn_->heads(),
                     drop_ ? ", dropout)" : ")");
}

// --------------------------------------------------------------------------------------- Gpt

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
// "blocks.3.ln2.weight" -> "ln2"
std::string owner_of(const std::string& name) {
  const size_t last = name.rfind('.');
  const size_t before = name.rfind('.', last - 1);
  return name.substr(before == std::string::npos ? 0 : before + 1,
                     last - (before == std::string::npos ? 0 : before + 1));
}
}  // namespace

Gpt::Gpt(GptConfig config) : config_(config) {
  STOKER_CHECK(config_.vocab > 0 && config_.context > 0 && config_.layers > 0 &&
                   config_.heads > 0 && config_.d_model > 0,
               "Gpt: every size must be positive, got ", config_.str());
  STOKER_CHECK(config_.d_model % config_.heads == 0, "Gpt: d_model ", config_.d_model,
               " must be divisible by heads ", config_.heads);
  STOKER_CHECK(config_.dropout >= 0.0f && config_.dropout < 1.0f, "Gpt: dropout ", config_.dropout,
               " must be in [0, 1)");
  wte_ = &register_module("wte", nn::make<nn::Embedding>(config_.vocab, config_.d_model));
  wpe_ = &register_module("wpe", nn::make<nn::Embedding>(config_.context, config_.d_model));
  if (config_.dropout > 0.0f)
    drop_ = &register_module("drop", nn::make<nn::Dropout>(config_.dropout));
  blocks_ = &register_module("blocks", nn::make<nn::Sequential>());
  for (int64_t l = 0; l < config_.layers; ++l)
    blocks_->add(
        nn::make<GptBlock>(config_.d_model, config_.heads, config_.dropout, config_.fuse_gelu));
  lnf_ = &register_module("lnf", nn::make<nn::LayerNorm>(config_.d_model));

  if (config_.init == GptInit::gpt2) {
    // Redrawn in parameter order after construction, so a seed still fixes the model.
    const float std_residual = 0.02f / std::sqrt(2.0f * static_cast<float>(config_.layers));
    visit_parameters("", [&](const std::string& name, nn::Parameter& p) {
      if (owner_of(name).rfind("ln", 0) == 0) return;  // LayerNorms keep 1 and 0
      if (ends_with(name, ".bias")) {
        p.set_value(Tensor::zeros(p.shape(), DType::f32));
      } else {
        const bool residual = ends_with(name, "proj.weight") || ends_with(name, "fc2.weight");
        p.set_value(nn::init_normal(p.shape(), residual ? std_residual : 0.02f));
      }
    });
  }
}

Tensor Gpt::forward(const Tensor& ids) {
  STOKER_CHECK(
      ids.defined() && ids.rank() == 2 && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64),
      describe(), ": ids must be [B, T] i32 or i64, got ",
      ids.defined() ? ids.str() : std::string("undefined"));
  STOKER_CHECK(ids.size(1) <= config_.context, describe(), ": ", ids.size(1),
               " tokens per row is more than the context of ", config_.context,
               " positions; pass windows of at most that many");
  STOKER_CHECK(ids.device() == device_, describe(), " is on ", device_.str(), " but its ids are ",
               ids.str(), "; move the model with .to(device) or the ids with Tensor::to");
  const int64_t b = ids.size(0), t = ids.size(1), c = config_.d_model;
  Tensor x = wte_->forward(ids);  // [B, T, C] in the compute dtype
  // + wpe[0..T): the same T*C values added to every row of x viewed [B, T*C] (fp32 add, one
  // rounding to x's dtype).
  ops::add_bias(x.reshape({b, t * c}), wpe_->weight().value().slice(0, t).reshape({t * c}));
  if (drop_) x = drop_->forward(x);
  x = blocks_->forward(x);
  const Tensor h = lnf_->forward(x).reshape({b * t, c});
  b_ = b;
  t_ = t;
  if (head_in_loss_) {
    h_ = Tensor();
    w_head_ = Tensor();
    return h;
  }
  const Tensor& w = wte_->weight().compute_value(h.dtype());
  Tensor logits = Tensor::empty({b * t, config_.vocab}, h.dtype(), device_);
  ops::gemm(logits, h, w, {.trans_b = true});
  if (nn::saving_activations()) {
    h_ = h;
    w_head_ = w;
    b_ = b;
    t_ = t;
  } else {
    h_ = Tensor();
    w_head_ = Tensor();
  }
  return logits;
}

Tensor Gpt::backward(const Tensor& dy) {
  const int64_t n = b_ * t_, c = config_.d_model;
  if (head_in_loss_) {  // dy is the loss's gradient of lnf's output; the loss did the head
    STOKER_CHECK(b_ > 0, describe(), ": backward called before forward");
    STOKER_CHECK(dy.defined() && dy.numel() == n * c, describe(), ": gradient ",
                 dy.defined() ? dy.str() : "undefined", " must be [", n, ", ", c,
                 "] (lnf's output: the head is in the loss)");
    return backward_trunk(dy.reshape({b_, t_, c}));
  }
  const Tensor& dlogits = dy;
  STOKER_CHECK(h_.defined(), describe(), ": backward called before forward");
  STOKER_CHECK(
      dlogits.defined() && dlogits.numel() == n * config_.vocab && dlogits.dtype() == h_.dtype(),
      describe(), ": gradient ", dlogits.defined() ? dlogits.str() : "undefined", " must be [", n,
      ", ", config_.vocab, "] in ", dtype_name(h_.dtype()));
  const Tensor dl = dlogits.reshape({n, config_.vocab});
  nn::Parameter& w = wte_->weight();
  // The head's half of the tied gradient comes first: it may overwrite (beta 0 after
  // zero_grad); the embedding's scatter-add below accumulates onto it and announces it.
  if (w.requires_grad) {
    float beta = 1.0f;
    const Tensor& dw = w.grad_for_write(beta);
    ops::gemm(dw, dl, h_, {.trans_a = true, .beta = beta});
  }
  Tensor dh = Tensor::empty({n, c}, dl.dtype(), device_);
  ops::gemm(dh, dl, w_head_);
  h_ = Tensor();
  w_head_ = Tensor();
  return backward_trunk(dh.reshape({b_, t_, c}));
}

Tensor Gpt::backward_trunk(const Tensor& dh) {
  const int64_t c = config_.d_model;
  Tensor dx = lnf_->backward(dh);
  dx = blocks_->backward(dx);
  if (drop_) dx = drop_->backward(dx);
  nn::Parameter& wpe = wpe_->weight();
  if (wpe.requires_grad) {
    ops::bias_grad(wpe.grad().slice(0, t_).reshape({t_ * c}), dx.reshape({b_, t_ * c}));
    wpe.grad_ready();
  }
  wte_->backward(dx);  // dwte += scatter(dx); the tied parameter's one grad_ready()
  return Tensor();
}

std::unique_ptr<nn::Loss> Gpt::make_loss(int64_t ignore_index) {
  if (!head_in_loss_)
    return std::make_unique<nn::CrossEntropyLoss>(
        nn::CrossEntropyOptions{.ignore_index = ignore_index});
  return std::make_unique<nn::LinearCrossEntropyLoss>(
      wte_->weight(),
      nn::LinearCrossEntropyOptions{.ignore_index = ignore_index, .weight_shared = true});
}

Tensor Gpt::logits(const Tensor& h) {
  STOKER_CHECK(h.defined() && h.rank() == 2 && h.size(1) == config_.d_model, describe(),
               ": head input must be [N, ", config_.d_model, "], got ",
               h.defined() ? h.str() : std::string("undefined"));
  const Tensor& w = wte_->weight().compute_value(h.dtype());
  Tensor out = Tensor::empty({h.size(0), config_.vocab}, h.dtype(), device_);
  ops::gemm(out, h, w, {.trans_b = true});
  return out;
}

std::string Gpt::describe() const { return "Gpt(" + config_.str() + ")"; }

int Gpt::checkpoint_blocks(int every) { return nn::checkpoint_every(*blocks_, every); }

// ---------------------------------------------------------------------------------- generate

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t count,
                              int top_k, float temperature, uint64_t seed) {
  STOKER_CHECK(!prompt.empty(), "gpt::generate: the prompt needs at least one token");
  STOKER_CHECK(count >= 0 && temperature > 0.0f, "gpt::generate: count ", count,
               " must be >= 0 and temperature ", temperature, " positive");
  const bool was_training = model.training();
  model.set_training(false);
  nn::NoSaveScope no_save;
  const int64_t vocab = model.config().vocab, context = model.config().context;
  std::vector<int64_t> tokens = prompt, out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = std::min<int64_t>(context, static_cast<int64_t>(tokens.size()));
    const std::vector<int64_t> window(tokens.end() - t, tokens.end());
    const Tensor ids = Tensor::from_vector(window, {1, t}, model.device());
    const Tensor last = model.forward(ids).slice(t - 1, t);  // logits, or lnf's output
    const std::vector<float> logits =
        (model.head_in_loss() ? model.logits(last) : last).to_floats();
    int64_t next = 0;
    if (top_k <= 1) {
      next = std::max_element(logits.begin(), logits.end()) - logits.begin();
    } else {
      // Softmax over the k largest logits at `temperature`, one Philox draw per token.
      std::vector<int64_t> order(static_cast<size_t>(vocab));
      std::iota(order.begin(), order.end(), 0);
      const int64_t k = std::min<int64_t>(top_k, vocab);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
      std::vector<double> p(static_cast<size_t>(k));
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        p[j] = std::exp((logits[order[j]] - logits[order[0]]) / temperature);
        sum += p[j];
      }
      const core::Philox4 r = core::philox_block(seed, 0x67656e6572617465ull /* "generate" */,
                                                 static_cast<uint64_t>(i));
      double u = static_cast<double>(r.v[0]) / 4294967296.0 * sum;
      next = order[k - 1];
      for (int64_t j = 0; j < k; ++j) {
        if (u < p[j]) {
          next = order[j];
          break;
        }
        u -= p[j];
      }
    }
    tokens.push_back(next);
    out.push_back(next);
  }
  model.set_training(was_training);
  return out;
}

}  // namespace stoker::gpt
