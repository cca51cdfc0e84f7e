// TrainingCheckpoint: what a training checkpoint records of its run beside the tensors (step,
// position in the epoch, world size, data identity, schedule clock, run settings), written,
// read and checked in one place (docs/checkpointing.md). Trainer::save_checkpoint and
// Trainer::resume use it; the Trainer holds the resumed one until its next fit() continues
// from it. Reading checks everything before a caller changes anything. Public because the
// Trainer holds one by value.
//
// A value type; the model, optimizer and scaler of TrainingState are borrowed for one call.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stoker/core/error.h"
#include "stoker/data/batch_source.h"

// Run settings: the program's settings that define a training run (model shape, global batch,
namespace stoker::train {

enum class SettingChange { note, refuse, model_shape, global_batch };

struct RunSetting {
  std::string flag;   // as the program spells it: "--width"
  std::string value;  // as it prints it: "64"
  SettingChange on_change = SettingChange::refuse;
};

// The global batch (samples per optimizer step, every rank's) of the checkpoint's run and of
// this one, with their world sizes; -1: unknown.
struct GlobalBatches {
  int64_t then = -1, now = -1;
  int world_then = -1, world_now = -1;
};

// What comparing a checkpoint's settings with this run's found.
struct SettingsComparison {
  std::vector<std::string> notes;  // allowed changes, one line each ("--lr changed 1 -> 2")
  std::string refusal;             // the refused changes (empty: none), and how to fix them
  std::string hint;
};

SettingsComparison compare_run_settings(const std::map<std::string, std::string>& recorded,
                                        const std::vector<RunSetting>& now,
                                        const GlobalBatches& batches);

// The settings as the checkpoint records them (a JSON object flag -> value), and back; a text
// that is not such an object throws naming `file`.
std::string run_settings_json(const std::vector<RunSetting>& settings);
std::map<std::string, std::string> parse_run_settings(const std::string& file,
                                                      const std::string& json);

// Thrown by Trainer::resume for refused changes: every checkpoint of the run would refuse the
// same way, so Trainer::resume_latest does not fall back to an older one.
class ChangedRunError : public Error {
 public:
  using Error::Error;
};

}  // namespace stoker::train

namespace stoker::nn {
class Module;
}  // namespace stoker::nn
namespace stoker::optim {
class Optimizer;
}  // namespace stoker::optim
namespace stoker::amp {
class GradScaler;
}  // namespace stoker::amp

namespace stoker::train {

class SafetensorsReader;

// Where a run stands in its data.
struct CheckpointPosition {
  int64_t epoch = 0, batch = 0;
  int64_t progress = -1;  // data::BatchSource::epoch_progress (-1: unknown)
  // The source's position; a finished epoch is the next one's start.
  static CheckpointPosition of(const data::BatchSource& source);
};

// The state a checkpoint holds: the model's weights, buffers and generators, the optimizer's
// state, the fp16 loss scale (scaler may be null).
struct TrainingState {
  nn::Module& model;
  optim::Optimizer& optimizer;
  amp::GradScaler* scaler = nullptr;
};

struct TrainingCheckpoint {
  std::filesystem::path path;  // the file it was read from
  int version = 2;             // 1: no checksums
  int64_t step = 0;            // optimizer steps done
  CheckpointPosition position;
  int64_t optimizer_steps = 0;
  int64_t evaluated_step = -1;  // the step of the last evaluation inside fit() (-1: none)
  // The job's world size, the data source's identity and grad_accum_steps (-1: not recorded).
  int world_size = -1;
  data::SourceIdentity identity;
  int grad_accum_steps = -1;
  // The run's progress in samples and the learning-rate schedule's clock (elastic resume; see
  // TrainerOptions::schedule): read from older checkpoints as -1 / the step / 0 / false, then
  // derived by complete().
  int64_t samples_seen = -1;
  double schedule_position = 0;
  int64_t schedule_total_steps = -1;
  int64_t global_batch = 0;  // of the run's first segment (0: not known)
  bool schedule_rebased = false;
  std::map<std::string, std::string> settings;  // TrainerOptions::run_settings: flag -> value
  std::string generators = "{}";  // JSON {name: [seed, offset]}, the model's generators

  // Reads and checks the record in `reader`'s header (path names the file in errors).
  static TrainingCheckpoint read(const SafetensorsReader& reader,
                                 const std::filesystem::path& path);
  // Derives what an older checkpoint did not record, taking this job's grad_accum_steps and
  // world size where the checkpoint's are unknown.
  void complete(int grad_accum_now, int world_now);
  // Compares the recorded run settings with `now`: throws ChangedRunError for refused changes,
  // returns the allowed ones (one line each).
  std::vector<std::string> check_settings(const std::vector<RunSetting>& now, int grad_accum_now,
                                          int world_now) const;
  // Checks every tensor's checksum and the generators, then loads `state` and the optimizer's
  // step count. Returns false when the scaler found no loss scale (another precision's file).
  bool load(const SafetensorsReader& reader, const TrainingState& state) const;
  // Throws when `source`, or this job of `world` ranks, is not the run that wrote it.
  void check_run(const data::BatchSource& source, int world) const;
  // Puts `train` where the run stood: restore() at the same world size (or an epoch's end),
  // else continue_epoch() from the recorded progress (elastic resume), saying so when `say`.
  void position_source(data::BatchSource& train, int world, int grad_accum_now, bool say) const;
  // Writes `state` and this record to `path` (atomic; the folder's dead temporaries are removed
  // first). A sharded optimizer gathers its state from every rank: call it on every rank then;
  // only `main_rank` writes.
  void write(const std::filesystem::path& path, const TrainingState& state, bool main_rank) const;
};

// Trainer::resume_latest: `resume` on the newest checkpoint of `dir`, falling back to older ones
// when it fails (ChangedRunError ends it at once); returns the one resumed, or nothing when the
// folder has none.
std::optional<std::filesystem::path> resume_newest(
    const std::filesystem::path& dir,
    const std::function<void(const std::filesystem::path&)>& resume);

}  // namespace stoker::train
