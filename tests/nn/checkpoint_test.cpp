// Activation checkpointing and selective recomputation on the CPU (nn/checkpoint.h):
// - gradients (and outputs, input gradients, generator positions) are bit-identical with and
//   without checkpointing, with dropout on: per block, every k-th block, nested, inside a
//   Residual, under bf16 and f16, with gradient accumulation, and with selective recomputation
//   alone and combined with checkpoints;
// - names of parameters, buffers and generators do not change; BatchNorm's running statistics
//   move once per forward, not again in the recomputation;
// - peak memory of an N-block stack equals the bytes predicted from the sizes (derivation in
//   PeakMemoryFallsAsPredicted).

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/layernorm.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

// A transformer MLP block: x + Dropout(Linear(GELU(Linear(LayerNorm(x))))), with dropout on
// the hidden activation too, so both rebuild runs of selective recomputation (GELU alone and
// GELU -> Dropout) occur.
std::unique_ptr<Module> mlp_block(int64_t d, int64_t h, float p) {
  auto body = make<Sequential>();
  body->add(make<LayerNorm>(d));
  body->add(make<Linear>(d, h));
  body->add(make<GELU>());
  if (p > 0.0f) body->add(make<Dropout>(p));
  body->add(make<Linear>(h, d));
  if (p > 0.0f) body->add(make<Dropout>(p));
  return make<Residual>(std::move(body));
}

std::unique_ptr<Sequential> mlp_stack(int blocks, int64_t d, int64_t h, float p, uint64_t seed) {
  manual_seed(seed);
  auto net = make<Sequential>();
  for (int i = 0; i < blocks; ++i) net->add_module(mlp_block(d, h, p));
  return net;
}

struct Pass {
  std::vector<Tensor> ys, dxs;
};

// `micro` forward/backward pairs (gradients accumulate across them, as under grad_accum_steps)
// on fixed random inputs of `dtype`.
Pass run_passes(Module& m, const Shape& x_shape, DType dtype, int micro) {
  for (Parameter* p : m.parameters()) p->zero_grad();
  Pass out;
  for (int i = 0; i < micro; ++i) {
    const Tensor x = test::random_tensor(x_shape, dtype, 100 + i);
    const Tensor y = m.forward(x);
    const Tensor dy = test::random_tensor(y.shape(), dtype, 200 + i);
    out.ys.push_back(y);
    out.dxs.push_back(m.backward(dy));
  }
  return out;
}

// Runs two builds of the same model (same seed; the second may checkpoint or recompute) and
// expects identical bits in outputs, input gradients, every parameter gradient and every
// generator position.
void expect_bit_identical(Sequential& plain, Sequential& other, DType dtype, int micro,
                          const Shape& x_shape, const std::string& what, bool same_names = true) {
  SCOPED_TRACE(what);
  const Pass a = run_passes(plain, x_shape, dtype, micro);
  const Pass b = run_passes(other, x_shape, dtype, micro);
  for (int i = 0; i < micro; ++i) {
    EXPECT_TRUE(test::bit_identical(b.ys[i], a.ys[i])) << "output of micro-batch " << i;
    EXPECT_TRUE(test::bit_identical(b.dxs[i], a.dxs[i])) << "dx of micro-batch " << i;
  }
  const auto pa = plain.named_parameters(), pb = other.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    if (same_names) EXPECT_EQ(pb[i].first, pa[i].first);
    EXPECT_TRUE(test::bit_identical(pb[i].second->grad(), pa[i].second->grad()))
        << "gradient of " << pa[i].first;
  }
  std::vector<uint64_t> ga, gb;
  plain.visit_generators("", [&](const std::string&, Generator& g) { ga.push_back(g.offset()); });
  other.visit_generators("", [&](const std::string&, Generator& g) { gb.push_back(g.offset()); });
  EXPECT_EQ(gb, ga) << "generator positions after the passes";
}

