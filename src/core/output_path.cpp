#include "stoker/core/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

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
          fmt::format("{} {}: {} is not a folder", what, shown.string(), existing.string()),
          kWritableHint);
    fs::create_directories(dir, ec);
    if (ec)
      detail::throw_error(__FILE__, __LINE__,
                          fmt::format("{} {}: cannot create the folder {}: {}", what,
                                      shown.string(), dir.string(), ec.message()),
                          kWritableHint);
  }
  // Permission bits do not stop root, so only creating a file tells whether one can be written.
  const fs::path probe =
      dir / fmt::format(".stoker-write-probe.{}.{}", ::getpid(), g_probe_counter.fetch_add(1));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    detail::throw_error(__FILE__, __LINE__,
                        fmt::format("{} {}: cannot create a file in {}: {}", what, shown.string(),
                                    dir.string(), std::strerror(err)),
                        kWritableHint);
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// The identity of what `p` names (after symlinks), when it exists.
struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId&) const = default;
};
std::optional<FileId> identity(const fs::path& p, struct stat* out = nullptr) {
  struct stat st {};
  if (p.empty() || ::stat(p.c_str(), &st) != 0) return std::nullopt;
  if (out) *out = st;
  return FileId{st.st_dev, st.st_ino};
}

// `p` absolute, symlinks and ".." resolved where it exists, without a trailing separator.
fs::path resolve(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r = fs::absolute(p, ec).lexically_normal();
  if (!r.has_filename() && r.has_relative_path()) r = r.parent_path();
  return r;
}

// `inner` (resolved) is `outer` (resolved) or lies below it: by the path's components, or by
// an existing ancestor of `inner` that is `outer` (the same folder seen through a bind mount).
bool within(const fs::path& inner, const fs::path& outer) {
  const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  if (o == outer.end()) return true;
  const std::optional<FileId> outer_id = identity(outer);
  if (!outer_id) return false;
  for (fs::path p = inner; !p.empty(); p = p.parent_path()) {
    if (identity(p) == outer_id) return true;
    if (p == p.parent_path()) break;
  }
  return false;
}

// What a non-regular file is, for the errors.
std::string file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

[[noreturn]] void not_regular(const fs::path& path, std::string_view what, const fs::path& file,
                              mode_t mode) {
  detail::throw_error(
      __FILE__, __LINE__,
      fmt::format(
          "{} {}: {}is {}, not a regular file: it is not read (reading it could block forever)",
          what, path.string(), file == path ? std::string() : file.string() + " ",
          file_type_name(mode)),
      fmt::format("give {} a regular file (copy the data into one first)", what));
}

// A regular file with more than one name (a hard link) inside folder `dir` that is `id`.
bool folder_holds_file(const fs::path& dir, const FileId& id) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (identity(it->path()) == id) return true;
  return false;
}

}  // namespace

void check_input_file(const fs::path& path, std::string_view what) {
  STOKER_CHECK_HINT(!path.empty(), fmt::format("name the file, or leave {} out", what), what,
                    ": the path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    detail::throw_error(__FILE__, __LINE__,
                        fmt::format("{} {}: {}", what, path.string(), std::strerror(err)),
                        "check the path");
  }
  if (!S_ISREG(st.st_mode)) not_regular(path, what, path, st.st_mode);
}

void check_input_folder(const fs::path& path, std::string_view what,
                        std::initializer_list<std::string_view> files) {
  STOKER_CHECK_HINT(!path.empty(), fmt::format("name the folder, or leave {} out", what), what,
                    ": the path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    detail::throw_error(__FILE__, __LINE__,
                        fmt::format("{} {}: {}", what, path.string(), std::strerror(err)),
                        "check the path");
  }
  if (!S_ISDIR(st.st_mode))
    detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("{} {}: is {}, not a folder", what, path.string(),
                    S_ISREG(st.st_mode) ? std::string("a file") : file_type_name(st.st_mode)),
        fmt::format("give {} the folder (e.g. the one `stoker pack --out` wrote)", what));
  for (const std::string_view name : files) {
    const fs::path file = path / name;
    struct stat fst {};
    if (::stat(file.c_str(), &fst) != 0) continue;  // missing: the reader says what it needs
    if (!S_ISREG(fst.st_mode)) not_regular(path, what, file, fst.st_mode);
  }
}

