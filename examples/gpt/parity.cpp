// stoker_gpt --parity-dir DIR: the files of a run that benchmarks/peers/torch_gpt_parity.py
// repeats in PyTorch (their layouts: main.cpp's header).
#include <cstdio>
#include <fstream>
#include <iomanip>

#include "common/recording_source.h"
#include "gpt_program.h"
#include "stoker/core/output_path.h"

namespace stoker::gpt_program {

namespace fs = std::filesystem;

void ParityRun::check(const Options& o, int world) {
  STOKER_CHECK(world == 1, "--parity-dir: one rank only, not ", world);
  STOKER_CHECK(o.accum == 1 && o.precision == "fp32" && o.dropout == 0.0f && !o.zero1 &&
                   o.optimizer_state == "f32" && !o.synthetic,
               "--parity-dir: needs --accum 1 --precision fp32 --dropout 0 "
               "--optimizer-state f32, no --zero1, no --synthetic");
}

ParityRun::ParityRun(const Options& o, gpt::Gpt& model) : o_(o), model_(model), dir_(o.parity_dir) {
  core::check_output_dir(dir_, "--parity-dir");  // the last files are written after training
  train::save_weights(model_, dir_ / "init.safetensors");  // before anything trains
}

ParityRun::~ParityRun() = default;

void ParityRun::adjust(train::TrainerOptions& t) const {
  t.clip_grad_norm = 0.0f;
  t.schedule = optim::constant_lr(o_.lr);
  t.log_interval = 1;
  t.progress_bar = false;
  t.diagnostics.enabled = false;
}

data::BatchSource& ParityRun::record(data::BatchSource& train_data, const gpt::GptConfig& config,
                                     const optim::AdamWOptions& adamw, Device device) {
  recorder_ =
      std::make_unique<program::RecordingSource>(train_data, dir_ / "batches.i32", "stoker_gpt");
  const char* data_name = o_.data.empty() ? o_.text.c_str() : o_.data.c_str();
  std::ofstream cfg(dir_ / "config.json");
  cfg << "{\n"
      << "  \"model\": \"" << model_.describe() << "\",\n"
      << "  \"vocab\": " << config.vocab << ",\n"
      << "  \"context\": " << config.context << ",\n"
      << "  \"layers\": " << config.layers << ",\n"
      << "  \"heads\": " << config.heads << ",\n"
      << "  \"width\": " << config.d_model << ",\n"
      << "  \"init\": \"" << o_.init << "\",\n"
      << "  \"seed\": " << o_.seed << ",\n"
      << "  \"batch\": " << o_.batch << ",\n"
      << "  \"seq\": " << config.context << ",\n"
      << "  \"steps\": " << o_.steps << ",\n"
      << "  \"optimizer\": \"AdamW\",\n"
      << std::setprecision(9) << "  \"lr\": " << adamw.lr << ",\n"
      << "  \"betas\": [" << adamw.beta1 << ", " << adamw.beta2 << "],\n"
      << "  \"eps\": " << adamw.eps << ",\n"
      << "  \"weight_decay\": " << adamw.weight_decay << ",\n"
      << "  \"schedule\": \"constant\",\n"
      << "  \"clip_grad_norm\": 0,\n"
      << "  \"dropout\": 0,\n"
      << "  \"grad_accum_steps\": 1,\n"
      << "  \"precision\": \"fp32\",\n"
      << "  \"tf32\": false,\n"
      << "  \"device\": \"" << device.str() << "\",\n"
      << "  \"data\": \"" << fs::path(data_name).filename().string() << "\",\n"
      << "  \"batches_file\": \"batches.i32\",\n"
      << "  \"batches_layout\": \"int32 little-endian [steps, 2, batch, seq]: per step the "
         "input ids then the target ids\",\n"
      << "  \"loss\": \"mean cross-entropy over batch*seq tokens\"\n"
      << "}\n";
  STOKER_CHECK(cfg.good(), "stoker_gpt: cannot write ", (dir_ / "config.json").string());
  return *recorder_;
}

void ParityRun::watch(train::Trainer& trainer) {
  trainer.add_log_callback([this](const train::StepStats& st) {
    // log_interval 1: each line is one step's loss
    STOKER_CHECK(st.step == static_cast<int64_t>(losses_.size()) + 1,
                 "--parity-dir: a log line for step ", st.step, " after ", losses_.size(),
                 " steps");
    losses_.push_back(st.loss);
  });
}

void ParityRun::finish(const train::FitResult& fit) {
  recorder_->close();
  STOKER_CHECK(
      recorder_->batches() == fit.steps && static_cast<int64_t>(losses_.size()) == fit.steps,
      "--parity-dir: ", fit.steps, " steps but ", recorder_->batches(), " batches and ",
      losses_.size(), " losses recorded");
  std::ofstream lf(dir_ / "losses.json");
  lf << std::setprecision(9) << "{\"steps\": " << fit.steps << ", \"losses\": [";
  for (size_t i = 0; i < losses_.size(); ++i) lf << (i ? ", " : "") << losses_[i];
  lf << "]}\n";
  STOKER_CHECK(lf.good(), "stoker_gpt: cannot write ", (dir_ / "losses.json").string());
  train::save_weights(model_, dir_ / "final.safetensors");
  std::printf(
      "parity files in %s: config.json, init.safetensors, batches.i32 (%lld steps), "
      "losses.json, final.safetensors\n",
      dir_.string().c_str(), static_cast<long long>(fit.steps));
}

}  // namespace stoker::gpt_program
