// examples/gpt's model on the GPU: logits and every gradient against the CPU reference (fp32
// without TF32, and bf16 with the tolerance of its rounding), checkpointed blocks bit-identical
// to plain ones on the device, the head in the loss (chunked) against the plain head, and a few
// bf16 Trainer steps that lower the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gpt_block_reference.h"
#include "gpt_model.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace stoker::gpt {
namespace {

const Device kGpu = Device::cuda(0);

GptConfig config() {
  return {.vocab = 96,
          .context = 64,
          .layers = 2,
          .heads = 4,
          .d_model = 64,
          .dropout = 0.0f,
          .init = GptInit::torch};
}

std::pair<Tensor, Tensor> batch(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids, tg;
  for (int64_t i = 0; i < b * t; ++i) {
    ids.push_back(static_cast<int64_t>(core::philox_block(seed, 1, i).v[0] % vocab));
    tg.push_back(static_cast<int64_t>(core::philox_block(seed, 2, i).v[0] % vocab));
  }
  return {Tensor::from_vector(ids, {b, t}), Tensor::from_vector(tg, {b * t})};
}

struct Result {
  std::vector<float> logits;
  std::map<std::string, std::vector<float>> grads;
  double loss = 0;
};

Result run(Gpt& model, const Tensor& ids, const Tensor& targets, DType dtype) {
  nn::set_compute_dtype(model, dtype);
  for (nn::Parameter* p : model.parameters()) p->zero_grad();
  nn::CrossEntropyLoss loss;
  Result r;
  const Tensor logits = model.forward(ids.to(model.device()));
  r.loss = loss.forward(logits, targets.to(model.device())).item();
  r.logits = logits.to_floats();
  model.backward(loss.backward());
  for (const auto& [name, p] : model.named_parameters()) r.grads[name] = p->grad().to_floats();
  return r;
}

TEST(GptModelGpu, MatchesTheCpuReference) {
  STOKER_REQUIRE_GPU();
  ops::set_allow_tf32(false);
  const auto [ids, targets] = batch(3, 48, 96, 1);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    nn::manual_seed(10);
    Gpt cpu(config());
    nn::manual_seed(10);
    Gpt gpu(config());
    gpu.to(kGpu);
    const Result a = run(gpu, ids, targets, dtype);
    const Result b = run(cpu, ids, targets, dtype);
    const double rtol = dtype == DType::f32 ? 1e-4 : 4e-2;
    EXPECT_NEAR(a.loss, b.loss, dtype == DType::f32 ? 1e-4 : 2e-2);
    test::expect_max_abs_close(a.logits, b.logits, rtol, "logits");
    for (const auto& [name, g] : b.grads)
      test::expect_max_abs_close(a.grads.at(name), g, rtol, name);
  }
}

// The head in the loss (nn::LinearCrossEntropyLoss over wte, chunks of 40 rows of 144) on the
// device: the loss and every gradient of the plain model, within the rounding of the dtype (the
// weight gradient's fp32 sums are split by chunk).
TEST(GptModelGpu, HeadInTheLossFollowsThePlainModel) {
  STOKER_REQUIRE_GPU();
  ops::set_allow_tf32(false);
  const auto [ids, targets] = batch(3, 48, 96, 4);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    nn::manual_seed(14);
    Gpt plain(config());
    plain.to(kGpu);
    nn::manual_seed(14);
    Gpt fused(config());
    fused.to(kGpu);
    fused.set_head_in_loss(true);
    const Result a = run(plain, ids, targets, dtype);
    nn::set_compute_dtype(fused, dtype);
    for (nn::Parameter* p : fused.parameters()) p->zero_grad();
    nn::LinearCrossEntropyLoss loss(fused.wte().weight(),
                                    {.chunk_rows = 40, .weight_shared = true});
    const Tensor h = fused.forward(ids.to(kGpu));
    const nn::Loss::ForwardBackward r = loss.forward_backward(h, targets.to(kGpu));
    fused.backward(r.grad);
    const double rtol = dtype == DType::f32 ? 1e-5 : 2e-2;
    EXPECT_NEAR(r.loss.item(), a.loss, dtype == DType::f32 ? 1e-5 : 1e-2);
    for (const auto& [name, p] : fused.named_parameters())
      test::expect_max_abs_close(p->grad().to_floats(), a.grads.at(name), rtol, name);
  }
}

