// stoker_llm --parity-dir DIR: the files of a run that benchmarks/peers/torch_llama_parity.py
// repeats with transformers' LlamaForCausalLM on the same tokens from the same weights:
//   init/           the initial weights as a transformers Llama folder (config.json +
//                   model.safetensors, f32), written before anything trains
//   config.json     the optimizer and run settings (lr, betas, eps, weight decay, steps, B, T)
//   batches.i32     every step's batch, int32 little-endian [steps, 2, B, T]: the input ids,
//                   then the target ids (the inputs shifted by one)
//   losses.json     {"steps": n, "losses": [...]}: the mean cross-entropy of each step's batch,
//                   before its update
//   final/          the weights after training, a transformers folder (f32)
// Training is made exact and simple: constant --lr (no warmup or cosine), no clipping, one rank,
// --accum 1, fp32 (TF32 off) or bf16, f32 AdamW state, a log line every step.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "common/recording_source.h"
#include "llama_model.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace stoker::llm_program {

struct Options;

class ParityRun {
 public:
  // Throws unless the options make a parity run exact and simple.
  static void check(const Options& o, int world);
  // Creates DIR and writes init/ (before anything trains).
  ParityRun(const Options& o, llm::Llama& model);
  ~ParityRun();
  // Constant lr, no clipping, a loss per step, no diagnostics.
  void adjust(train::TrainerOptions& t) const;
  // Writes config.json; returns the source to train from: `train_data`, each batch recorded.
  data::BatchSource& record(data::BatchSource& train_data, const optim::AdamWOptions& adamw,
                            int64_t seq, Device device);
  // Keeps each step's loss (the trainer logs every step).
  void watch(train::Trainer& trainer);
  // After fit(): checks that every step was recorded, writes losses.json and final/.
  void finish(const train::FitResult& fit);

 private:
  const Options& o_;
  llm::Llama& model_;
  std::filesystem::path dir_;
  std::unique_ptr<program::RecordingSource> recorder_;
  std::vector<double> losses_;
};

}  // namespace stoker::llm_program
