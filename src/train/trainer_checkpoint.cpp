// The Trainer's state into and out of a training checkpoint (train/training_checkpoint.h):
// save_checkpoint, resume, resume_latest.
#include <algorithm>
#include <cstdio>

#include "stoker/optim/optimizer.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/trainer.h"
#include "stoker/train/training_checkpoint.h"
#include "train/step_graph.h"
#include "train/trainer_impl.h"

namespace stoker::train {

void Trainer::Impl::save_checkpoint(const std::filesystem::path& path,
                                    const data::BatchSource* source) const {
  write_checkpoint(path, source);
}

void Trainer::Impl::write_checkpoint(const std::filesystem::path& path,
                                     const data::BatchSource* source,
                                     std::optional<CheckpointPosition> position) const {
  TrainingCheckpoint c{
      .step = step_,
      .evaluated_step = evaluated_step_,
      .world_size = world_size(),
      .grad_accum_steps = options_.grad_accum_steps,
      .samples_seen = samples_seen_,
      .schedule_position = schedule_position(),
      .schedule_total_steps = options_.schedule ? options_.schedule->total_steps : -1,
      .global_batch = schedule_batch_,
      .schedule_rebased = schedule_rebased_};
  // The position in the epoch, also as its world-size-independent progress (elastic resume).
  if (position)
    c.position = *position;
  else if (source)
    c.position = CheckpointPosition::of(*source);
  if (source) c.identity = source->identity();
  for (const RunSetting& setting : options_.run_settings) c.settings[setting.flag] = setting.value;
  c.write(path, {model_, optimizer_, scaler_.get()}, main_rank());
}

void Trainer::Impl::resume(const std::filesystem::path& path) {
  // The loaded weights leave the half copies stale, which a replay would not see: capture again
  // after an eager step.
  if (graph_) graph_->reset();
  graph_warm_steps_ = 0;
  graph_eager_ = false;
  // Everything is read and checked before anything changes: a damaged or foreign file leaves
  // this Trainer as it was.
  const SafetensorsReader reader(path);
  TrainingCheckpoint c = TrainingCheckpoint::read(reader, path);
  const int world = world_size();
  c.complete(options_.grad_accum_steps, world);
  const std::vector<std::string> notes =
      c.check_settings(options_.run_settings, options_.grad_accum_steps, world);
  const bool scale_loaded = c.load(reader, {model_, optimizer_, scaler_.get()});
  step_ = c.step;
  for (nn::Parameter* p : params_) p->zero_grad();
  samples_seen_ = std::max<int64_t>(0, c.samples_seen);
  schedule_batch_ = c.global_batch;
  schedule_rebased_ = c.schedule_rebased || (c.world_size > 0 && c.world_size != world);
  schedule_pos0_ = schedule_rebased_ ? c.schedule_position : static_cast<double>(c.step);
  schedule_samples0_ = samples_seen_;
  schedule_rate_ = 0;  // set by the next fit() (plan_fit)
  if (main_rank()) {
    for (const std::string& note : notes) std::fprintf(stderr, "resume: %s\n", note.c_str());
    if (!scale_loaded)
      std::fprintf(stderr,
                   "resume: %s holds no fp16 loss scale (written in another precision); the "
                   "scale starts again from its initial value\n",
                   path.string().c_str());
  }
  resumed_ = std::move(c);
}

std::optional<std::filesystem::path> Trainer::Impl::resume_latest(
    const std::filesystem::path& dir) {
  return resume_newest(dir, [this](const std::filesystem::path& p) { resume(p); });
}

}  // namespace stoker::train
