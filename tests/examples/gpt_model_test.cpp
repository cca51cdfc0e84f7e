// examples/gpt's model on the CPU: parameter names and count (the tied weight once), gradients
// against central finite differences (the tied weight's rows used by the embedding and the head
// alike and by the head only), the tied gradient under accumulation and its single grad_ready
// after both uses, checkpointed blocks bit-identical to plain ones, and overfitting a periodic
// sequence until greedy generation continues it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dist/thread_communicator.h"
#include "gpt_block_reference.h"
#include "gpt_flops.h"
#include "gpt_model.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "test_util.h"

namespace stoker::gpt {
namespace {

GptConfig small_config(GptInit init = GptInit::torch, float dropout = 0.0f) {
  return {.vocab = 13,
          .context = 8,
          .layers = 2,
          .heads = 2,
          .d_model = 8,
          .dropout = dropout,
          .init = init};
}

// ids [B, T] and targets [B * T] from a fixed pattern that leaves some vocabulary ids unused
// (ids 11 and 12 never occur: their wte rows get gradient from the head only).
std::pair<Tensor, Tensor> fixed_batch(int64_t b, int64_t t, uint32_t seed) {
  std::vector<int64_t> ids, tg;
  for (int64_t i = 0; i < b * t; ++i) {
    ids.push_back((i * 7 + seed) % 11);
    tg.push_back((i * 5 + 3 * seed + 1) % 13);
  }
  return {Tensor::from_vector(ids, {b, t}), Tensor::from_vector(tg, {b * t})};
}

double loss_of(Gpt& model, const Tensor& ids, const Tensor& targets) {
  nn::NoSaveScope no_save;
  nn::CrossEntropyLoss loss;
  return loss.forward(model.forward(ids), targets).item();
}

// Zeroes every gradient and runs one forward/backward; returns the loss.
double forward_backward(Gpt& model, const Tensor& ids, const Tensor& targets, float scale = 1.0f,
                        bool zero = true) {
  if (zero)
    for (nn::Parameter* p : model.parameters()) p->zero_grad();
  nn::CrossEntropyLoss loss;
  const double l = loss.forward(model.forward(ids), targets).item();
  model.backward(loss.backward(scale));
  return l;
}

std::map<std::string, std::vector<float>> grads(Gpt& model) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, p] : model.named_parameters()) out[name] = p->grad().to_floats();
  return out;
}

TEST(GptModel, NamesFollowThePeerAndTheTiedWeightAppearsOnce) {
  nn::manual_seed(1);
  Gpt model(small_config());
  std::vector<std::string> expected{"wte.weight", "wpe.weight"};
  for (int l = 0; l < 2; ++l) {
    for (const char* n :
         {"ln1.weight", "ln1.bias", "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
          "ln2.weight", "ln2.bias", "fc.weight", "fc.bias", "fc2.weight", "fc2.bias"})
      expected.push_back("blocks." + std::to_string(l) + "." + n);
  }
  expected.push_back("lnf.weight");
  expected.push_back("lnf.bias");
  std::vector<std::string> names;
  std::set<const nn::Parameter*> distinct;
  for (const auto& [name, p] : model.named_parameters()) {
    names.push_back(name);
    distinct.insert(p);
  }
  EXPECT_EQ(names, expected);
  const std::vector<nn::Parameter*> params = model.parameters();
  EXPECT_EQ(params.size(), expected.size());
  EXPECT_EQ(distinct.size(), expected.size());
  EXPECT_EQ(params.front(), &model.wte().weight());
  const int64_t c = 8;
  EXPECT_EQ(model.parameter_count(), 13 * c + 8 * c + 2 * (12 * c * c + 13 * c) + 2 * c);

  // Checkpointing the blocks adds no name level.
  model.checkpoint_blocks(1);
  std::vector<std::string> after;
  for (const auto& [name, p] : model.named_parameters()) after.push_back(name);
  EXPECT_EQ(after, expected);
}

// The random generators' names are part of every training checkpoint (a resume looks each one up
// by name): they stay those of the model's first checkpoints.
TEST(GptModel, GeneratorNamesStayThoseOfEarlierCheckpoints) {
  nn::manual_seed(1);
  Gpt model(small_config(GptInit::torch, 0.1f));
  std::vector<std::string> names;
  model.visit_generators("", [&](const std::string& n, Generator&) { names.push_back(n); });
  std::vector<std::string> expected{"drop.generator"};
  for (int l = 0; l < 2; ++l) {
    expected.push_back("blocks." + std::to_string(l) + ".attn_drop.generator");
    expected.push_back("blocks." + std::to_string(l) + ".mlp.4.generator");
  }
  EXPECT_EQ(names, expected);
}

