// KV-cache generation (generate.h): a prefill of the prompt, then one token per step, each layer
// written out with the public ops on the model's master weights.
#include "generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "stoker/core/error.h"
#include "stoker/core/rng.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/embedding.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layernorm.h"
#include "stoker/ops/layout.h"

namespace stoker::llm {

namespace {

// One parameter of `m` by its name in m's named_parameters() (its value: the f32 master).
const Tensor& param(nn::Module& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters())
    if (n == name) return p->value();
  STOKER_THROW(m.describe(), " has no parameter '", name, "'");
}

// y [N, out] = x [N, in] w^T (w [out, in], nn::Linear's layout).
Tensor linear(const Tensor& x, const Tensor& w) {
  Tensor y = Tensor::empty({x.size(0), w.size(0)}, DType::f32, x.device());
  ops::gemm(y, x, w, {.trans_b = true});
  return y;
}

Tensor rmsnorm(const Tensor& x, const Tensor& w, float eps) {
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  const Tensor rstd = Tensor::empty({x.size(0)}, DType::f32, x.device());
  ops::rmsnorm_forward(y, rstd, x, w, eps);
  return y;
}

// The weights and caches of one generation: run() takes n tokens at positions [pos, pos + n).
class KvDecoder {
 public:
  KvDecoder(Llama& model, int64_t t_max) : model_(model), c_(model.config()), t_max_(t_max) {
    const Device dev = model.device();
    ops::RopeOptions rope = c_.rope;
    rope.head_dim = c_.head_dim;
    inv_freq_ = Tensor::from_floats(ops::rope_inverse_frequencies(rope), {c_.head_dim / 2},
                                    DType::f32, dev);
    for (int64_t l = 0; l < c_.layers; ++l) {
      keys_.push_back(Tensor::zeros({c_.kv_heads * t_max, c_.head_dim}, DType::f32, dev));
      values_.push_back(Tensor::zeros({c_.kv_heads * t_max, c_.head_dim}, DType::f32, dev));
    }
  }

  // norm's output of the last of `ids` [1, C], after each layer's cache took their keys/values.
  Tensor run(const std::vector<int64_t>& ids, int64_t pos) {
    const int64_t n = static_cast<int64_t>(ids.size());
    const Device dev = model_.device();
    Tensor x = Tensor::empty({n, c_.d_model}, DType::f32, dev);
    ops::embedding_forward(x, Tensor::from_vector(ids, {n}, dev),
                           model_.embed_tokens().weight().value());
    for (int64_t l = 0; l < c_.layers; ++l) x = block(l, x, pos);
    return rmsnorm(x.slice(n - 1, n), model_.norm().weight().value(), c_.rms_eps);
  }

 private:
  Tensor block(int64_t l, const Tensor& x, int64_t pos) {
    LlamaBlock& b = model_.layer(l);
    const int64_t n = x.size(0);
    const Device dev = x.device();
    Tensor qkv = linear(rmsnorm(x, b.input_layernorm().weight().value(), c_.rms_eps),
                        param(b.self_attn(), "qkv_proj.weight"));
    std::vector<int64_t> positions(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), pos);
    ops::rope_qkv_forward(qkv, Tensor::from_vector(positions, {n}, dev), inv_freq_, c_.heads,
                          c_.kv_heads);
    const Tensor attn = Tensor::empty({n * c_.heads, c_.head_dim}, DType::f32, dev);
    const Tensor rows = qkv.reshape({n * (c_.heads + 2 * c_.kv_heads), c_.head_dim});
    for (int64_t i = 0; i < n; ++i) attend(l, rows, attn, i, pos + i);
    Tensor h =
        linear(attn.reshape({n, c_.heads * c_.head_dim}), param(b.self_attn(), "o_proj.weight"));
    ops::add(h, h, x);
    const Tensor gate_up =
        linear(rmsnorm(h, b.post_attention_layernorm().weight().value(), c_.rms_eps),
               b.mlp().gate_up_proj().weight().value());
    const Tensor act = Tensor::empty({n, c_.ffn}, DType::f32, dev);
    ops::swiglu_forward(act, gate_up);
    Tensor y = linear(act, b.mlp().down_proj().weight().value());
    ops::add(y, y, h);
    return y;
  }

