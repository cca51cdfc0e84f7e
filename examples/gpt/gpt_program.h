// Private to stoker_gpt: its options (main.cpp parses them and trains), the --synthetic
// benchmark (bench.cpp) and the --parity-dir run for the comparison with PyTorch (parity.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/recording_source.h"
#include "common/run_flags.h"
#include "gpt_model.h"
#include "stoker/stoker.h"

#ifndef STOKER_GPT_TEXT
#define STOKER_GPT_TEXT "data/kjv-genesis-exodus.txt"
#endif
#ifndef STOKER_GPT_CACHE
#define STOKER_GPT_CACHE "stoker_gpt_data"
#endif

namespace stoker::gpt_program {

struct Options {
  std::string preset = "tiny";
  int64_t layers = 0, heads = 0, width = 0, context = 0, vocab = 0;  // 0: the preset's
  float dropout = 0.0f;
  std::string init = "gpt2";
  int64_t batch = 8;
  int accum = 1;
  int64_t steps = 150;
  float lr = 2e-3f;
  int64_t warmup = 15;
  float min_lr = 1e-4f;
  float weight_decay = 0.1f;
  float clip = 1.0f;
  std::string precision = "fp32";
  bool selective = false;
  bool fused_head = true;      // the head in the loss, in chunks (Gpt::set_head_in_loss)
  bool fused_gelu = true;      // GptConfig::fuse_gelu
  bool cuda_graph = false;     // --cuda-graph: TrainerOptions::cuda_graph insisted on
  bool no_cuda_graph = false;  // --no-cuda-graph (default: the graph whenever it can run)
  std::string data;
  std::string mix;       // --mix "a.idx:0.7,b:0.3" (token_data.h)
  double val_split = 0;  // --val-split: a fraction or count of --data's documents
  std::string text = STOKER_GPT_TEXT;
  std::string cache = STOKER_GPT_CACHE;  // --data-cache: the packed text (token_data.h)
  bool byte_level = false;               // --byte-level: the text's bytes as ids (vocab 256)
  std::string tokenizer;  // --tokenizer: SentencePiece model of the samples (default: --data's)
  bool synthetic = false;
  int bench_warmup = 8;
  std::string device;
  bool diagnostics = false;
  uint64_t seed = 0;
  int64_t sample = 200;
  int top_k = 5;
  float temperature = 0.8f;
  std::string prompt = "And God said";
  int log_interval = 25;
  bool tf32 = true;
  bool zero1 = false;
  bool optimizer_offload = false;
  bool optimizer_offload_delayed = false;  // OffloadOptions::delayed_update
  std::string optimizer_state = "f32";
  std::string parity_dir;  // non-empty: the PyTorch parity run (parity.cpp)
  // Checkpoints and resume, --val and evaluation, --save, --metrics, --on-corrupt, activation
  // checkpointing (common/run_flags.h: the same as stoker_classifier's).
  program::RunFlags run;
};

// ---- --synthetic (bench.cpp)

// What the training run has built when the benchmark takes over.
struct BenchSetup {
  dist::DistContext& ctx;
  Device device;
  const gpt::GptConfig& config;
  gpt::Gpt& model;
  nn::Loss& loss;  // the model's make_loss()
  optim::Optimizer& opt;
  train::TrainerOptions topts;
  amp::Precision precision;
  int64_t params;  // the model's parameters (the tied head once)
  int wrapped;     // blocks under activation checkpointing
};

// The benchmark of benchmarks/peers/torch_train.py's `gpt`: one fixed batch of random ids per
// rank, --bench-warmup untimed steps, --steps timed ones, its line format on rank 0. Exit
// status 0 when the loss on the batch fell.
int run_bench(const Options& o, const BenchSetup& b);

// ---- --parity-dir (parity.cpp)

// The files of a run to compare with PyTorch (benchmarks/peers/torch_gpt_parity.py DIR, see
// main.cpp's header), written as the run goes: init.safetensors when constructed, config.json
// and batches.i32 from record(), losses.json and final.safetensors in finish().
class ParityRun {
 public:
  // Throws unless the options make a parity run exact and simple (one rank, fp32, ...).
  static void check(const Options& o, int world);
  // Creates --parity-dir and writes the initial weights (before anything trains).
  ParityRun(const Options& o, gpt::Gpt& model);
  ~ParityRun();
  // Exact and simple training: constant lr, no clipping, a loss per step, no diagnostics.
  void adjust(train::TrainerOptions& t) const;
  // Writes config.json; the source to train from: `train_data`, each batch recorded.
  data::BatchSource& record(data::BatchSource& train_data, const gpt::GptConfig& config,
                            const optim::AdamWOptions& adamw, Device device);
  // Keeps each step's loss (the trainer logs every step).
  void watch(train::Trainer& trainer);
  // After fit(): checks that every step was recorded, writes the remaining files.
  void finish(const train::FitResult& fit);

 private:
  const Options& o_;
  gpt::Gpt& model_;
  std::filesystem::path dir_;
  std::unique_ptr<program::RecordingSource> recorder_;
  std::vector<double> losses_;
};

}  // namespace stoker::gpt_program