TEST(GptModel, Gpt2InitDrawsSmallWeightsAndZeroBiases) {
  nn::manual_seed(2);
  Gpt model({.vocab = 64, .context = 16, .layers = 4, .heads = 2, .d_model = 32});
  for (const auto& [name, p] : model.named_parameters()) {
    const std::vector<float> v = p->value().to_floats();
    double sq = 0.0;
    for (float x : v) sq += static_cast<double>(x) * x;
    const double rms = std::sqrt(sq / static_cast<double>(v.size()));
    if (name.find(".ln") != std::string::npos || name.rfind("lnf", 0) == 0) {
      EXPECT_EQ(v[0], name.ends_with("weight") ? 1.0f : 0.0f) << name;
    } else if (name.ends_with(".bias")) {
      EXPECT_EQ(rms, 0.0) << name;
    } else if (name.ends_with("proj.weight") || name.ends_with("fc2.weight")) {
      EXPECT_NEAR(rms, 0.02 / std::sqrt(8.0), 0.0025) << name;
    } else {
      EXPECT_NEAR(rms, 0.02, 0.003) << name;
    }
  }
}

TEST(GptModel, GradientsMatchFiniteDifferences) {
  nn::manual_seed(3);
  Gpt model(small_config());
  const auto [ids, targets] = fixed_batch(2, 6, 1);
  forward_backward(model, ids, targets);
  const auto analytic = grads(model);
  const auto named = model.named_parameters();
  auto param = [&](const std::string& n) -> nn::Parameter& {
    for (const auto& [name, p] : named)
      if (name == n) return *p;
    ADD_FAILURE() << "no parameter " << n;
    return *named.front().second;
  };
  // (parameter, element): wte row 2 (an id of the batch: embedding and head) and row 12 (never
  // an input: the head alone), positions, attention, MLP, LayerNorms.
  const std::vector<std::pair<std::string, int64_t>> probes{{"wte.weight", 2 * 8 + 3},
                                                            {"wte.weight", 12 * 8 + 5},
                                                            {"wte.weight", 7 * 8 + 0},
                                                            {"wpe.weight", 4 * 8 + 1},
                                                            {"blocks.0.ln1.weight", 6},
                                                            {"blocks.0.qkv.weight", 37},
                                                            {"blocks.0.qkv.bias", 17},
                                                            {"blocks.1.qkv.weight", 150},
                                                            {"blocks.0.proj.weight", 9},
                                                            {"blocks.1.ln2.bias", 2},
                                                            {"blocks.1.fc.weight", 100},
                                                            {"blocks.0.fc2.weight", 77},
                                                            {"blocks.1.fc2.bias", 4},
                                                            {"lnf.weight", 5},
                                                            {"lnf.bias", 0}};
  const float eps = 1e-2f;
  for (const auto& [name, i] : probes) {
    nn::Parameter& p = param(name);
    float* v = p.value().data<float>();
    const float keep = v[i];
    v[i] = keep + eps;
    p.value_changed();
    const double up = loss_of(model, ids, targets);
    v[i] = keep - eps;
    p.value_changed();
    const double down = loss_of(model, ids, targets);
    v[i] = keep;
    p.value_changed();
    const double numeric = (up - down) / (2.0 * eps);
    const double got = analytic.at(name)[static_cast<size_t>(i)];
    EXPECT_NEAR(got, numeric, 2e-3 + 2e-2 * std::abs(numeric)) << name << "[" << i << "]";
    EXPECT_NE(got, 0.0) << name << "[" << i << "] should have a gradient";
  }
  // Positions past the batch's T get no gradient.
  const std::vector<float>& dwpe = analytic.at("wpe.weight");
  for (int64_t k = 6 * 8; k < 8 * 8; ++k) EXPECT_EQ(dwpe[k], 0.0f);
}