// The same with one builder and a transformation of the second copy.
void expect_bit_identical(const std::function<std::unique_ptr<Sequential>()>& build,
                          const std::function<void(Sequential&)>& transform, DType dtype, int micro,
                          const Shape& x_shape, const std::string& what) {
  std::unique_ptr<Sequential> plain = build();
  std::unique_ptr<Sequential> other = build();
  transform(*other);
  expect_bit_identical(*plain, *other, dtype, micro, x_shape, what);
}

Checkpoint& as_checkpoint(Module& m) {
  auto* c = dynamic_cast<Checkpoint*>(&m);
  EXPECT_NE(c, nullptr) << m.describe();
  return *c;
}

TEST(CheckpointTest, GradientsBitIdenticalWithDropout) {
  const Shape xs{3, 5, 16};  // leading dims flattened by Linear/LayerNorm
  const auto build = [] { return mlp_stack(4, 16, 64, 0.2f, 11); };
  expect_bit_identical(
      build, [](Sequential& s) { EXPECT_EQ(checkpoint_every(s, 1), 4); }, DType::f32, 1, xs,
      "every block");
  expect_bit_identical(
      build, [](Sequential& s) { EXPECT_EQ(checkpoint_every(s, 2), 2); }, DType::f32, 1, xs,
      "every second block");
  expect_bit_identical(
      build, [](Sequential& s) { set_selective_recompute(s, true); }, DType::f32, 1, xs,
      "selective recomputation");
  expect_bit_identical(
      build,
      [](Sequential& s) {
        checkpoint_every(s, 1);
        set_selective_recompute(s, true);
      },
      DType::f32, 1, xs, "checkpoints and selective recomputation");
}

TEST(CheckpointTest, GradientsBitIdenticalUnderAccumulationAndHalfPrecision) {
  const Shape xs{6, 16};
  const auto build = [] { return mlp_stack(3, 16, 48, 0.1f, 12); };
  const auto ckpt = [](Sequential& s) { checkpoint_every(s, 1); };
  expect_bit_identical(build, ckpt, DType::f32, 3, xs, "f32, 3 accumulated micro-batches");
  expect_bit_identical(build, ckpt, DType::bf16, 2, xs, "bf16, 2 micro-batches");
  expect_bit_identical(build, ckpt, DType::f16, 2, xs, "f16, 2 micro-batches");
  const auto both = [](Sequential& s) {
    checkpoint_every(s, 1);
    set_selective_recompute(s, true);
  };
  expect_bit_identical(build, both, DType::bf16, 2, xs, "bf16, checkpoints + selective");
}

TEST(CheckpointTest, NestedAndInsideResidual) {
  const Shape xs{4, 12};
  // Outer checkpoints over pairs of blocks, each block checkpointed again inside.
  {
    auto plain = mlp_stack(4, 12, 40, 0.25f, 13);
    manual_seed(13);
    auto nested = make<Sequential>();
    for (int pair = 0; pair < 2; ++pair) {
      auto seg = make<Sequential>();
      for (int i = 0; i < 2; ++i) seg->add(make<Checkpoint>(mlp_block(12, 40, 0.25f)));
      nested->add(make<Checkpoint>(std::move(seg)));
    }
    // The pairs are Sequentials (a name level of their own); the Checkpoints add none.
    expect_bit_identical(*plain, *nested, DType::f32, 2, xs, "nested checkpoints",
                         /*same_names=*/false);
    EXPECT_EQ(nested->named_parameters()[0].first, "0.0.body.0.weight");
  }
  // A Checkpoint as the body of a Residual (the residual add stays outside).
  {
    const auto build = [](bool ckpt) {
      manual_seed(14);
      auto net = make<Sequential>();
      for (int i = 0; i < 3; ++i) {
        std::unique_ptr<Module> body =
            make<Sequential>(make<LayerNorm>(12), make<Linear>(12, 40), make<GELU>(),
                             make<Dropout>(0.3f), make<Linear>(40, 12));
        if (ckpt) body = make<Checkpoint>(std::move(body));
        net->add(make<Residual>(std::move(body)));
      }
      return net;
    };
    auto plain = build(false);
    auto inside = build(true);
    expect_bit_identical(*plain, *inside, DType::f32, 2, xs, "checkpoint inside a residual");
  }
}

