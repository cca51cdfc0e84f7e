// The checkpoints in a run's folder: which there are, the newest to resume, and retention.
//
// The Trainer writes into TrainerOptions::checkpoint_dir a periodic "step_<N>.safetensors" every
// checkpoint interval and "last.safetensors" when fit() ends (docs/checkpointing.md). Every
// write is atomic, so a file under one of these names is complete; a file damaged afterwards is
// found by Trainer::resume's checksums (resume_latest() then falls back to the one before it).
//
// Order is by the step each file records in its header, the final one after a periodic one of
// the same step: the "newest" checkpoint is the one furthest into the run, whatever the file
// times say (copies keep working).
//
// Thread-safety: free functions over the file system; no shared state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace stoker::train {

struct CheckpointFile {
  std::filesystem::path path;
  int64_t step = 0;    // optimizer steps done when it was written ("stoker.step")
  bool final = false;  // last.safetensors (kept by prune_checkpoints)
};

// The folder's names for them.
std::filesystem::path periodic_checkpoint_path(const std::filesystem::path& dir, int64_t step);
std::filesystem::path final_checkpoint_path(const std::filesystem::path& dir);

// The training checkpoints under those names in `dir`, oldest first. Only headers are read. A
// file whose header cannot be read (not a stoker training checkpoint, or damaged there) is left
// out and named in `skipped` when given. A missing folder has none.
std::vector<CheckpointFile> list_checkpoints(const std::filesystem::path& dir,
                                             std::vector<std::string>* skipped = nullptr);

// Retention: removes the periodic checkpoints of `dir` but the `keep_last` newest (by the step
// their headers record); the final one is never removed, nor is a file under a checkpoint's
// name whose header cannot be read (it is not counted either). keep_last 0 keeps all. Returns
// what it removed.
std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& dir,
                                                     int keep_last);

// After a resume from `step`: the checkpoints of `dir` further into the run than it (a branch the
// resumed run abandons) are renamed "<name>.abandoned", so that neither retention nor the next
// resume_latest() takes them for this run's; nothing is deleted. Returns the new names.
std::vector<std::filesystem::path> set_aside_checkpoints_after(const std::filesystem::path& dir,
                                                               int64_t step);

}  // namespace stoker::train