TEST(GptModel, TiedGradientAccumulatesOverMicroBatches) {
  nn::manual_seed(4);
  Gpt model(small_config());
  const auto [ids, targets] = fixed_batch(4, 6, 2);
  forward_backward(model, ids, targets);
  const auto whole = grads(model);
  // The same 4 rows as two micro-batches of 2 at scale 1/2: the head's GEMM overwrites on the
  // first (beta 0 after zero_grad) and accumulates on the second.
  for (nn::Parameter* p : model.parameters()) p->zero_grad();
  for (int half = 0; half < 2; ++half) {
    const Tensor ids_h = ids.slice(2 * half, 2 * half + 2);
    const Tensor tg_h = targets.slice(12 * half, 12 * half + 12);
    forward_backward(model, ids_h, tg_h, 0.5f, /*zero=*/false);
  }
  const auto split = grads(model);
  for (const auto& [name, g] : whole) {
    const std::vector<float>& s = split.at(name);
    for (size_t k = 0; k < g.size(); ++k)
      ASSERT_NEAR(s[k], g[k], 1e-5f + 1e-4f * std::abs(g[k])) << name << "[" << k << "]";
  }
}

TEST(GptModel, EachGradientIsAnnouncedOnceAndTheTiedOneAfterBothUses) {
  nn::manual_seed(5);
  Gpt model(small_config());
  std::map<const nn::Parameter*, int> calls;
  std::vector<float> wte_at_ready, wte_at_wpe_ready;
  for (nn::Parameter* p : model.parameters()) {
    p->add_grad_ready_hook([&, p](nn::Parameter& q) {
      ++calls[p];
      if (&q == &model.wte().weight()) wte_at_ready = q.grad().to_floats();
      // wpe is announced after the head's GEMM and before the embedding's scatter-add.
      if (&q == &model.wpe().weight()) wte_at_wpe_ready = model.wte().weight().grad().to_floats();
    });
  }
  const auto [ids, targets] = fixed_batch(2, 8, 3);
  forward_backward(model, ids, targets);
  for (nn::Parameter* p : model.parameters()) EXPECT_EQ(calls[p], 1);
  // The tied gradient was announced complete: what the hook saw is the final gradient ...
  const std::vector<float> final_grad = model.wte().weight().grad().to_floats();
  EXPECT_EQ(wte_at_ready, final_grad);
  // ... which holds the embedding's part on the rows of ids in the batch (0..10) on top of the
  // head's part, and the head's part alone on rows 11 and 12.
  ASSERT_EQ(wte_at_wpe_ready.size(), final_grad.size());
  for (int64_t row = 0; row < 13; ++row) {
    bool differs = false;
    for (int64_t k = 0; k < 8; ++k)
      differs |= final_grad[row * 8 + k] != wte_at_wpe_ready[row * 8 + k];
    EXPECT_EQ(differs, row < 11) << "row " << row;
  }
  for (nn::Parameter* p : model.parameters()) p->clear_grad_ready_hooks();
}

TEST(GptModel, CheckpointedBlocksGiveBitIdenticalGradients) {
  for (const bool selective : {false, true}) {
    SCOPED_TRACE(selective ? "checkpoint + selective" : "checkpoint");
    const GptConfig config = small_config(GptInit::gpt2, /*dropout=*/0.1f);
    nn::manual_seed(6);
    Gpt plain(config);
    nn::manual_seed(6);
    Gpt ckpt(config);
    EXPECT_EQ(ckpt.checkpoint_blocks(1), 2);
    if (selective) nn::set_selective_recompute(ckpt, true);
    const auto [ids, targets] = fixed_batch(3, 8, 4);
    for (int step = 0; step < 2; ++step) {  // two backwards: dropout draws advance alike
      const double a = forward_backward(plain, ids, targets);
      const double b = forward_backward(ckpt, ids, targets);
      EXPECT_EQ(a, b);
      const auto ga = grads(plain), gb = grads(ckpt);
      for (const auto& [name, g] : ga) EXPECT_EQ(g, gb.at(name)) << name;
    }
  }
}

// Selective recomputation without checkpointing: the block lets fc give up ln2's output and
// rebuilds it from ln2 before the MLP's backward; the gradients keep their bits.
TEST(GptModel, SelectiveRecomputationGivesBitIdenticalGradients) {
  const GptConfig config = small_config(GptInit::gpt2, /*dropout=*/0.1f);
  nn::manual_seed(6);
  Gpt plain(config);
  nn::manual_seed(6);
  Gpt selective(config);
  nn::set_selective_recompute(selective, true);
  const auto [ids, targets] = fixed_batch(3, 8, 4);
  for (int step = 0; step < 2; ++step) {
    const double a = forward_backward(plain, ids, targets);
    const double b = forward_backward(selective, ids, targets);
    EXPECT_EQ(a, b);
    const auto ga = grads(plain), gb = grads(selective);
    for (const auto& [name, g] : ga) EXPECT_EQ(g, gb.at(name)) << name;
  }
}

