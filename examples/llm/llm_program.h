// Private to stoker_llm: its options (main.cpp parses them and trains), the model's shape from
// a preset, shape flags or a Hugging Face folder, the memory plan's input and the --synthetic
// benchmark (bench.cpp). Call from the main thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/run_flags.h"
#include "document_positions.h"
#include "llama_model.h"
#include "memory_plan.h"
#include "stoker/stoker.h"

#ifndef STOKER_LLM_TEXT
#define STOKER_LLM_TEXT "data/kjv-genesis-exodus.txt"
#endif
#ifndef STOKER_LLM_CACHE
#define STOKER_LLM_CACHE "stoker_llm_data"
#endif

namespace stoker::llm_program {

struct Options {
  std::string preset = "llama3-debug";
  // Shape flags, 0: the preset's (or --init-from's config.json, which they may not contradict).
  int64_t layers = 0, width = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int64_t context = 0;     // T trained on; 0: min(max_position_embeddings, 2048)
  std::string init_from;   // a transformers Llama folder (hf_llama.h)
  std::string save_dtype;  // --save's dtype: f32 | bf16 (default: bf16 for bf16/fp8 runs)
  int64_t batch = 8;
  int accum = 1;
  int64_t steps = 60;
  float lr = 3e-3f;
  int64_t warmup = 10;
  float min_lr = 1e-4f;
  float weight_decay = 0.1f;
  float clip = 1.0f;
  std::string precision = "fp32";
  std::string optimizer_state = "f32";  // f32 | bf16 | int8
  bool zero1 = false;
  std::string data, mix;
  double val_split = 0;
  std::string text = STOKER_LLM_TEXT;
  std::string cache = STOKER_LLM_CACHE;
  std::string tokenizer;
  bool document_mask = false;
  bool synthetic = false;
  int bench_warmup = 3;
  bool memory_plan = false;
  std::string device;
  uint64_t seed = 0;
  int64_t sample = 60;
  int top_k = 5;
  float temperature = 0.8f;
  std::string prompt = "And God said";
  int log_interval = 10;
  bool tf32 = true;
  bool diagnostics = false;    // --diagnostics: the step breakdown and verdict reports
  bool cuda_graph = false;     // --cuda-graph: TrainerOptions::cuda_graph insisted on
  bool no_cuda_graph = false;  // --no-cuda-graph (default: the graph whenever it can run)
  std::string parity_dir;      // --parity-dir: a run to repeat with transformers (parity.h)
  program::RunFlags run;       // checkpoints, resume, --val, evaluation, --save DIR, --metrics, ...
};

// The model's shape: --init-from's config.json, else the preset, then the shape flags (refused
// when they contradict --init-from's).
llm::LlamaConfig model_config(const Options& o);
// T: --context, or min(max_position_embeddings, 2048); refused above max_position_embeddings.
int64_t sequence_length(const Options& o, const llm::LlamaConfig& c);
llm::MemoryPlanInput plan_input(const Options& o, const llm::LlamaConfig& c, Device device,
                                int world);

// ---- --synthetic (bench.cpp)

// What run() has built when the benchmark (or main.cpp's training on data) takes over.
struct BenchSetup {
  dist::DistContext& ctx;
  Device device;
  const llm::LlamaConfig& config;
  int64_t seq;  // T
  llm::Llama& model;
  nn::Loss& loss;
  optim::Optimizer& opt;
  train::TrainerOptions topts;
  amp::Precision precision;
  int wrapped;  // blocks under activation checkpointing
};

// Random ids, --bench-warmup untimed steps, --steps timed ones; prints tok/s, ms/step, peak
// memory and MFU (training_flops_per_token). Exit status 0 when the loss on the batch fell.
int run_bench(const Options& o, const BenchSetup& b);

// The training FLOPs per token (docs/llm.md#benchmark-mode-and-flops): 6 N' + 12 L H D T, PaLM's
// (appendix B) convention: N' = the parameters whose GEMMs run (all but an untied embedding table,
// whose lookup costs nothing; a tied table is the head's GEMM), 2 FLOPs per weight per token
// forward and 4 backward; attention's QK^T and PV 4 L H D T forward, x3 with backward, the causal
// half NOT subtracted (as PaLM, nanoGPT, llm.c and stoker_gpt count it), so MFUs compare.
double training_flops_per_token(const llm::LlamaConfig& c, int64_t seq);

}  // namespace stoker::llm_program
