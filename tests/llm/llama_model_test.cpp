// examples/llm's model on the CPU: transformers' parameter names and the presets' parameter
// counts (those of the published Llama 3.2 1B / 3B and Llama 3 8B), gradients against central
// finite differences (tied and untied heads; with document positions), the head in the loss
// equal to logits + cross-entropy, checkpointed blocks bit-identical to plain ones, every
// gradient announced once, and training that overfits a short periodic sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "llama_model.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "test_util.h"

namespace stoker::llm {
namespace {

LlamaConfig small_config(bool tied) {
  LlamaConfig c{.vocab = 13,
                .d_model = 16,
                .layers = 2,
                .heads = 4,
                .kv_heads = 2,
                .head_dim = 4,
                .ffn = 24,
                .context = 16,
                .tie_embeddings = tied,
                .init_std = 0.3f};
  c.rope = {.head_dim = 4,
            .theta = 10000.0,
            .llama3_scaling = true,
            .factor = 8.0,
            .low_freq_factor = 1.0,
            .high_freq_factor = 4.0,
            .original_max_position_embeddings = 4};
  return c;
}

std::pair<Tensor, Tensor> fixed_batch(int64_t b, int64_t t, uint32_t seed) {
  std::vector<int64_t> ids, tg;
  for (int64_t i = 0; i < b * t; ++i) {
    ids.push_back((i * 7 + seed) % 11);  // ids 11 and 12 never occur
    tg.push_back((i * 5 + 3 * seed + 1) % 13);
  }
  return {Tensor::from_vector(ids, {b, t}), Tensor::from_vector(tg, {b * t})};
}

double loss_of(Llama& model, const Tensor& ids, const Tensor& targets) {
  nn::NoSaveScope no_save;
  nn::CrossEntropyLoss loss;
  return loss.forward(model.forward(ids), targets).item();
}

double forward_backward(Llama& model, const Tensor& ids, const Tensor& targets) {
  for (nn::Parameter* p : model.parameters()) p->zero_grad();
  nn::CrossEntropyLoss loss;
  const double l = loss.forward(model.forward(ids), targets).item();
  model.backward(loss.backward(1.0f));
  return l;
}

std::map<std::string, std::vector<float>> grads(Llama& model) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, p] : model.named_parameters()) out[name] = p->grad().to_floats();
  return out;
}

TEST(LlamaModel, NamesAndShapesAreTransformersWithTheTwoFusedWeights) {
  for (const bool tied : {false, true}) {
    nn::manual_seed(1);
    Llama model(small_config(tied));
    std::map<std::string, Shape> got;
    int64_t total = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      got[name] = p->shape();
      total += p->numel();
    }
    std::map<std::string, Shape> want{{"embed_tokens.weight", {13, 16}}, {"norm.weight", {16}}};
    for (int l = 0; l < 2; ++l) {
      const std::string b = "layers." + std::to_string(l) + ".";
      want[b + "input_layernorm.weight"] = {16};
      want[b + "self_attn.qkv_proj.weight"] = {(4 + 2 * 2) * 4, 16};
      want[b + "self_attn.o_proj.weight"] = {16, 16};
      want[b + "post_attention_layernorm.weight"] = {16};
      want[b + "mlp.gate_up_proj.weight"] = {48, 16};
      want[b + "mlp.down_proj.weight"] = {16, 24};
    }
    if (!tied) want["lm_head.weight"] = {13, 16};
    EXPECT_EQ(got, want) << (tied ? "tied" : "untied");
    EXPECT_EQ(total, model.config().parameter_count());
    EXPECT_EQ(&model.head_weight() == &model.embed_tokens().weight(), tied);
  }
}

TEST(LlamaModel, PresetsHaveThePublishedParameterCounts) {
  EXPECT_EQ(LlamaConfig::preset("llama3.2-1b").parameter_count(), 1235814400);
  EXPECT_EQ(LlamaConfig::preset("llama3.2-3b").parameter_count(), 3212749824);
  EXPECT_EQ(LlamaConfig::preset("llama3-8b").parameter_count(), 8030261248);
  const LlamaConfig debug = LlamaConfig::preset("llama3-debug");
  EXPECT_EQ(debug.vocab, 1024);
  EXPECT_EQ(debug.heads % debug.kv_heads, 0);
  EXPECT_TRUE(test::throws_error_with([] { LlamaConfig::preset("llama2-7b"); },
                                      {"llama2-7b", "llama3-debug", "llama3.2-1b", "llama3-8b"}));
}

TEST(LlamaModel, InitIsTransformersNormalWithUnitNorms) {
  nn::manual_seed(2);
  LlamaConfig c = small_config(false);
  c.init_std = 0.02f;
  Llama model(c);
  for (const auto& [name, p] : model.named_parameters()) {
    const std::vector<float> v = p->value().to_floats();
    if (p->shape().rank() == 1) {
      for (float x : v) ASSERT_EQ(x, 1.0f) << name;
      continue;
    }
    double sq = 0;
    for (float x : v) sq += static_cast<double>(x) * x;
    const double std = std::sqrt(sq / static_cast<double>(v.size()));
    EXPECT_NEAR(std, 0.02, 0.006) << name;
  }
}