// Selective recomputation with a LayerNorm as the consumer of a GELU output and a ReLU as the
// start of a run (ReLU hands back the output it keeps: nothing is freed, nothing recomputed).
TEST(CheckpointTest, SelectiveRecomputationForLayerNormAndReLU) {
  const auto build = [] {
    manual_seed(20);
    return std::make_unique<Sequential>(make<Linear>(8, 32), make<GELU>(), make<LayerNorm>(32),
                                        make<Linear>(32, 16), make<ReLU>(), make<Dropout>(0.2f),
                                        make<Linear>(16, 8));
  };
  expect_bit_identical(
      build, [](Sequential& s) { set_selective_recompute(s, true); }, DType::f32, 2, {5, 8},
      "selective: GELU -> LayerNorm, ReLU -> Dropout -> Linear");
  // After the forward, the selective model holds the GELU output (5 x 32 f32) less: LayerNorm
  // gave it up; and the LayerNorm output (5 x 32 f32), which Linear(32, 16) gave up (rebuilt
  // from the rebuilt GELU output). (ReLU -> Dropout -> Linear frees the dropout output, 5 x 16
  // f32, too.)
  auto plain = build(), selective = build();
  set_selective_recompute(*selective, true);
  const Tensor x = test::random_tensor({5, 8}, DType::f32, 4);
  const auto kept = [&](Module& m) {
    const size_t base = core::memory_stats(Device::cpu()).current_bytes;
    const Tensor y = m.forward(x);
    const size_t held = core::memory_stats(Device::cpu()).current_bytes - base;
    m.backward(y);
    return held;
  };
  EXPECT_EQ(kept(*plain) - kept(*selective), size_t{2 * 5 * 32 * 4 + 5 * 16 * 4});
}

TEST(CheckpointTest, NamesDoNotChange) {
  auto plain = mlp_stack(3, 8, 16, 0.1f, 15);
  auto ckpt = mlp_stack(3, 8, 16, 0.1f, 15);
  checkpoint_every(*ckpt, 1);
  EXPECT_EQ(ckpt->describe().rfind("Sequential(Checkpoint(Residual(", 0), 0u) << ckpt->describe();
  std::vector<std::string> na, nb;
  for (auto& [n, p] : plain->named_parameters()) na.push_back(n);
  for (auto& [n, p] : ckpt->named_parameters()) nb.push_back(n);
  EXPECT_EQ(nb, na);
  EXPECT_EQ(na.front(), "0.body.0.weight");  // torch: Sequential -> Residual.body -> LayerNorm
  std::vector<std::string> ga, gb;
  plain->visit_generators("", [&](const std::string& n, Generator&) { ga.push_back(n); });
  ckpt->visit_generators("", [&](const std::string& n, Generator&) { gb.push_back(n); });
  EXPECT_EQ(gb, ga);
  EXPECT_EQ(ga.front(), "0.body.3.generator");
  // Idempotent: already wrapped children are left alone.
  EXPECT_EQ(checkpoint_every(*ckpt, 1), 0);
  EXPECT_EQ(as_checkpoint((*ckpt)[0]).body().describe(), (*plain)[0].describe());
}

