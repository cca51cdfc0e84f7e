// RunLock: a run owns its outputs. Two runs writing checkpoints into one folder, or lines into
// one metrics file, would interleave and overwrite each other's files; each run therefore locks
// them for as long as it writes:
//
//   checkpoint folder DIR      DIR/.stoker-lock
//   metrics file FILE          FILE.lock (beside it)
//
// The lock file holds its owner as one JSON object (pid, host, start time, command line) and is
// locked with flock(2) on a descriptor held open while the lock lives. The kernel lock dies with
// its process, however it ends: a lock file left by a killed run (kill -9, a crash, a lost node)
// is found unlocked and taken over, with one line on stderr naming the dead owner. A second
// run that finds the lock held is refused before any work, with an error naming the owner (pid,
// host, since when, command) and the fix.
//
// Within one process the same path is one lock, shared: a program that locks its folders at
// start and the Trainer that locks them again in fit() do not refuse each other (acquire()
// returns the lock this process already holds). Only the rank that writes (rank 0) locks, so
// the ranks of one job never refuse each other.
//
// Limits: flock(2) is per host on many network file systems (NFS clients before Linux 2.6.12,
// or mounts with local_lock=flock, which never see another host's lock). A run on another host
// is then not refused; when a lock file names another host, its takeover says so, so a run
// that is in fact still going there can be stopped. The lock file is removed when the lock is
// released (a folder shows .stoker-lock only while a run holds it, or after a kill).
//
// Thread-safety: acquire() and the destructor are thread-safe (a process-wide registry).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

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