  // Token i of the rows (its H query, KV key, KV value heads, rotated) at position p: its keys
  // and values into layer l's cache, then each group's G = H / KV query heads over the cached
  // positions 0..p into `attn` (rows i H + g G ...).
  void attend(int64_t l, const Tensor& rows, const Tensor& attn, int64_t i, int64_t p) {
    const int64_t h = c_.heads, kv = c_.kv_heads, d = c_.head_dim, g_size = h / kv;
    const int64_t row = i * (h + 2 * kv);
    const Tensor& k_cache = keys_[static_cast<size_t>(l)];
    const Tensor& v_cache = values_[static_cast<size_t>(l)];
    for (int64_t g = 0; g < kv; ++g) {
      ops::copy(k_cache.slice(g * t_max_ + p, g * t_max_ + p + 1),
                rows.slice(row + h + g, row + h + g + 1));
      ops::copy(v_cache.slice(g * t_max_ + p, g * t_max_ + p + 1),
                rows.slice(row + h + kv + g, row + h + kv + g + 1));
    }
    // Each group's G query heads [KV, G, D] against its whole cache [KV, T_max, D]: one batched
    // GEMM; the positions after p (zeros, not yet written) get probability 0 below.
    const Tensor q = rows.slice(row, row + h).reshape({kv, g_size, d});
    const Tensor scores = Tensor::empty({kv, g_size, t_max_}, DType::f32, rows.device());
    ops::gemm_batched(scores, q, k_cache.reshape({kv, t_max_, d}),
                      {.trans_b = true, .alpha = 1.0f / std::sqrt(static_cast<float>(d))});
    // Softmax over positions 0..p on the host (one row per query head), in double for the sums.
    std::vector<float> s = scores.to_floats();
    for (int64_t r = 0; r < h; ++r) {
      float* x = s.data() + r * t_max_;
      const float m = *std::max_element(x, x + p + 1);
      double sum = 0;
      for (int64_t j = 0; j <= p; ++j) sum += std::exp(static_cast<double>(x[j] - m));
      for (int64_t j = 0; j <= p; ++j)
        x[j] = static_cast<float>(std::exp(static_cast<double>(x[j] - m)) / sum);
      std::fill(x + p + 1, x + t_max_, 0.0f);
    }
    const Tensor probs = Tensor::from_floats(s, {kv, g_size, t_max_}, DType::f32, rows.device());
    ops::gemm_batched(attn.slice(i * h, (i + 1) * h).reshape({kv, g_size, d}), probs,
                      v_cache.reshape({kv, t_max_, d}));
  }

  Llama& model_;
  const LlamaConfig& c_;
  int64_t t_max_;
  Tensor inv_freq_;
  std::vector<Tensor> keys_, values_;  // per layer [KV * T_max, D]: head g's rows g T_max ...
};

}  // namespace

int64_t sample_token(const std::vector<float>& logits, int top_k, float temperature, uint64_t seed,
                     uint64_t draw) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  if (top_k <= 1) return std::max_element(logits.begin(), logits.end()) - logits.begin();
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
  const core::Philox4 r = core::philox_block(seed, 0x67656e6572617465ull /* "generate" */, draw);
  double u = static_cast<double>(r.v[0]) / 4294967296.0 * sum;
  for (int64_t j = 0; j < k; ++j) {
    if (u < p[j]) return order[j];
    u -= p[j];
  }
  return order[k - 1];
}

std::vector<int64_t> generate(Llama& model, const std::vector<int64_t>& prompt, int64_t count,
                              int top_k, float temperature, uint64_t seed) {
  const LlamaConfig& c = model.config();
  STOKER_CHECK_HINT(!prompt.empty(), "give a prompt of at least one token",
                    "llm::generate: the prompt is empty");
  STOKER_CHECK(count >= 0 && temperature > 0.0f, "llm::generate: count ", count,
               " must be >= 0 and temperature ", temperature, " positive");
  const int64_t total = static_cast<int64_t>(prompt.size()) + count;
  STOKER_CHECK_HINT(total <= c.context, "generate fewer tokens or shorten the prompt",
                    "llm::generate: the prompt's ", prompt.size(), " tokens + ", count,
                    " new ones = ", total, " is more than the model's context of ", c.context,
                    " (max_position_embeddings)");
  for (const int64_t id : prompt)
    STOKER_CHECK(id >= 0 && id < c.vocab, "llm::generate: prompt token ", id,
                 " is outside the vocabulary [0, ", c.vocab, ")");
  if (count == 0) return {};
  nn::NoSaveScope no_save;
  KvDecoder decoder(model, total);
  std::vector<int64_t> out;
  Tensor h = decoder.run(prompt, 0);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t next = sample_token(model.logits(h).to_floats(), top_k, temperature, seed,
                                      static_cast<uint64_t>(i));
    out.push_back(next);
    if (i + 1 < count) h = decoder.run({next}, static_cast<int64_t>(prompt.size()) + i);
  }
  return out;
}

}  // namespace stoker::llm