TEST(CheckpointTest, BatchNormRunningStatisticsMoveOncePerForward) {
  const auto build = [] {
    manual_seed(16);
    auto net = make<Sequential>();
    net->add(make<Conv2d>(3, 4, 3, Conv2dOptions{.padding = 1}));
    net->add(make<BatchNorm2d>(4));
    net->add(make<ReLU>());
    net->add(make<Conv2d>(4, 4, 3, Conv2dOptions{.padding = 1}));
    net->add(make<BatchNorm2d>(4));
    return net;
  };
  auto plain = build();
  auto ckpt = build();
  // One checkpoint around the whole network.
  auto outer = make<Sequential>();
  outer->add_module(std::move(ckpt));
  checkpoint_every(*outer, 1);
  const Pass a = run_passes(*plain, {2, 3, 5, 5}, DType::f32, 2);
  const Pass b = run_passes(*outer, {2, 3, 5, 5}, DType::f32, 2);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(test::bit_identical(b.dxs[i], a.dxs[i]));
  std::vector<Tensor> ba, bb;
  plain->visit_buffers("", [&](const std::string&, Tensor& t) { ba.push_back(t); });
  outer->visit_buffers("", [&](const std::string&, Tensor& t) { bb.push_back(t); });
  ASSERT_EQ(ba.size(), 4u);
  ASSERT_EQ(bb.size(), ba.size());
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(test::bit_identical(bb[i], ba[i])) << i;
  const auto pa = plain->parameters(), pb = outer->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(test::bit_identical(pb[i]->grad(), pa[i]->grad())) << i;
}

TEST(CheckpointTest, EvaluationModeAndErrors) {
  auto plain = mlp_stack(2, 8, 16, 0.5f, 17);
  auto ckpt = mlp_stack(2, 8, 16, 0.5f, 17);
  checkpoint_every(*ckpt, 1);
  plain->set_training(false);
  ckpt->set_training(false);
  const Tensor x = test::random_tensor({3, 8}, DType::f32, 1);
  EXPECT_TRUE(test::bit_identical(ckpt->forward(x), plain->forward(x)));
  // A backward needs a saving forward before it, and only one.
  Checkpoint c(make<Linear>(4, 4));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        c.backward(Tensor::zeros({1, 4}, DType::f32));
      },
      {"Checkpoint(Linear", "backward without a saving forward"}));
  c.forward(Tensor::zeros({1, 4}, DType::f32));
  c.backward(Tensor::zeros({1, 4}, DType::f32));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        c.backward(Tensor::zeros({1, 4}, DType::f32));
      },
      {"backward without a saving forward"}));
  {
    NoSaveScope no_save;
    c.forward(Tensor::zeros({1, 4}, DType::f32));
  }
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        c.backward(Tensor::zeros({1, 4}, DType::f32));
      },
      {"NoSaveScope"}));
  Sequential s(make<ReLU>());
  EXPECT_TRUE(test::throws_error_with([&] { checkpoint_every(s, 0); }, {"must be >= 1"}));
}

TEST(CheckpointTest, ScopesNestAndRestore) {
  EXPECT_TRUE(saving_activations());
  EXPECT_FALSE(recomputing());
  {
    NoSaveScope a;
    EXPECT_FALSE(saving_activations());
    {
      RecomputeScope b;
      EXPECT_TRUE(saving_activations());
      EXPECT_TRUE(recomputing());
      {
        NoSaveScope c;
        EXPECT_FALSE(saving_activations());
        EXPECT_TRUE(recomputing());
      }
      EXPECT_TRUE(saving_activations());
    }
    EXPECT_FALSE(saving_activations());
    EXPECT_FALSE(recomputing());
  }
  EXPECT_TRUE(saving_activations());
}