// GptBlock fuses the attention half's residual add with ln2 (nn::LayerNorm::forward_add and
// backward_add): the block's output, input gradient and every parameter gradient have the bits
// of the unfused block — ops::add, ln2.forward; ln2.backward, ops::add — run on the same modules.
TEST(GptModel, FusedBlockGivesTheUnfusedBlocksBits) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    nn::manual_seed(11);
    GptBlock block(16, 2, 0.0f);
    nn::set_compute_dtype(block, dtype);
    const Tensor x = test::random_tensor({2, 5, 16}, dtype, 1, -2.0f, 2.0f);
    const Tensor dy = test::random_tensor({2, 5, 16}, dtype, 2);
    const auto param_grads = [&] {
      std::map<std::string, std::vector<uint8_t>> out;
      for (const auto& [name, p] : block.named_parameters()) out[name] = test::raw_bytes(p->grad());
      return out;
    };
    const auto zero = [&] {
      for (nn::Parameter* p : block.parameters()) p->zero_grad();
    };

    zero();
    const Tensor y = block.forward(x);
    const Tensor dx = block.backward(dy);
    const auto fused = param_grads();

    zero();
    const test_reference::BlockStep ref = test_reference::unfused_block_step(block, x, dy);
    const auto unfused = param_grads();

    EXPECT_TRUE(test::bit_identical(y, ref.y));
    EXPECT_TRUE(test::bit_identical(dx, ref.dx));
    ASSERT_EQ(fused.size(), 12u);
    for (const auto& [name, g] : fused) EXPECT_EQ(g, unfused.at(name)) << name;
  }
}

// The MLP's GELU fused into fc's forward GEMM and fc2's input-gradient GEMM
// (GptConfig::fuse_gelu, the default) gives the unfused model's bits on the CPU: loss, logits
// and every gradient, in fp32 and under bf16 compute, plain, with selective recomputation, with
// checkpointed blocks and with both; over two steps with dropout (the same draws). The names
// (parameters and generators) are the unfused model's.
TEST(GptModel, FusedGeluGivesTheUnfusedModelsBits) {
  const GptConfig unfused_config = [] {
    GptConfig c = small_config(GptInit::gpt2, /*dropout=*/0.1f);
    c.fuse_gelu = false;
    return c;
  }();
  const GptConfig fused_config = small_config(GptInit::gpt2, /*dropout=*/0.1f);
  ASSERT_TRUE(fused_config.fuse_gelu) << "fused is the default";
  const auto [ids, targets] = fixed_batch(3, 8, 4);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const bool checkpoint : {false, true}) {
      for (const bool selective : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (checkpoint ? " checkpoint" : "") +
                     (selective ? " selective" : ""));
        nn::manual_seed(6);
        Gpt unfused(unfused_config);
        nn::manual_seed(6);
        Gpt fused(fused_config);
        for (Gpt* m : {&unfused, &fused}) {
          nn::set_compute_dtype(*m, dtype);
          if (checkpoint) m->checkpoint_blocks(1);
          if (selective) nn::set_selective_recompute(*m, true);
        }
        std::vector<std::string> names_u, names_f;
        for (const auto& [name, p] : unfused.named_parameters()) names_u.push_back(name);
        for (const auto& [name, p] : fused.named_parameters()) names_f.push_back(name);
        ASSERT_EQ(names_f, names_u);
        std::vector<std::string> gens_u, gens_f;
        unfused.visit_generators("",
                                 [&](const std::string& n, Generator&) { gens_u.push_back(n); });
        fused.visit_generators("", [&](const std::string& n, Generator&) { gens_f.push_back(n); });
        EXPECT_EQ(gens_f, gens_u);
        for (int step = 0; step < 2; ++step) {
          const double a = forward_backward(unfused, ids, targets);
          const double b = forward_backward(fused, ids, targets);
          EXPECT_EQ(a, b) << "step " << step;
          const auto ga = grads(unfused), gb = grads(fused);
          for (const auto& [name, g] : ga) EXPECT_EQ(g, gb.at(name)) << name << " step " << step;
        }
        nn::NoSaveScope no_save;  // evaluation: the same logits
        EXPECT_TRUE(test::bit_identical(unfused.forward(ids), fused.forward(ids)));
      }
    }
  }
}

