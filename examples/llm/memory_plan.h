// stoker_llm's memory plan: what a training run of a Llama (llama_model.h) needs on each device,
// from the model's shapes and the run's settings alone — nothing is allocated — so that a run
// that cannot fit says so, and what would make it fit, before it starts (`--memory-plan` prints
// the plan; docs/llm.md#memory-plan gives the formulas).
//
//   weights      f32 masters, 4 N bytes; with bf16/fp8 the bf16 compute copies, 2 N more
//   gradients    f32, 4 N (every rank holds all of them, ZeRO-1 included)
//   optimizer    AdamW's two moments: f32 8 N, bf16 4 N, 8-bit (2 + 8 / 2048) N for tensors of
//                at least 4096 values (smaller ones keep f32); divided by the ranks with ZeRO-1
//   activations  what the blocks save for backward (block_activation_bytes()), each
//                checkpointed block only its input plus one block recomputed in backward, the
//                final norm's input and the head's input
//   logits       one chunk of the fused head + cross-entropy (at most 1 GiB of rows, the loss's
//                rule) and its gradient
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llama_model.h"
#include "stoker/amp/precision.h"

namespace stoker::llm {

struct MemoryPlanInput {
  LlamaConfig config;
  int64_t batch = 1;  // B: sequences per micro-batch per rank
  int64_t seq = 1;    // T: tokens per sequence
  amp::Precision precision = amp::Precision::fp32;
  int checkpoint_every = 0;             // --activation-checkpoint-every (0: off)
  std::string optimizer_state = "f32";  // f32 | bf16 | int8
  bool zero1 = false;
  int world = 1;                // ranks (ZeRO-1 shards the optimizer state over them)
  bool fused_attention = true;  // the fused attention kernel (CUDA) or the math path (CPU)
};

struct MemoryPlan {
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0, logits = 0;
  int64_t total() const { return weights + gradients + optimizer + activations + logits; }
  // The table of --memory-plan (one line per part, then the total).
  std::string table() const;
  // "memory plan: 1.2 GiB weights + ... = 5.0 GiB per rank".
  std::string line() const;
};

// Bytes one block saves for backward at micro-batch B x T in the compute precision (the block
// Linears' inputs as FP8 codes with fp8): both RMSNorms' inputs and 1/rms, the Linears' inputs,
// SwiGLU's gate|up output, and the attention's (fused: qkv, output and log-sum-exp; math: q, k,
// v for each of the H query heads and the probabilities [B, H, T, T]).
int64_t block_activation_bytes(const MemoryPlanInput& in);
// The optimizer state bytes per rank for `state` ("f32", "bf16", "int8").
int64_t optimizer_state_bytes(const LlamaConfig& config, const std::string& state, bool zero1,
                              int world);
MemoryPlan plan_memory(const MemoryPlanInput& in);

// Memory free on `device` now: cudaMemGetInfo's free bytes for a GPU, the host's available
// physical memory for the CPU; -1 when unknown.
int64_t free_device_memory(Device device);

// When plan_memory(in) exceeds `free_bytes`: the message saying what the run needs and which
// flags would make it fit (activation checkpointing, 8-bit optimizer state, ZeRO-1 over N ranks,
// a smaller --batch), each with the total it gives, in that order, cumulatively; "" when it fits.
std::string advice_to_fit(const MemoryPlanInput& in, int64_t free_bytes);

}  // namespace stoker::llm