void check_finite_differences(bool tied, bool documents) {
  SCOPED_TRACE(std::string(tied ? "tied" : "untied") + (documents ? ", documents" : ""));
  nn::manual_seed(3);
  Llama model(small_config(tied));
  const auto [ids, targets] = fixed_batch(2, 7, 1);
  if (documents) {
    // Row 0: documents of 3, 1 and 3 tokens; row 1: one document starting before the row.
    const std::vector<int64_t> pos{0, 1, 2, 0, 0, 1, 2, 5, 6, 7, 8, 9, 10, 11};
    model.set_positions(Tensor::from_vector(pos, {2, 7}), true);
  }
  forward_backward(model, ids, targets);
  const auto analytic = grads(model);
  const auto named = model.named_parameters();
  std::vector<std::pair<std::string, int64_t>> probes{
      {"embed_tokens.weight", 2 * 16 + 3},
      {"layers.0.input_layernorm.weight", 6},
      {"layers.0.self_attn.qkv_proj.weight", 37},           // a query row
      {"layers.1.self_attn.qkv_proj.weight", 16 * 16 + 9},  // a key row
      {"layers.1.self_attn.qkv_proj.weight", 28 * 16 + 2},  // a value row
      {"layers.0.self_attn.o_proj.weight", 9},
      {"layers.1.post_attention_layernorm.weight", 2},
      {"layers.0.mlp.gate_up_proj.weight", 100},
      {"layers.1.mlp.gate_up_proj.weight", 30 * 16 + 1},
      {"layers.0.mlp.down_proj.weight", 77},
      {"norm.weight", 5}};
  // Row 12 is never an input: tied, the head alone gives it a gradient; untied, lm_head's row.
  probes.push_back(tied ? std::pair<std::string, int64_t>{"embed_tokens.weight", 12 * 16 + 5}
                        : std::pair<std::string, int64_t>{"lm_head.weight", 12 * 16 + 4});
  const float eps = 1e-2f;
  for (const auto& [name, i] : probes) {
    nn::Parameter* p = nullptr;
    for (const auto& [n, q] : named)
      if (n == name) p = q;
    ASSERT_NE(p, nullptr) << name;
    float* v = p->value().data<float>();
    const float keep = v[i];
    v[i] = keep + eps;
    p->value_changed();
    const double up = loss_of(model, ids, targets);
    v[i] = keep - eps;
    p->value_changed();
    const double down = loss_of(model, ids, targets);
    v[i] = keep;
    p->value_changed();
    const double numeric = (up - down) / (2.0 * eps);
    const double got = analytic.at(name)[static_cast<size_t>(i)];
    EXPECT_NEAR(got, numeric, 2e-3 + 2e-2 * std::abs(numeric)) << name << "[" << i << "]";
    EXPECT_NE(got, 0.0) << name << "[" << i << "] should have a gradient";
  }
}

TEST(LlamaModel, GradientsMatchFiniteDifferences) {
  check_finite_differences(false, false);
  check_finite_differences(true, false);
  check_finite_differences(true, true);
}

// A document mask changes what a token sees: the logits of a row's later documents differ from
// those of the unmasked model, the first document's do not, and a token that starts a document
// sees only itself (its logits equal those of the token alone at position 0).
TEST(LlamaModel, DocumentPositionsMaskEarlierDocuments) {
  nn::manual_seed(4);
  Llama model(small_config(false));
  nn::NoSaveScope no_save;
  const auto [ids, targets] = fixed_batch(1, 6, 2);
  const std::vector<float> plain = model.forward(ids).to_floats();
  model.set_positions(Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2}, {1, 6}), true);
  const std::vector<float> masked = model.forward(ids).to_floats();
  for (int64_t k = 0; k < 3 * 13; ++k) EXPECT_NEAR(masked[k], plain[k], 1e-5f) << k;
  bool differs = false;
  for (int64_t k = 3 * 13; k < 6 * 13; ++k) differs |= std::abs(masked[k] - plain[k]) > 1e-4f;
  EXPECT_TRUE(differs);
  // The second document alone gives its logits.
  model.set_positions(Tensor(), false);
  const std::vector<int64_t> all = ids.to_vector<int64_t>();
  const Tensor tail = Tensor::from_vector(std::vector<int64_t>(all.begin() + 3, all.end()), {1, 3});
  const std::vector<float> alone = model.forward(tail).to_floats();
  for (int64_t k = 0; k < 3 * 13; ++k) EXPECT_NEAR(masked[3 * 13 + k], alone[k], 1e-5f) << k;
}

