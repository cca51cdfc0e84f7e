// Trainer's public methods: each forwards to Trainer::Impl (src/train/trainer_impl.h), so that
// the Trainer's state stays out of the public header.
#include "stoker/train/trainer.h"
#include "train/trainer_impl.h"

namespace stoker::train {

Trainer::Trainer(nn::Module& model, nn::Loss& loss, optim::Optimizer& optimizer,
                 TrainerOptions options)
    : impl_(std::make_unique<Impl>(*this, model, loss, optimizer, std::move(options))) {}

Trainer::~Trainer() = default;

FitResult Trainer::fit(data::BatchSource& train, int64_t epochs, data::BatchSource* validation) {
  return impl_->fit(train, epochs, validation);
}

EvalResult Trainer::evaluate(data::BatchSource& data, int64_t max_samples) {
  return impl_->evaluate(data, max_samples);
}

void Trainer::save_checkpoint(const std::filesystem::path& path,
                              const data::BatchSource* source) const {
  impl_->save_checkpoint(path, source);
}

void Trainer::resume(const std::filesystem::path& path) { impl_->resume(path); }

std::optional<std::filesystem::path> Trainer::resume_latest(const std::filesystem::path& dir) {
  return impl_->resume_latest(dir);
}

int64_t Trainer::step() const { return impl_->step(); }
int64_t Trainer::samples_seen() const { return impl_->samples_seen(); }
void Trainer::request_stop() { impl_->request_stop(); }
size_t Trainer::cuda_graph_nodes() const { return impl_->cuda_graph_nodes(); }
const amp::GradScaler* Trainer::scaler() const { return impl_->scaler(); }

void Trainer::train_step(std::span<const data::Batch> micro_batches) {
  impl_->train_step(micro_batches);
}

MemoryReport Trainer::memory_report() const { return impl_->memory_report(); }
MemorySettings Trainer::memory_settings() const { return impl_->memory_settings(); }
const diag::Diagnostics* Trainer::diagnostics() const { return impl_->diagnostics(); }

void Trainer::add_observer(StepObserver& observer) { impl_->add_observer(observer); }
void Trainer::add_log_callback(Callback cb) { impl_->add_log_callback(std::move(cb)); }
void Trainer::add_eval_callback(EvalCallback cb) { impl_->add_eval_callback(std::move(cb)); }

}  // namespace stoker::train