TEST(GptModelGpu, CheckpointedBlocksAreBitIdentical) {
  STOKER_REQUIRE_GPU();
  const auto [ids, targets] = batch(2, 64, 96, 2);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    GptConfig c = config();
    c.dropout = 0.1f;
    nn::manual_seed(11);
    Gpt plain(c);
    plain.to(kGpu);
    nn::manual_seed(11);
    Gpt ckpt(c);
    ckpt.checkpoint_blocks(1);
    nn::set_selective_recompute(ckpt, true);
    ckpt.to(kGpu);
    const Result a = run(plain, ids, targets, dtype);
    const Result b = run(ckpt, ids, targets, dtype);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.logits, b.logits);
    for (const auto& [name, g] : a.grads) {
      // The embedding gradients (wte also takes the tied head's GEMM gradient) are scattered
      // with float atomics on the GPU, whose order varies from run to run: close, not
      // bit-identical, even between two runs of the same model. Everything else is.
      if (name == "wte.weight" || name == "wpe.weight")
        test::expect_max_abs_close(g, b.grads.at(name), 1e-5, name);
      else
        EXPECT_EQ(g, b.grads.at(name)) << name;
    }
  }
}

// GptBlock's fused add + LayerNorm (one add_layernorm kernel each way) gives the bits of the
// unfused block (ops::add, ln2.forward; ln2.backward, ops::add) on the device too.
TEST(GptModelGpu, FusedBlockGivesTheUnfusedBlocksBits) {
  STOKER_REQUIRE_GPU();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    nn::manual_seed(12);
    GptBlock block(64, 4, 0.0f);
    block.to(kGpu);
    nn::set_compute_dtype(block, dtype);
    const Tensor x = test::random_tensor({2, 48, 64}, dtype, 1, -2.0f, 2.0f).to(kGpu);
    const Tensor dy = test::random_tensor({2, 48, 64}, dtype, 2).to(kGpu);
    const auto param_grads = [&] {
      std::map<std::string, std::vector<float>> out;
      for (const auto& [name, p] : block.named_parameters()) out[name] = p->grad().to_floats();
      return out;
    };
    for (nn::Parameter* p : block.parameters()) p->zero_grad();
    const Tensor y = block.forward(x);
    const Tensor dx = block.backward(dy);
    const auto fused = param_grads();

    for (nn::Parameter* p : block.parameters()) p->zero_grad();
    const test_reference::BlockStep ref = test_reference::unfused_block_step(block, x, dy);
    const auto unfused = param_grads();

    EXPECT_TRUE(test::bit_identical(y, ref.y));
    EXPECT_TRUE(test::bit_identical(dx, ref.dx));
    for (const auto& [name, g] : fused) EXPECT_EQ(g, unfused.at(name)) << name;
  }
}

// The MLP's GELU fused into the GEMMs (GptConfig::fuse_gelu, cuBLASLt's GELU_AUX_BIAS and DGELU
// epilogues) against the unfused model on the device, and against the CPU reference: within
// the tolerance of the compute dtype (the fused GELU reads the fp32 accumulator, the unfused
// one the rounded pre-activation). With selective recomputation too, whose rebuilt GELU output
// is gelu_forward of the rounded pre-activation.
TEST(GptModelGpu, FusedGeluMatchesTheUnfusedModel) {
  STOKER_REQUIRE_GPU();
  ops::set_allow_tf32(false);
  const auto [ids, targets] = batch(2, 64, 96, 3);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const bool selective : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (selective ? " selective" : ""));
      GptConfig unfused_config = config();
      unfused_config.fuse_gelu = false;
      nn::manual_seed(13);
      Gpt unfused(unfused_config);
      unfused.to(kGpu);
      nn::manual_seed(13);
      Gpt fused(config());
      fused.to(kGpu);
      nn::manual_seed(13);
      Gpt cpu(config());
      if (selective) nn::set_selective_recompute(fused, true);
      const Result a = run(fused, ids, targets, dtype);
      const Result b = run(unfused, ids, targets, dtype);
      const Result c = run(cpu, ids, targets, dtype);
      const double rtol = dtype == DType::f32 ? 1e-4 : 4e-2;
      for (const Result* ref : {&b, &c}) {
        SCOPED_TRACE(ref == &b ? "vs unfused on the GPU" : "vs the CPU");
        EXPECT_NEAR(a.loss, ref->loss, dtype == DType::f32 ? 1e-4 : 2e-2);
        test::expect_max_abs_close(a.logits, ref->logits, rtol, "logits");
        for (const auto& [name, g] : ref->grads)
          test::expect_max_abs_close(a.grads.at(name), g, rtol, name);
      }
    }
  }
}

