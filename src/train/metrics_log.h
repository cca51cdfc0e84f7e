// Private: TrainerOptions::metrics_path, one JSON object per line (JSON Lines) for plotting and
// comparing runs; the fields are documented in docs/long_runs.md#metrics.
//
// A run that resumes at step S continues the file of the run it resumes: lines of steps up to S
// are kept (an evaluation line of step S only when that evaluation is in the checkpoint), later
// ones (written after the checkpoint, by the process that was stopped) and a torn last line are
// dropped — the prefix is rewritten atomically — and the new lines are appended. A run that does
// not resume starts the file afresh. Each line is flushed as written, so a killed run leaves whole
// lines (and at most one torn last line, dropped on resume).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace stoker::train {

class MetricsLog {
 public:
  // Opens `path` for a fit that starts at `resume_step` (-1: a fresh run); `evaluated`: the
  // evaluation at that step is part of the resumed state (its line is kept; otherwise it runs
  // again and its old line goes). Throws naming the file when it cannot be written.
  MetricsLog(const std::filesystem::path& path, int64_t resume_step, bool evaluated);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends `line` (an object) and flushes.
  void write(const nlohmann::ordered_json& line);

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace stoker::train
