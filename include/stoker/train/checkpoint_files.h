// The checkpoints in a run's folder ("step_<N>.safetensors", "last.safetensors"): which there are,
// the newest to resume (by the step its header records, not file times), retention, and the run's
// folder lock. Every write is atomic; a file damaged afterwards is found by resume's checksums.
// Thread-safety: free functions over the file system; no shared state.
// Details: docs/long_runs.md#what-a-restart-does, docs/long_runs.md#one-run-per-folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
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
// resume_latest() takes them for this run's; nothing is deleted. A folder taken back again keeps
// every branch: the files of one branch share the first suffix none of them has yet
// (".abandoned", ".abandoned-2", ".abandoned-3", ...), and no rename ever replaces an existing
// file. Returns the new names.
std::vector<std::filesystem::path> set_aside_checkpoints_after(const std::filesystem::path& dir,
                                                               int64_t step);
// "<path>.abandoned" for branch 1, "<path>.abandoned-<branch>" for the others.
std::filesystem::path abandoned_name(const std::filesystem::path& path, int branch);

// --- Nothing finished is thrown away: free space before a run, fallbacks after it.

// Bytes an unprivileged writer may still write on the file system of `dir` (statvfs f_bavail),
// or -1 when unknown (`dir` missing, statvfs refused).
int64_t free_bytes(const std::filesystem::path& dir);

// Before the first step: throws stoker::Error naming `what` (e.g. "--save FILE"), both numbers
// and `flag` in the hint when the file system of `dir` has less than `needed` bytes free; prints
// a warning on stderr (and returns true) when it has less than `comfortable`. Unknown free space
// passes silently.
bool check_free_space(const std::filesystem::path& dir, uint64_t needed, uint64_t comfortable,
                      const std::string& what, const std::string& flag);

// Where a file that cannot be written at `path` goes instead, in this order: a new name beside
// it, then in each of `dirs`, then in $TMPDIR (else /tmp), then the current folder, each folder
// once. The name is "<stem>.unsaved-<pid>-<k><extension>" with the first k not taken.
std::vector<std::filesystem::path> fallback_paths(const std::filesystem::path& path,
                                                  const std::vector<std::filesystem::path>& dirs);

// Writes with `write(p)` at `path`; when that throws (stoker::Error or a file-system error: disk
// full, a file size limit, an I/O error, a folder gone), at each of fallback_paths(path, dirs)
// until one works. Returns normally only when `path` itself was written. Otherwise throws
// stoker::Error: "<what> <path> could not be written (<reason>); it was written to <fallback>
// instead", with the hint `hint(fallback)`, or, when no place worked, naming every place tried
// and why, with the hint `lost_hint`.
void write_or_fall_back(const std::filesystem::path& path, const std::string& what,
                        const std::vector<std::filesystem::path>& dirs,
                        const std::function<void(const std::filesystem::path&)>& write,
                        const std::function<std::string(const std::filesystem::path&)>& hint,
                        const std::string& lost_hint);

}  // namespace stoker::train

// RunLock: a run owns its outputs. Two runs writing checkpoints into one folder, or lines into
namespace stoker::train {

// Who holds (or held) a lock: the JSON object of its lock file.
struct LockOwner {
  int64_t pid = -1;
  std::string host;
  std::string since;  // UTC, "2024-05-01T12:00:00Z"
  std::string command;
};

class RunLock {
 public:
  // The lock file of a checkpoint folder and of a metrics file.
  static std::filesystem::path dir_lock_path(const std::filesystem::path& dir);
  static std::filesystem::path file_lock_path(const std::filesystem::path& file);

  // Locks `lock_file` for this process (its folder must exist), or returns the lock this
  // process already holds on it. `what` names the output in messages ("--checkpoint-dir DIR",
  // "TrainerOptions::metrics_path FILE"). Held by another live process: throws stoker::Error
  // naming the owner, with a hint (wait for it, stop it, or give another `flag`). A stale lock
  // file (its process gone) is taken over, saying so on stderr.
  static std::shared_ptr<RunLock> acquire(const std::filesystem::path& lock_file,
                                          std::string_view what, std::string_view flag);

  ~RunLock();  // unlocks and removes the lock file
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // The owner recorded in `lock_file` (pid -1 when missing or unreadable).
  static LockOwner read_owner(const std::filesystem::path& lock_file);

 private:
  RunLock(std::filesystem::path path, std::string key, int fd);
  std::filesystem::path path_;
  std::string key_;  // the registry's key: the absolute path
  int fd_ = -1;
  int64_t pid_ = -1;  // the process that locked
};

}  // namespace stoker::train