// Peak memory of an N-block stack, f32 on the CPU, block = x + Linear(h->d)(GELU(Linear(d->h)(x)))
// on B rows. With a = B*d*4 bytes (a block input/output) and b = B*h*4 bytes (a hidden
// activation), counting everything allocated after the baseline (parameters, gradients, x and
// dy already exist; the caller keeps y):
//
// plain: each block keeps U = Linear1(x) (GELU's input) and G = GELU(U) (Linear2's input), and
//   its output (the next block's input; the last one is y): N*a + 2N*b after the forward.
//   The highest point is inside the last block's backward: Linear2 frees G and allocates dG
//   (same size), then GELU allocates dU while dG and U are still alive: one more b.
//     peak = N*a + (2N+1)*b
// checkpoint every block: the forward keeps only the block outputs (N*a). The last block's
//   backward recomputes U and G (2b), then its backward adds one more b as above; the
//   recomputation's own transient (U, G, Linear2's output and the residual sum: 2b + 2a) is
//   lower when b > a. Earlier blocks reach the same height: the input gradient they hold
//   replaces the block output already freed.
//     peak = N*a + 3*b
// selective recomputation: Linear2 gives G up after its forward (GELU can rebuild it): the
//   forward keeps N*a + N*b. In the last block's backward G is rebuilt (b), Linear2 frees it
//   and allocates dG, GELU allocates dU: two more b.
//     peak = N*a + (N+2)*b
// So checkpointing saves (2N-2)*b and selective recomputation (N-1)*b.
TEST(CheckpointTest, PeakMemoryFallsAsPredicted) {
  constexpr int kN = 6;
  constexpr int64_t kB = 8, kD = 16, kH = 64;
  constexpr size_t a = kB * kD * 4, b = kB * kH * 4;
  const auto build = [&] {
    manual_seed(18);
    auto net = make<Sequential>();
    for (int i = 0; i < kN; ++i)
      net->add(make<Residual>(
          make<Sequential>(make<Linear>(kD, kH), make<GELU>(), make<Linear>(kH, kD))));
    return net;
  };
  const Tensor x = test::random_tensor({kB, kD}, DType::f32, 1);
  const Tensor dy = test::random_tensor({kB, kD}, DType::f32, 2);
  const auto peak_of = [&](Module& m) {
    for (Parameter* p : m.parameters()) p->zero_grad();
    core::reset_peak_memory(Device::cpu());
    const size_t base = core::memory_stats(Device::cpu()).current_bytes;
    {
      const Tensor y = m.forward(x);
      m.backward(dy);
    }
    const core::MemoryStats s = core::memory_stats(Device::cpu());
    EXPECT_EQ(s.current_bytes, base) << "a forward+backward must leave nothing allocated";
    return s.peak_bytes - base;
  };
  auto plain = build();
  auto ckpt = build();
  checkpoint_every(*ckpt, 1);
  auto selective = build();
  set_selective_recompute(*selective, true);
  const size_t plain_peak = peak_of(*plain);
  const size_t ckpt_peak = peak_of(*ckpt);
  const size_t selective_peak = peak_of(*selective);
  EXPECT_EQ(plain_peak, kN * a + (2 * kN + 1) * b);  // 6*512 + 13*2048 = 29696
  EXPECT_EQ(ckpt_peak, kN * a + 3 * b);              // 3072 + 6144 = 9216
  EXPECT_EQ(selective_peak, kN * a + (kN + 2) * b);  // 3072 + 16384 = 19456
  // Same results, of course.
  for (size_t i = 0; i < plain->parameters().size(); ++i) {
    EXPECT_TRUE(test::bit_identical(ckpt->parameters()[i]->grad(), plain->parameters()[i]->grad()));
    EXPECT_TRUE(
        test::bit_identical(selective->parameters()[i]->grad(), plain->parameters()[i]->grad()));
  }
}

