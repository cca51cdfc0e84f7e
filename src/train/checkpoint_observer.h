// Private: periodic checkpoints as a step observer — every TrainerOptions::checkpoint_interval
// steps and every checkpoint_interval_seconds, then retention (keep_last); at the start of a
// fit, the folder is checked and a resumed run's abandoned later checkpoints are set aside
// (train/checkpoint_files.h). The checkpoint at the end of fit() is the Trainer's own.
//
// By time: each rank's clock is read at log lines and the ranks agree (one all-reduce of one
// number on the job's communicator) so that every rank takes part in the same checkpoints; a
// checkpoint follows the duration by at most log_interval steps.
//
// Room: before the first step, the folder's free space is compared with the size of a
// checkpoint (refused when one does not fit, a warning when keep_last + 2 do not). A periodic
// checkpoint the file system refuses (disk full, an I/O error) leaves the ones before it intact
// (atomic writes); that is said on stderr, naming the file kept, and training continues.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>

#include "stoker/train/step_observer.h"

namespace stoker::train {

class CheckpointObserver final : public StepObserver {
 public:
  CheckpointObserver(std::filesystem::path dir, int64_t every_steps, double every_seconds,
                     int keep_last)
      : dir_(std::move(dir)),
        every_steps_(every_steps),
        every_seconds_(every_seconds),
        keep_last_(keep_last) {}
  void on_fit_begin(const FitContext& ctx) override;
  void on_log(const StepStats& st) override;
  void on_step_done(const StepEnd& s) override;
  void on_epoch_end(int64_t epoch) override;

 private:
  void write();
  void check_space(const FitContext& ctx);

  std::filesystem::path dir_;
  int64_t every_steps_;
  double every_seconds_;
  int keep_last_;
  Trainer* trainer_ = nullptr;
  const data::BatchSource* train_ = nullptr;
  dist::Communicator* comm_ = nullptr;
  bool main_rank_ = true;
  bool due_by_time_ = false;  // decided at the last log line
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace stoker::train
