// Private: packs that do not finish. SIGINT/SIGTERM during a pack set a flag that the chunk loop
// polls, so the pack stops between chunks, removes its temporary folder and reports it, rather
// than dying with "<out>.tmp-<pid>" left behind. A pack killed outright (SIGKILL, a crash, a
// second Ctrl-C) does leave that folder; the next pack to the same output removes it when its
// process is gone.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace stoker::data::detail {

// Handles SIGINT and SIGTERM for its lifetime, then restores the handlers it found (a signal
// found ignored stays ignored). Guards may nest or overlap (concurrent packs): the first
// installs, the last restores. The first signal sets the flag; a second one of the same kind
// takes the default action (ends the process).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // The signal received while a guard was installed (since the first of the current ones), or 0.
  static int signal();
};

// "SIGTERM", "SIGINT", else "signal N".
std::string signal_name(int signal);

// The file inside a pack's temporary folder that names the host that made it, so that a pack on
// another host sharing the folder (NFS) is not taken for a dead process of this one. Removed
// before the folder becomes the database.
inline constexpr const char* kPackOwnerFile = "stoker-pack-owner";

// This host's name ("" when unknown).
std::string host_name();

// Looks beside `out` for "<out name>.tmp-<pid>" folders of other processes: removes those whose
// process is gone (kill(pid, 0) fails with ESRCH; made on this host, or by an unknown host) and
// leaves the others. Returns one line per folder found, saying which and why.
std::vector<std::string> remove_stale_leftovers(const std::filesystem::path& out);

}  // namespace stoker::data::detail
