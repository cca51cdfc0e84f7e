#include "stoker/core/output_path.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "stoker/core/error.h"

namespace stoker::core {

namespace {

namespace fs = std::filesystem;

constexpr const char* kWritableHint =
    "choose a place you can write to (a missing folder is created, but not inside a file or on "
    "a read-only file system)";

std::atomic<uint64_t> g_probe_counter{0};

// The nearest ancestor of `dir` that exists (or `dir` itself); empty when none does.
fs::path existing_ancestor(const fs::path& dir) {
  std::error_code ec;
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    if (fs::symlink_status(p, ec).type() != fs::file_type::not_found) return p;
    if (p == p.parent_path()) break;
  }
  return {};
}

// `dir` exists as a folder (created when missing) and takes a new file.
void ensure_writable_dir(const fs::path& dir, const fs::path& shown, std::string_view what) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const fs::path existing = existing_ancestor(dir);
    if (!existing.empty() && !fs::is_directory(existing, ec))
      detail::throw_error(
          __FILE__, __LINE__,
          detail::str(what, " ", shown.string(), ": ", existing.string(), " is not a folder"),
          kWritableHint);
    fs::create_directories(dir, ec);
    if (ec)
      detail::throw_error(__FILE__, __LINE__,
                          detail::str(what, " ", shown.string(), ": cannot create the folder ",
                                      dir.string(), ": ", ec.message()),
                          kWritableHint);
  }
  // Permission bits do not stop root, so only creating a file tells whether one can be written.
  const fs::path probe =
      dir / detail::str(".stoker-write-probe.", ::getpid(), ".", g_probe_counter.fetch_add(1));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    detail::throw_error(__FILE__, __LINE__,
                        detail::str(what, " ", shown.string(), ": cannot create a file in ",
                                    dir.string(), ": ", std::strerror(err)),
                        kWritableHint);
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

void check_output_path(const fs::path& path, std::string_view what) {
  STOKER_CHECK_HINT(!path.empty(), "name the file to write", what, ": the path is empty");
  std::error_code ec;
  // An existing folder, or a path ending in "/", names a folder.
  if (fs::is_directory(path, ec) || !path.has_filename())
    detail::throw_error(__FILE__, __LINE__,
                        detail::str(what, " ", path.string(), ": is a folder, not a file"),
                        detail::str("name the file to write, e.g. ", (path / "out").string()));
  const fs::path parent = path.parent_path();
  ensure_writable_dir(parent.empty() ? fs::path(".") : parent, path, what);
}

void check_output_dir(const fs::path& dir, std::string_view what) {
  STOKER_CHECK_HINT(!dir.empty(), "name the folder to write into", what, ": the path is empty");
  ensure_writable_dir(dir, dir, what);
}

}  // namespace stoker::core
