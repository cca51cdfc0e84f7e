#include "train/checkpoint_observer.h"

#include <cstdio>

#include "stoker/core/output_path.h"
#include "stoker/dist/communicator.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/trainer.h"
#include "util/atomic_file.h"

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
  check_space(ctx);
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

void CheckpointObserver::check_space(const FitContext& ctx) {
  // A checkpoint holds the parameters and the optimizer state; the header, buffers and scaler
  // are small beside them. An estimate: a ZeRO-1 run's gathered state counts as rank 0's shard.
  const MemoryReport m = ctx.trainer.memory_report();
  const uint64_t bytes = m.parameters + m.optimizer_state + m.optimizer_state_host + (64u << 10);
  // Up to keep_last periodic ones, the one being written and last.safetensors at once.
  const uint64_t files = keep_last_ > 0 ? static_cast<uint64_t>(keep_last_) + 2 : 3;
  check_free_space(dir_, bytes, bytes * files, "the checkpoint folder " + dir_.string(),
                   "--checkpoint-dir");
}

void CheckpointObserver::write() {
  const std::filesystem::path path = periodic_checkpoint_path(dir_, trainer_->step());
  try {
    trainer_->save_checkpoint(path, train_);
  } catch (const util::WriteError& e) {
    // Disk full, a size limit, an I/O error: the write was atomic, so the checkpoints before it
    // are whole. Training goes on (the run is worth more than this checkpoint); the next one is
    // tried at its interval, and each failure is said.
    std::string kept = "none was written before it";
    for (const CheckpointFile& c : list_checkpoints(dir_))
      if (c.path != path) kept = "the previous one, " + c.path.string() + ", is kept intact";
    std::fprintf(stderr,
                 "checkpoint: writing %s failed (%s); %s. Training continues and the next "
                 "checkpoint is tried at its interval: free space in %s\n",
                 path.string().c_str(), e.message().c_str(), kept.c_str(), dir_.string().c_str());
    std::fflush(stderr);
    last_ = std::chrono::steady_clock::now();
    return;
  }
  last_ = std::chrono::steady_clock::now();
  if (keep_last_ > 0 && main_rank_) prune_checkpoints(dir_, keep_last_);
}

}  // namespace stoker::train