// The same with the transformer MLP block x + Linear(h->d)(GELU(Linear(d->h)(LayerNorm(x)))),
// f32 on the CPU, B rows; a = B*d*4, b = B*h*4 as above and s = B*8 (LayerNorm's mean and 1/std).
//
// plain: each block keeps s, the LayerNorm output L (a, Linear1's input), U and G (2b), and its
//   output (a): N*(2a + 2b + s). Highest inside the last block's backward, at GELU's (+b).
//     peak = N*(2a + 2b + s) + b
// selective: Linear1 gives L up (LayerNorm rebuilds it from the input it keeps, one
//   normalization pass) and Linear2 gives G up: N*(a + b + s). In the last block's backward G is
//   rebuilt (b) and replaced by dG, then GELU allocates dU: two more b (rebuilding L later, a + s
//   with the temporary statistics, is lower since a + s < 2b). Nothing is kept twice: the
//   residual add keeps nothing, LayerNorm keeps the block input by reference.
//     peak = N*(a + b + s) + 2b        (before L was rebuilt: N*(2a + b + s) + 2b)
// checkpoint every block: N*a after the forward. The last block's recomputation keeps a plain
//   block's s + L + U + G (no selective recomputation inside a recomputation; its last Linear
//   only saves its input, no GEMM, no add), then its backward adds b.
//     peak = N*a + (a + s) + 3b
// checkpoint every second block (0, 2, 4) + selective elsewhere, N = 6: N*a + 3(b + s) after the
//   forward. Highest in block 4's backward: the outputs of blocks 0-3, the caller's y and the
//   carried gradient (6a), blocks 1 and 3 (2(b + s)), block 4 recomputed (a + s + 2b) and its
//   GELU backward (b).
//     peak = 7a + 5b + 3s
TEST(CheckpointTest, PeakMemoryWithLayerNormFallsAsPredicted) {
  constexpr int kN = 6;
  constexpr int64_t kB = 8, kD = 16, kH = 64;
  constexpr size_t a = kB * kD * 4, b = kB * kH * 4, s = kB * 8;
  const auto build = [&] {
    manual_seed(21);
    auto net = make<Sequential>();
    for (int i = 0; i < kN; ++i)
      net->add(make<Residual>(make<Sequential>(make<LayerNorm>(kD), make<Linear>(kD, kH),
                                               make<GELU>(), make<Linear>(kH, kD))));
    return net;
  };
  const Tensor x = test::random_tensor({kB, kD}, DType::f32, 1);
  const Tensor dy = test::random_tensor({kB, kD}, DType::f32, 2);
  const auto peak_of = [&](Module& m) {
    for (Parameter* p : m.parameters()) p->zero_grad();
    core::reset_peak_memory(Device::cpu());
    const size_t base = core::memory_stats(Device::cpu()).current_bytes;
    {
      const Tensor y = m.forward(x);
      m.backward(dy);
    }
    const core::MemoryStats st = core::memory_stats(Device::cpu());
    EXPECT_EQ(st.current_bytes, base) << "a forward+backward must leave nothing allocated";
    return st.peak_bytes - base;
  };
  auto plain = build();
  auto selective = build();
  set_selective_recompute(*selective, true);
  auto ckpt = build();
  checkpoint_every(*ckpt, 1);
  auto mixed = build();
  checkpoint_every(*mixed, 2);
  set_selective_recompute(*mixed, true);
  EXPECT_EQ(peak_of(*plain), kN * (2 * a + 2 * b + s) + b);  // 33152
  EXPECT_EQ(peak_of(*selective), kN * (a + b + s) + 2 * b);  // 19840
  EXPECT_EQ(peak_of(*ckpt), kN * a + (a + s) + 3 * b);       // 9792
  EXPECT_EQ(peak_of(*mixed), 7 * a + 5 * b + 3 * s);         // 14016
  for (Sequential* m : {selective.get(), ckpt.get(), mixed.get()}) {
    const auto pa = plain->parameters(), pb = m->parameters();
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_TRUE(test::bit_identical(pb[i]->grad(), pa[i]->grad())) << i;
  }
  // Bit-identical in half precision too, with every third block checkpointed.
  expect_bit_identical(
      build,
      [](Sequential& m) {
        checkpoint_every(m, 3);
        set_selective_recompute(m, true);
      },
      DType::bf16, 2, {3, kB, kD}, "bf16, every third block + selective");
}

// A forward inside a NoSaveScope (evaluation) keeps nothing: only its output stays allocated.
TEST(CheckpointTest, NoSaveForwardKeepsOnlyTheOutput) {
  manual_seed(19);
  Sequential net(make<LayerNorm>(16), make<Linear>(16, 64), make<GELU>(), make<Dropout>(0.1f),
                 make<Linear>(64, 16), make<ReLU>());
  const Tensor x = test::random_tensor({8, 16}, DType::f32, 3);
  const size_t base = core::memory_stats(Device::cpu()).current_bytes;
  NoSaveScope no_save;
  const Tensor y = net.forward(x);
  EXPECT_EQ(core::memory_stats(Device::cpu()).current_bytes, base + y.nbytes());
}

}  // namespace
}  // namespace stoker::nn
