// Private: write a file so that readers see either the old or the complete new content.
//
// The bytes go to a temporary file in the same folder ("<name>.tmp.<pid>.<n>"), which is
// fsync'ed, renamed over the target, and the folder is fsync'ed so the rename survives a crash.
// On any failure the temporary file is removed and stoker::Error names the path and errno.
//
// A SIGINT or SIGTERM during a write removes its temporary too: while writes are in flight their
// temporaries' paths sit in a fixed registry, and a handler unlinks them (async-signal-safe),
// puts the default disposition back and re-raises the signal, so the process still ends as that
// signal ends it. The handler is installed only while a write is in flight and only where the
// disposition is the default one: a program that handles (or ignores) these signals keeps its
// own behaviour. What SIGKILL, a crash, or such a program leaves behind is found later by
// remove_stale_temporaries().
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>
#include <vector>

#include "stoker/core/error.h"

namespace stoker::util {

// What write_all and write_file_atomically throw when the file system refuses the write (disk
// full, a file size limit, an I/O error, a folder that is gone or not writable): a stoker::Error
// that callers can tell from the other failures of a save (a bad tensor, a collective).
class WriteError : public core::Error {
 public:
  using core::Error::Error;
};

// `write(fd)` writes the content through `write_all`; it may throw.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(int fd)>& write);

// Writes all `size` bytes to fd or throws (naming `path`).
void write_all(int fd, const void* data, size_t size, const std::filesystem::path& path);

// Removes the temporaries "<name>.tmp.<pid>.<n>" in `dir` whose <name> ends with `suffix` and
// whose writer no longer runs: <pid> is not a live process of this host (our own and other live
// processes' temporaries stay; a pid reused since keeps its file, which is the safe side).
// Returns the removed paths; a folder that cannot be read gives none. Temporaries written from
// another host or PID namespace into a shared folder look dead here: give such writers their own
// folders.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& dir,
                                                            std::string_view suffix);

}  // namespace stoker::util