int open_input_file(const fs::path& path, std::string_view what) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("{}: cannot open {}: {}", what, path.string(), std::strerror(err)),
        "check the path");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    ::close(fd);
    not_regular(path, what, path, mode);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

bool same_file(const fs::path& a, const fs::path& b) {
  if (a.empty() || b.empty()) return false;
  const std::optional<FileId> ia = identity(a), ib = identity(b);
  if (ia && ib) return *ia == *ib;
  return resolve(a) == resolve(b);
}

void PathGuard::input(std::string what, fs::path path) {
  if (path.empty()) return;
  fs::path resolved = resolve(path);
  std::error_code ec;
  const Kind kind = fs::is_directory(path, ec) ? Kind::folder : Kind::file;
  inputs_.push_back({std::move(what), std::move(path), std::move(resolved), kind});
}

void PathGuard::output(std::string what, fs::path path, Kind kind,
                       std::vector<std::string> may_hold) {
  if (path.empty()) return;
  const fs::path resolved = resolve(path);
  struct stat st {};
  const std::optional<FileId> id = identity(path, &st);
  const std::string hint = fmt::format(
      "write {} somewhere else: outputs never go onto an input or into an input's folder", what);
  auto named = [](const Entry& e) { return fmt::format("{} {}", e.what, e.path.string()); };
  const std::string out = fmt::format("{} {}", what, path.string());
  for (const Entry& in : inputs_) {
    if (same_file(path, in.path))
      detail::throw_error(
          __FILE__, __LINE__,
          fmt::format("{} is the input {}: writing it would destroy the input", out, named(in)),
          hint);
    if (in.kind == Kind::folder &&
        (within(resolved, in.resolved) ||
         (id && S_ISREG(st.st_mode) && st.st_nlink > 1 && folder_holds_file(in.path, *id))))
      detail::throw_error(
          __FILE__, __LINE__,
          fmt::format("{} is inside the input folder {}: writing it would damage the input", out,
                      named(in)),
          hint);
    if (kind == Kind::folder &&
        std::find(may_hold.begin(), may_hold.end(), in.what) == may_hold.end() &&
        within(in.resolved, resolved))
      detail::throw_error(__FILE__, __LINE__,
                          fmt::format("{} holds the input {}: the run writes, replaces and deletes "
                                      "files in its output folder",
                                      out, named(in)),
                          fmt::format("give {} a folder of its own, apart from the inputs", what));
  }
  for (const Entry& o : outputs_)
    if (o.kind == Kind::file && kind == Kind::file &&
        (same_file(path, o.path) || resolved == o.resolved))
      detail::throw_error(
          __FILE__, __LINE__,
          fmt::format("{} is also {}: one output would overwrite the other", out, named(o)),
          fmt::format("give {} and {} different paths", what, o.what));
  outputs_.push_back({std::move(what), std::move(path), resolved, kind});
}

void check_output_path(const fs::path& path, std::string_view what) {
  STOKER_CHECK_HINT(!path.empty(), "name the file to write", what, ": the path is empty");
  std::error_code ec;
  // An existing folder, or a path ending in "/", names a folder.
  if (fs::is_directory(path, ec) || !path.has_filename())
    detail::throw_error(__FILE__, __LINE__,
                        fmt::format("{} {}: is a folder, not a file", what, path.string()),
                        fmt::format("name the file to write, e.g. {}", (path / "out").string()));
  const fs::path parent = path.parent_path();
  ensure_writable_dir(parent.empty() ? fs::path(".") : parent, path, what);
}

void check_output_dir(const fs::path& dir, std::string_view what) {
  STOKER_CHECK_HINT(!dir.empty(), "name the folder to write into", what, ": the path is empty");
  ensure_writable_dir(dir, dir, what);
}

}  // namespace stoker::core