// The fused block's MLP: fc carries the GELU, no GELU module; the unfused one has it.
TEST(GptModel, FusedGeluBlockHasNoGeluModule) {
  nn::manual_seed(3);
  GptBlock fused(16, 2, 0.0f);
  GptBlock unfused(16, 2, 0.0f, /*fuse_gelu=*/false);
  EXPECT_EQ(fused.mlp().size(), 2u);
  EXPECT_EQ(unfused.mlp().size(), 3u);
  EXPECT_NE(fused.mlp().describe().find("gelu"), std::string::npos) << fused.mlp().describe();
  EXPECT_EQ(fused.mlp().describe().find("GELU"), std::string::npos) << fused.mlp().describe();
  EXPECT_NE(unfused.mlp().describe().find("GELU"), std::string::npos) << unfused.mlp().describe();
}

TEST(GptModel, OverfitsAPeriodicSequenceAndGreedyGenerationContinuesIt) {
  nn::manual_seed(7);
  Gpt model({.vocab = 16, .context = 12, .layers = 2, .heads = 2, .d_model = 32});
  // Rows of the period-5 cycle 3 9 1 14 6, each row starting at another phase.
  const std::vector<int64_t> cycle{3, 9, 1, 14, 6};
  std::vector<int64_t> ids, tg;
  const int64_t b = 5, t = 12;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t k = 0; k < t; ++k) {
      ids.push_back(cycle[(r + k) % 5]);
      tg.push_back(cycle[(r + k + 1) % 5]);
    }
  }
  const data::Batch batch{Tensor::from_vector(ids, {b, t}), Tensor::from_vector(tg, {b * t}), b};
  optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f, .weight_decay = 0.0f});
  nn::CrossEntropyLoss loss;
  train::Trainer trainer(model, loss, opt, {.progress_bar = false, .quiet = true});
  const double first = loss_of(model, batch.input, batch.target);
  EXPECT_NEAR(first, std::log(16.0), 0.3);  // GPT-2 init: near-uniform predictions
  for (int i = 0; i < 60; ++i) trainer.train_step({&batch, 1});
  const double last = loss_of(model, batch.input, batch.target);
  EXPECT_LT(last, 0.1 * first) << "first " << first << ", last " << last;

  const bool training = model.training();
  const std::vector<int64_t> out = generate(model, {9, 1, 14}, 10, /*top_k=*/1, 1.0f, 0);
  ASSERT_EQ(out.size(), 10u);
  for (size_t k = 0; k < out.size(); ++k) EXPECT_EQ(out[k], cycle[(4 + k) % 5]) << k;
  EXPECT_EQ(model.training(), training);
  // Top-k draws are a function of the seed.
  EXPECT_EQ(generate(model, {3}, 20, 4, 1.5f, 11), generate(model, {3}, 20, 4, 1.5f, 11));
}

TEST(GptModel, Bf16ComputeFollowsTheF32Model) {
  // Mixed precision on the CPU (the reference the GPU test compares with): bf16 logits, fp32
  // gradients (the tied one included) close to the fp32 model's.
  const auto [ids, targets] = fixed_batch(2, 8, 5);
  nn::manual_seed(9);
  Gpt f32(small_config());
  nn::manual_seed(9);
  Gpt half(small_config());
  nn::set_compute_dtype(half, DType::bf16);
  const double a = forward_backward(f32, ids, targets);
  const double b = forward_backward(half, ids, targets);
  EXPECT_EQ(half.forward(ids).dtype(), DType::bf16);
  EXPECT_NEAR(b, a, 0.02 * a);
  const auto ga = grads(f32), gb = grads(half);
  for (const auto& [name, g] : ga) {
    const std::vector<float>& h = gb.at(name);
    double scale = 0, diff = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      scale = std::max(scale, static_cast<double>(std::abs(g[k])));
      diff = std::max(diff, static_cast<double>(std::abs(h[k] - g[k])));
    }
    EXPECT_LE(diff, 0.05 * scale + 1e-6) << name;
  }
}

