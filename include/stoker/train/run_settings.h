// Run settings: the program's settings that define a training run (model shape, global batch,
// learning rate and schedule, precision, optimizer...), recorded in every training checkpoint
// and compared when the run is resumed (Trainer::resume, docs/long_runs.md#changed-settings).
//
// A program lists them in TrainerOptions::run_settings, each under the flag that sets it and
// with the rule for a change: a `note` (allowed, stated on stderr as "resume: --lr changed
// 0.001 -> 0.002"), a `refuse` (it changes what the run means), a `model_shape` (refused as
// "the checkpoint was written for --width 64, this run has --width 128") or a `global_batch`
// (allowed only when batch x accum x ranks stays what the checkpoint's run had, e.g. --accum 2
// on 1 rank resuming a 2-rank run of --accum 1). Settings the checkpoint did not record (older
// checkpoints, new flags) are not compared.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stoker/core/error.h"

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
