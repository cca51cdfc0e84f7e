// stoker_llm's memory plan (examples/llm/memory_plan.h) on small configs: the optimizer state
// per format and ZeRO-1 world size against the optimizers' own state_bytes(), the weights and
// gradients against the model's parameters, what a block saves against the CPU allocator's
// count of what a real block keeps after its forward, activation checkpointing's saving, and
// the advice for a run that does not fit.
#include <gtest/gtest.h>

#include <string>

#include "llama_model.h"
#include "memory_plan.h"
#include "stoker/core/allocator.h"
#include "stoker/ops/optim.h"
#include "stoker/optim/optimizer.h"
#include "test_util.h"

namespace stoker::llm {
namespace {

LlamaConfig small_config() {
  LlamaConfig c = LlamaConfig::preset("llama3-debug");
  c.layers = 2;
  c.vocab = 512;
  return c;
}

MemoryPlanInput input_of(const LlamaConfig& c) {
  return {.config = c, .batch = 2, .seq = 16, .fused_attention = false};
}

TEST(MemoryPlan, OptimizerStateMatchesAdamW) {
  const LlamaConfig c = small_config();
  nn::manual_seed(0);
  Llama model(c);
  for (const auto& [name, format] : std::vector<std::pair<std::string, optim::StateFormat>>{
           {"f32", {}},
           {"bf16", {.dtype = optim::StateDType::bf16}},
           {"int8", {.dtype = optim::StateDType::int8_blockwise}}}) {
    optim::AdamW opt(model.named_parameters(), {.state = format});
    // AdamW allocates its state at the first step: give every parameter a gradient.
    for (nn::Parameter* p : model.parameters()) p->zero_grad();
    opt.step();
    EXPECT_EQ(optimizer_state_bytes(c, name, false, 1), static_cast<int64_t>(opt.state_bytes()))
        << name;
  }
  // ZeRO-1 divides it over the ranks (rounded up).
  const int64_t step_state = static_cast<int64_t>(sizeof(ops::AdamWStepState));
  EXPECT_EQ(optimizer_state_bytes(c, "f32", true, 4) - step_state,
            (optimizer_state_bytes(c, "f32", false, 1) - step_state + 3) / 4);
}

TEST(MemoryPlan, WeightsAndGradientsFollowTheParameters) {
  const LlamaConfig c = small_config();
  MemoryPlanInput in = input_of(c);
  const int64_t n = c.parameter_count();
  EXPECT_EQ(plan_memory(in).weights, 4 * n);
  EXPECT_EQ(plan_memory(in).gradients, 4 * n);
  in.precision = amp::Precision::bf16;
  EXPECT_EQ(plan_memory(in).weights, 6 * n);  // + the bf16 compute copies
}

// What a block keeps after a saving forward, counted by the CPU allocator: the plan's count
// less the block's input (the caller's tensor, already allocated) equals what the forward left
// allocated less its output.
TEST(MemoryPlan, BlockActivationsMatchTheAllocator) {
  const LlamaConfig c = small_config();
  nn::manual_seed(1);
  LlamaBlock block(c);
  const MemoryPlanInput in = input_of(c);
  const Tensor x = test::random_tensor({in.batch, in.seq, c.d_model}, DType::f32, 3);
  {  // a first forward caches what every forward shares (the default positions), saving nothing
    nn::NoSaveScope no_save;
    block.forward(x);
  }
  const int64_t before = static_cast<int64_t>(core::memory_stats(Device::cpu()).current_bytes);
  Tensor y = block.forward(x);
  const int64_t kept =
      static_cast<int64_t>(core::memory_stats(Device::cpu()).current_bytes) - before;
  const int64_t input = static_cast<int64_t>(x.nbytes());
  EXPECT_EQ(block_activation_bytes(in) - input, kept - static_cast<int64_t>(y.nbytes()));
}

TEST(MemoryPlan, CheckpointingKeepsOnlyBlockInputs) {
  LlamaConfig c = small_config();
  c.layers = 8;
  MemoryPlanInput in = input_of(c);
  const int64_t plain = plan_memory(in).activations;
  in.checkpoint_every = 1;
  const int64_t every = plan_memory(in).activations;
  const int64_t block = block_activation_bytes(in);
  const int64_t input = in.batch * in.seq * c.d_model * 4;
  // 8 full blocks -> 8 inputs + one block recomputed in backward.
  EXPECT_EQ(plain - every, 8 * block - 8 * input - block);
  in.checkpoint_every = 2;  // blocks 0, 2, 4, 6 wrapped
  EXPECT_EQ(plain - plan_memory(in).activations, 4 * block - 4 * input - block);
}

TEST(MemoryPlan, AdviceNamesTheFlagsThatFit) {
  MemoryPlanInput in{.config = LlamaConfig::preset("llama3-8b"),
                     .batch = 4,
                     .seq = 8192,
                     .precision = amp::Precision::bf16};
  const int64_t need = plan_memory(in).total();
  EXPECT_EQ(advice_to_fit(in, need), "");
  EXPECT_EQ(advice_to_fit(in, -1), "");  // unknown free memory: no advice
  // Room for checkpointing and 8-bit state together: both are named, the second one fits, and
  // nothing after it is proposed.
  MemoryPlanInput t = in;
  t.checkpoint_every = 1;
  t.optimizer_state = "int8";
  const int64_t room = plan_memory(t).total();
  ASSERT_LT(room, need);
  const std::string advice = advice_to_fit(in, room);
  EXPECT_NE(advice.find("--activation-checkpoint-every 1"), std::string::npos) << advice;
  EXPECT_NE(advice.find("--optimizer-state int8"), std::string::npos) << advice;
  EXPECT_NE(advice.find("fits"), std::string::npos) << advice;
  EXPECT_EQ(advice.find("--zero1"), std::string::npos) << advice;
  // Far too little room: every remedy is listed, and that none fits.
  const std::string none = advice_to_fit(in, int64_t{1} << 30);
  EXPECT_NE(none.find("--zero1 over 8 ranks"), std::string::npos) << none;
  EXPECT_NE(none.find("none of these fits"), std::string::npos) << none;
}

}  // namespace
}  // namespace stoker::llm