TEST(GptModel, TwoDataParallelRanksEqualOneRankOnTheUnionBatch) {
  // The tied gradient through the ReplicatedGradSync's buckets: two ranks with half a batch each
  // take the same AdamW steps as one rank with the whole batch.
  const auto [ids, targets] = fixed_batch(4, 8, 6);
  auto make_model = [] {
    nn::manual_seed(13);
    return std::make_unique<Gpt>(small_config(GptInit::gpt2));
  };
  auto train = [](Gpt& model, const data::Batch& batch, dist::GradSync* sync) {
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f});
    nn::CrossEntropyLoss loss;
    train::Trainer trainer(model, loss, opt,
                           {.clip_grad_norm = 1.0f,
                            .schedule = optim::cosine_with_warmup(2e-3f, 11, 12),
                            .progress_bar = false,
                            .quiet = true,
                            .grad_sync = sync});
    for (int step = 0; step < 12; ++step) trainer.train_step({&batch, 1});
  };
  auto single = make_model();
  train(*single, {ids, targets, 4}, nullptr);
  std::vector<std::unique_ptr<Gpt>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(make_model());
  dist::run_ranks(2, [&](dist::Communicator& comm) {
    const int r = comm.rank();
    Gpt& model = *ranks[static_cast<size_t>(r)];
    dist::ReplicatedGradSync sync(comm, model);
    train(model, {ids.slice(2 * r, 2 * r + 2), targets.slice(16 * r, 16 * r + 16), 2}, &sync);
  });
  const auto want = single->named_parameters();
  for (int r = 0; r < 2; ++r) {
    const auto got = ranks[static_cast<size_t>(r)]->named_parameters();
    for (size_t i = 0; i < want.size(); ++i) {
      const std::vector<float> a = got[i].second->value().to_floats();
      const std::vector<float> b = want[i].second->value().to_floats();
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(a[k], b[k], 1e-4f) << "rank " << r << " " << want[i].first << "[" << k << "]";
    }
  }
}

// GPT-2's sizes, and the FLOP model behind the MFU the example prints: 124M at T 1024 is
// 6 x 124,475,904 + 12 x 12 x 768 x 1024 = 860,101,632 FLOPs per token (the parameter count of
// the padded-vocabulary 124M: 50304 x 768 + 1024 x 768 + 12 (12 x 768^2 + 13 x 768) + 2 x 768).
TEST(GptModel, PresetsAndTheirFlopModel) {
  struct Size {
    const char* name;
    int64_t layers, heads, width;
  };
  for (const Size& s : {Size{"gpt2-124m", 12, 12, 768}, Size{"gpt2-350m", 24, 16, 1024},
                        Size{"gpt2-774m", 36, 20, 1280}, Size{"gpt2-1.5b", 48, 25, 1600}}) {
    const GptConfig c = GptConfig::preset(s.name);
    EXPECT_EQ(c.layers, s.layers) << s.name;
    EXPECT_EQ(c.heads, s.heads) << s.name;
    EXPECT_EQ(c.d_model, s.width) << s.name;
    EXPECT_EQ(c.d_model % c.heads, 0) << s.name;
    EXPECT_EQ(c.context, 1024) << s.name;
    EXPECT_EQ(c.vocab, 50304) << s.name;
  }
  const GptConfig c = GptConfig::preset("gpt2-124m");
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 124475904, 1024), 860101632.0);
  // 600k tok/s of it on a 989 TFLOP/s GPU: 52.2 %.
  EXPECT_NEAR(mfu(600000, 860101632.0, 989), 0.5218, 1e-4);
  EXPECT_EQ(mfu(600000, 860101632.0, 0), -1.0);
  try {
    GptConfig::preset("gpt2-xl");
    ADD_FAILURE() << "an unknown preset was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("gpt2-1.5b"), std::string::npos) << e.message();
  }
}

