#include "parity.h"

#include <fmt/format.h>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hf_llama.h"
#include "llm_program.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"

namespace stoker::llm_program {

namespace fs = std::filesystem;

void ParityRun::check(const Options& o, int world) {
  STOKER_CHECK_HINT(world == 1 && o.accum == 1 &&
                        (o.precision == "fp32" || o.precision == "bf16") && !o.zero1 &&
                        o.optimizer_state == "f32" && !o.synthetic && !o.document_mask,
                    "run it on one rank with --accum 1, --precision fp32 or bf16, "
                    "--optimizer-state f32, and without --zero1, --synthetic or --document-mask",
                    "--parity-dir: the run is not exact and simple enough to repeat in PyTorch");
}

ParityRun::ParityRun(const Options& o, llm::Llama& model)
    : o_(o), model_(model), dir_(o.parity_dir) {
  core::check_output_dir(dir_, "--parity-dir");
  llm::save_hf(model_, dir_ / "init", DType::f32);  // before anything trains
}

ParityRun::~ParityRun() = default;

void ParityRun::adjust(train::TrainerOptions& t) const {
  t.clip_grad_norm = 0.0f;
  t.schedule = optim::constant_lr(o_.lr);
  t.log_interval = 1;
  t.progress_bar = false;
  t.diagnostics.enabled = false;
  t.cuda_graph = false;
}

data::BatchSource& ParityRun::record(data::BatchSource& train_data,
                                     const optim::AdamWOptions& adamw, int64_t seq, Device device) {
  recorder_ =
      std::make_unique<program::RecordingSource>(train_data, dir_ / "batches.i32", "stoker_llm");
  const nlohmann::json cfg = {
      {"model", model_.describe()},
      {"init", "init"},
      {"seed", o_.seed},
      {"batch", o_.batch},
      {"seq", seq},
      {"steps", o_.steps},
      {"optimizer", "AdamW"},
      {"lr", adamw.lr},
      {"betas", {adamw.beta1, adamw.beta2}},
      {"eps", adamw.eps},
      {"weight_decay", adamw.weight_decay},
      {"schedule", "constant"},
      {"clip_grad_norm", 0},
      {"grad_accum_steps", 1},
      {"precision", o_.precision},
      {"tf32", false},
      {"device", device.str()},
      {"batches_file", "batches.i32"},
      {"batches_layout",
       "int32 little-endian [steps, 2, batch, seq]: per step the input ids then the target ids"},
      {"loss", "mean cross-entropy over batch*seq tokens"}};
  std::ofstream f(dir_ / "config.json");
  f << cfg.dump(2) << "\n";
  STOKER_CHECK(f.good(), "stoker_llm: cannot write ", (dir_ / "config.json").string());
  return *recorder_;
}

void ParityRun::watch(train::Trainer& trainer) {
  trainer.add_log_callback([this](const train::StepStats& st) {
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
  lf << nlohmann::json{{"steps", fit.steps}, {"losses", losses_}}.dump() << "\n";
  STOKER_CHECK(lf.good(), "stoker_llm: cannot write ", (dir_ / "losses.json").string());
  llm::save_hf(model_, dir_ / "final", DType::f32);
  std::printf(
      "parity files in %s: config.json, init/, batches.i32 (%lld steps), losses.json, "
      "final/\n",
      dir_.string().c_str(), static_cast<long long>(fit.steps));
}

}  // namespace stoker::llm_program
