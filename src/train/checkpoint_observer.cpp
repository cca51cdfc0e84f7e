#include "train/checkpoint_observer.h"

#include <cstdio>

#include "stoker/core/output_path.h"
#include "stoker/dist/communicator.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/trainer.h"

namespace stoker::train {

void CheckpointObserver::on_fit_begin(const FitContext& ctx) {
  trainer_ = &ctx.trainer;
  train_ = &ctx.train;
  comm_ = ctx.world_size > 1 ? ctx.communicator : nullptr;
  main_rank_ = ctx.main_rank;
  due_by_time_ = false;
  last_ = std::chrono::steady_clock::now();
  if (!main_rank_) return;
  // Checked before the first step: an unwritable folder must not cost the run.
  core::check_output_dir(dir_, "TrainerOptions::checkpoint_dir");
  // The checkpoints a resumed run finds further into the run are a branch it abandons.
  if (!ctx.resumed) return;
  for (const auto& p : set_aside_checkpoints_after(dir_, ctx.first_step))
    std::fprintf(stderr,
                 "checkpoint: %s is from after the resumed step %lld: renamed so that it is "
                 "neither resumed nor kept as this run's\n",
                 p.string().c_str(), static_cast<long long>(ctx.first_step));
}

void CheckpointObserver::on_log(const StepStats&) {
  if (every_seconds_ <= 0) return;
  const double since =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count();
  due_by_time_ = since >= every_seconds_;
  if (comm_) {  // due when any rank's clock says so
    const Tensor v =
        Tensor::from_floats({due_by_time_ ? 1.0f : 0.0f}, {1}, DType::f32, comm_->device());
    comm_->all_reduce(v, dist::ReduceOp::max);
    due_by_time_ = v.to_floats()[0] > 0.0f;
  }
}

void CheckpointObserver::on_step_done(const StepEnd& s) {
  const bool by_steps = every_steps_ > 0 && s.step % every_steps_ == 0;
  if (by_steps || due_by_time_) write();
  due_by_time_ = false;
}

void CheckpointObserver::on_epoch_end(int64_t) {
  // Due by the epoch tail's log line (after the epoch's last step was done).
  if (due_by_time_) write();
  due_by_time_ = false;
}

void CheckpointObserver::write() {
  trainer_->save_checkpoint(periodic_checkpoint_path(dir_, trainer_->step()), train_);
  last_ = std::chrono::steady_clock::now();
  if (keep_last_ > 0 && main_rank_) prune_checkpoints(dir_, keep_last_);
}

}  // namespace stoker::train