TEST(LlamaModel, HeadInTheLossGivesTheUnfusedLossAndGradients) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const auto [ids, targets] = fixed_batch(3, 8, 6);
    nn::manual_seed(12);
    Llama plain(small_config(tied));
    nn::manual_seed(12);
    Llama fused(small_config(tied));
    fused.set_head_in_loss(true);
    const double want = forward_backward(plain, ids, targets);
    const auto want_grads = grads(plain);
    std::map<const nn::Parameter*, int> calls;
    for (nn::Parameter* p : fused.parameters())
      p->add_grad_ready_hook([&, p](nn::Parameter&) { ++calls[p]; });
    const std::unique_ptr<nn::Loss> loss = fused.make_loss();
    for (nn::Parameter* p : fused.parameters()) p->zero_grad();
    const Tensor h = fused.forward(ids);
    EXPECT_EQ(h.shape(), Shape({24, 16}));
    const nn::Loss::ForwardBackward r = loss->forward_backward(h, targets, 1.0f);
    fused.backward(r.grad);
    EXPECT_NEAR(r.loss.item(), want, 1e-5);
    for (const auto& [name, g] : grads(fused)) {
      const std::vector<float>& w = want_grads.at(name);
      for (size_t k = 0; k < g.size(); ++k)
        ASSERT_NEAR(g[k], w[k], 1e-5f + 1e-4f * std::abs(w[k])) << name << "[" << k << "]";
    }
    for (nn::Parameter* p : fused.parameters()) EXPECT_EQ(calls[p], 1) << "announced once";
    for (nn::Parameter* p : fused.parameters()) p->clear_grad_ready_hooks();
  }
}

TEST(LlamaModel, EveryGradientIsAnnouncedOnceWithTheLogitsHead) {
  for (const bool tied : {false, true}) {
    nn::manual_seed(5);
    Llama model(small_config(tied));
    std::map<const nn::Parameter*, int> calls;
    for (nn::Parameter* p : model.parameters())
      p->add_grad_ready_hook([&, p](nn::Parameter&) { ++calls[p]; });
    const auto [ids, targets] = fixed_batch(2, 5, 3);
    forward_backward(model, ids, targets);
    for (nn::Parameter* p : model.parameters()) EXPECT_EQ(calls[p], 1) << (tied ? "tied" : "");
    for (nn::Parameter* p : model.parameters()) p->clear_grad_ready_hooks();
  }
}

TEST(LlamaModel, CheckpointedBlocksGiveBitIdenticalGradients) {
  nn::manual_seed(6);
  Llama plain(small_config(true));
  nn::manual_seed(6);
  Llama ckpt(small_config(true));
  EXPECT_EQ(ckpt.checkpoint_blocks(1), 2);
  const auto [ids, targets] = fixed_batch(3, 8, 4);
  const std::vector<int64_t> pos{0, 1, 2, 3, 0, 1, 0, 1, 0, 1, 2, 3,
                                 4, 5, 6, 7, 3, 4, 5, 0, 1, 2, 3, 4};
  for (Llama* m : {&plain, &ckpt}) m->set_positions(Tensor::from_vector(pos, {3, 8}), true);
  EXPECT_EQ(forward_backward(plain, ids, targets), forward_backward(ckpt, ids, targets));
  const auto ga = grads(plain), gb = grads(ckpt);
  for (const auto& [name, g] : ga) EXPECT_EQ(g, gb.at(name)) << name;
}

TEST(LlamaModel, OverfitsAPeriodicSequence) {
  nn::manual_seed(7);
  LlamaConfig c = small_config(true);
  c.init_std = 0.02f;
  Llama model(c);
  std::vector<int64_t> seq;
  for (int i = 0; i < 13; ++i) seq.push_back((i * 3) % 7);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>(seq.begin(), seq.end() - 1), {1, 12});
  const Tensor targets =
      Tensor::from_vector(std::vector<int64_t>(seq.begin() + 1, seq.end()), {12});
  optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f, .weight_decay = 0.0f});
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    const double l = forward_backward(model, ids, targets);
    if (step == 0) first = l;
    last = l;
    opt.step();
  }
  EXPECT_GT(first, 1.5);
  EXPECT_LT(last, 0.05) << "from " << first;
}

TEST(LlamaModel, BadInputsNameTheFix) {
  LlamaConfig c = small_config(false);
  c.kv_heads = 3;
  EXPECT_TRUE(test::throws_error_with([&] { Llama m(c); }, {"num_key_value_heads", "3"}));
  nn::manual_seed(8);
  Llama model(small_config(false));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        model.forward(Tensor::zeros({1, 17}, DType::i64));
      },
      {"17", "max_position_embeddings"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        model.forward(Tensor::zeros({2, 3}, DType::f32));
      },
      {"ids", "i32 or i64"}));
}

}  // namespace
}  // namespace stoker::llm