TEST(GptModel, HeadInTheLossGivesTheUnfusedLossGradientsAndSamples) {
  const auto [ids, targets] = fixed_batch(3, 8, 6);
  nn::manual_seed(12);
  Gpt plain(small_config());
  nn::manual_seed(12);
  Gpt fused(small_config());
  fused.set_head_in_loss(true);
  EXPECT_TRUE(fused.head_in_loss());
  const double want = forward_backward(plain, ids, targets, 0.5f);
  const auto want_grads = grads(plain);

  std::map<const nn::Parameter*, int> calls;
  std::vector<float> wte_at_ready;
  for (nn::Parameter* p : fused.parameters())
    p->add_grad_ready_hook([&, p](nn::Parameter& q) {
      ++calls[p];
      if (&q == &fused.wte().weight()) wte_at_ready = q.grad().to_floats();
    });
  const std::unique_ptr<nn::Loss> loss = fused.make_loss();
  ASSERT_TRUE(loss->fuses_backward());
  for (nn::Parameter* p : fused.parameters()) p->zero_grad();
  const Tensor h = fused.forward(ids);
  EXPECT_EQ(h.shape(), Shape({24, 8}));  // lnf's output, not [24, 13] logits
  const nn::Loss::ForwardBackward r = loss->forward_backward(h, targets, 0.5f);
  fused.backward(r.grad);
  EXPECT_NEAR(r.loss.item(), want, 1e-6);
  for (const auto& [name, g] : grads(fused)) {
    const std::vector<float>& w = want_grads.at(name);
    for (size_t k = 0; k < g.size(); ++k)
      ASSERT_NEAR(g[k], w[k], 1e-6f + 1e-5f * std::abs(w[k])) << name << "[" << k << "]";
  }
  // Every gradient announced once; the tied one after the loss's head part and the embedding's.
  for (nn::Parameter* p : fused.parameters()) EXPECT_EQ(calls[p], 1);
  EXPECT_EQ(wte_at_ready, fused.wte().weight().grad().to_floats());
  for (nn::Parameter* p : fused.parameters()) p->clear_grad_ready_hooks();

  // The logits of the head-in-loss model are the plain model's; sampling agrees.
  {
    nn::NoSaveScope no_save;
    const std::vector<float> a = plain.forward(ids).to_floats();
    const std::vector<float> b = fused.logits(fused.forward(ids)).to_floats();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-5f) << k;
  }
  EXPECT_EQ(generate(plain, {3, 4}, 6, 3, 1.0f, 5), generate(fused, {3, 4}, 6, 3, 1.0f, 5));
  EXPECT_THROW(fused.backward(Tensor::zeros({24, 13}, DType::f32)), Error);  // logits-shaped
}

TEST(GptModel, TrainerStepsWithTheHeadInTheLossFollowThePlainModel) {
  const auto [ids, targets] = fixed_batch(4, 8, 7);
  const data::Batch batch{ids, targets, 4};
  std::vector<std::vector<float>> weights;
  std::vector<double> eval_loss;
  for (const bool in_loss : {false, true}) {
    nn::manual_seed(13);
    Gpt model(small_config());
    model.set_head_in_loss(in_loss);
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f});
    const std::unique_ptr<nn::Loss> loss = model.make_loss();
    train::Trainer trainer(model, *loss, opt, {.progress_bar = false, .quiet = true});
    // Two micro-batches of 2: the head's gradient overwrites, then accumulates.
    const data::Batch halves[2] = {{ids.slice(0, 2), targets.slice(0, 16), 2},
                                   {ids.slice(2, 4), targets.slice(16, 32), 2}};
    for (int step = 0; step < 3; ++step) trainer.train_step({halves, 2});
    trainer.train_step({&batch, 1});
    weights.push_back({});
    for (const auto& [name, p] : model.named_parameters()) {
      const std::vector<float> v = p->value().to_floats();
      weights.back().insert(weights.back().end(), v.begin(), v.end());
    }
    data::TensorBatches source(ids, targets.reshape({4, 8}), {.batch_size = 4, .shuffle = false});
    eval_loss.push_back(trainer.evaluate(source).loss);
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t k = 0; k < weights[0].size(); ++k)
    ASSERT_NEAR(weights[1][k], weights[0][k], 1e-5f) << k;
  EXPECT_NEAR(eval_loss[1], eval_loss[0], 1e-5);
}

TEST(GptModel, BadInputsNameTheFix) {
  nn::manual_seed(8);
  Gpt model(small_config());
  EXPECT_THROW(model.forward(Tensor::zeros({2, 9}, DType::i64)), Error);  // > context
  EXPECT_THROW(model.forward(Tensor::zeros({2, 4}, DType::f32)), Error);  // not ids
  EXPECT_THROW(GptConfig::preset("gpt5"), Error);
  EXPECT_THROW(Gpt({.vocab = 8, .context = 4, .layers = 1, .heads = 3, .d_model = 8}), Error);
  EXPECT_EQ(GptConfig::preset("gpt2-124m").vocab, 50304);
}

}  // namespace
}  // namespace stoker::gpt