TEST(GptModelGpu, Bf16TrainingLowersTheLoss) {
  STOKER_REQUIRE_GPU();
  nn::manual_seed(12);
  Gpt model({.vocab = 96, .context = 64, .layers = 2, .heads = 4, .d_model = 64});
  model.to(kGpu);
  const auto [ids, targets] = batch(4, 64, 96, 3);
  const data::Batch b{ids.to(kGpu), targets.to(kGpu), 4};
  optim::AdamW opt(model.named_parameters(), {.lr = 3e-3f, .weight_decay = 0.0f});
  nn::CrossEntropyLoss loss;
  train::Trainer trainer(model, loss, opt,
                         {.precision = amp::Precision::bf16, .progress_bar = false, .quiet = true});
  auto eval = [&] {
    nn::NoSaveScope no_save;
    return nn::CrossEntropyLoss().forward(model.forward(b.input), b.target).item();
  };
  const double first = eval();
  for (int i = 0; i < 40; ++i) trainer.train_step({&b, 1});
  const double last = eval();
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
}

// The GPT example's default model on the device: head in the loss (chunked), GELU in the GEMM
// epilogues, bf16, train_step replayed.
TEST(GptModelGpu, CudaGraphStepWithTheFusedHeadReplays) {
  STOKER_REQUIRE_GPU();
  std::vector<std::vector<float>> out[2];
  std::vector<double> loss_after[2];
  size_t nodes = 0;
  for (const bool graph : {false, true}) {
    nn::manual_seed(9);
    Gpt model({.vocab = 96, .context = 64, .layers = 2, .heads = 4, .d_model = 64});
    model.to(kGpu);
    model.set_head_in_loss(true);
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-3f});
    const std::unique_ptr<nn::Loss> loss = model.make_loss();
    train::TrainerOptions o{
        .precision = amp::Precision::bf16, .progress_bar = false, .quiet = true};
    o.cuda_graph = graph;
    train::Trainer trainer(model, *loss, opt, o);
    std::vector<int64_t> ids, tg;
    for (int i = 0; i < 4 * 64; ++i) {
      ids.push_back(i * 13 % 96);
      tg.push_back(i * 13 % 96 + 1 == 96 ? 0 : i * 13 % 96 + 1);
    }
    const data::Batch batch{Tensor::from_vector(ids, {4, 64}, kGpu),
                            Tensor::from_vector(tg, {4 * 64}, kGpu), 4};
    for (int s = 0; s < 6; ++s) {
      trainer.train_step({&batch, 1});
      loss_after[graph].push_back(loss->forward(model.forward(batch.input), batch.target).item());
    }
    for (nn::Parameter* p : model.parameters()) out[graph].push_back(p->value().to_floats());
    if (graph) nodes = trainer.cuda_graph_nodes();
  }
  EXPECT_GT(nodes, 10u);
  // Not bit for bit: the embedding gradients are scattered with float atomics, whose order
  // varies between any two runs (CheckpointedBlocksAreBitIdentical says the same); measured on
  // an H100 the weights matched in their printed digits. Close, step after step.
  ASSERT_EQ(out[1].size(), out[0].size());
  for (size_t t = 0; t < out[0].size(); ++t)
    test::expect_max_abs_close(out[1][t], out[0][t], 1e-3, "weights");
  for (size_t s = 0; s < loss_after[0].size(); ++s)
    EXPECT_NEAR(loss_after[1][s], loss_after[0][s], 1e-3) << "step " << s + 1;
  EXPECT_LT(loss_after[1].back(), loss_after[1].front());
}

}  // namespace
}  // namespace stoker::gpt
