// examples/llm's model on the GPU against the CPU reference: fp32 without TF32 (the math
// attention path) and bf16 (the fused grouped-query attention, head dims 64 and 128), with and
// without document positions; the head in the loss against the plain head; checkpointed blocks
// bit-identical on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "llama_model.h"
#include "stoker/core/rng.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/gemm.h"
#include "test_util.h"

namespace stoker::llm {
namespace {

const Device kGpu = Device::cuda(0);

LlamaConfig config(int64_t head_dim) {
  LlamaConfig c{.vocab = 96,
                .d_model = 128,
                .layers = 2,
                .heads = 128 / head_dim * 2,
                .kv_heads = 128 / head_dim,
                .head_dim = head_dim,
                .ffn = 192,
                .context = 256,
                .tie_embeddings = head_dim == 64,
                .init_std = 0.05f};
  c.rope = {.head_dim = head_dim,
            .theta = 500000.0,
            .llama3_scaling = true,
            .factor = 32.0,
            .low_freq_factor = 1.0,
            .high_freq_factor = 4.0,
            .original_max_position_embeddings = 64};
  return c;
}

std::pair<Tensor, Tensor> batch(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids, tg;
  for (int64_t i = 0; i < b * t; ++i) {
    ids.push_back(static_cast<int64_t>(core::philox_block(seed, 1, i).v[0] % vocab));
    tg.push_back(static_cast<int64_t>(core::philox_block(seed, 2, i).v[0] % vocab));
  }
  return {Tensor::from_vector(ids, {b, t}), Tensor::from_vector(tg, {b * t})};
}

// Documents of 1..40 tokens cut from a per-row draw.
Tensor positions(int64_t b, int64_t t, uint64_t seed) {
  std::vector<int64_t> pos;
  for (int64_t r = 0; r < b; ++r) {
    int64_t p = 0, left = 0;
    for (int64_t i = 0; i < t; ++i) {
      if (left == 0) {
        left = 1 + static_cast<int64_t>(core::philox_block(seed, 3, r * t + i).v[0] % 40);
        p = 0;
      }
      pos.push_back(p++);
      --left;
    }
  }
  return Tensor::from_vector(pos, {b, t});
}

struct Result {
  std::vector<float> logits;
  std::map<std::string, std::vector<float>> grads;
  double loss = 0;
};

Result run(Llama& model, const Tensor& ids, const Tensor& targets, DType dtype) {
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

TEST(LlamaModelGpu, MatchesTheCpuReference) {
  STOKER_REQUIRE_GPU();
  ops::set_allow_tf32(false);
  const auto [ids, targets] = batch(2, 200, 96, 1);
  for (const int64_t head_dim : {64, 128}) {
    for (const bool documents : {false, true}) {
      for (const DType dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " D " + std::to_string(head_dim) +
                     (documents ? " documents" : ""));
        nn::manual_seed(10);
        Llama cpu(config(head_dim));
        nn::manual_seed(10);
        Llama gpu(config(head_dim));
        gpu.to(kGpu);
        if (documents) {
          const Tensor pos = positions(2, 200, 7);
          cpu.set_positions(pos, true);
          gpu.set_positions(pos.to(kGpu), true);
        }
        const Result a = run(gpu, ids, targets, dtype);
        const Result b = run(cpu, ids, targets, DType::f32);
        const double rtol = dtype == DType::f32 ? 1e-4 : 5e-2;
        EXPECT_NEAR(a.loss, b.loss, dtype == DType::f32 ? 1e-4 : 2e-2);
        test::expect_max_abs_close(a.logits, b.logits, rtol, "logits");
        for (const auto& [name, g] : b.grads)
          test::expect_max_abs_close(a.grads.at(name), g, rtol, name);
      }
    }
  }
}

TEST(LlamaModelGpu, HeadInTheLossAndCheckpointingKeepTheGradients) {
  STOKER_REQUIRE_GPU();
  const auto [ids, targets] = batch(2, 128, 96, 2);
  nn::manual_seed(11);
  Llama plain(config(64));
  nn::manual_seed(11);
  Llama fused(config(64));
  for (Llama* m : {&plain, &fused}) {
    m->to(kGpu);
    nn::set_compute_dtype(*m, DType::bf16);
  }
  fused.set_head_in_loss(true);
  EXPECT_EQ(fused.checkpoint_blocks(1), 2);
  const Result a = run(plain, ids, targets, DType::bf16);
  for (nn::Parameter* p : fused.parameters()) p->zero_grad();
  const std::unique_ptr<nn::Loss> loss = fused.make_loss();
  const nn::Loss::ForwardBackward r =
      loss->forward_backward(fused.forward(ids.to(kGpu)), targets.to(kGpu), 1.0f);
  fused.backward(r.grad);
  EXPECT_NEAR(r.loss.item(), a.loss, 1e-2);
  for (const auto& [name, p] : fused.named_parameters())
    test::expect_max_abs_close(p->grad().to_floats(), a.grads.at(name), 3e-2, name);
}

}  // namespace
}  // namespace stoker::llm
