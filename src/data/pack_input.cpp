#include "data/pack_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "stoker/core/error.h"

namespace stoker::data::detail {

namespace {

// Why `path` cannot be stat()ed, after stat failed with `error`.
std::string stat_failure(const std::string& path, int error) {
  if (error == ELOOP) return "symbolic link loop (too many levels of symbolic links)";
  struct stat link {};
  if (error == ENOENT && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    char target[4096];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    const std::string to = n > 0 ? std::string(target, static_cast<size_t>(n)) : "?";
    return fmt::format("dangling symbolic link to '{}' (its target does not exist)", to);
  }
  return fmt::format("cannot open: {}", std::strerror(error));
}

std::string not_regular(const std::string& path, mode_t mode) {
  struct stat link {};
  const bool through_link = ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
  return fmt::format("not a regular file ({}{})", through_link ? "a symbolic link to " : "",
                     file_type_name(mode));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "an unknown kind of file";
}

std::string read_input_file(const std::string& path, std::vector<uint8_t>& bytes,
                            const InputHeadCheck& check_head) {
  bytes.clear();
  if (path.empty()) return "empty path";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return stat_failure(path, errno);
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
  // O_NONBLOCK: should the path have become a FIFO since the stat, open returns at once instead
  // of waiting for a writer; it changes nothing for a regular file.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    return error == ELOOP || error == ENOENT ? stat_failure(path, error)
                                             : fmt::format("cannot open: {}", std::strerror(error));
  }
  if (::fstat(fd.get(), &st) != 0) return fmt::format("cannot stat: {}", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    return fmt::format("not a regular file ({}, replaced while opened)",
                       file_type_name(st.st_mode));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxInputBytes) {
    return fmt::format("file of {} bytes is larger than a record holds (4 GiB)", size);
  }
  // The head first, so that check_head judges the file before the rest is read.
  bytes.resize(static_cast<size_t>(check_head ? std::min<uint64_t>(size, kInputHeadBytes) : size));
  size_t done = 0;
  auto read_until_full = [&]() -> std::string {
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fmt::format("read error: {}", std::strerror(errno));
      if (n == 0) break;  // it shrank since fstat: keep what is there (validation judges it)
      done += static_cast<size_t>(n);
    }
    bytes.resize(done);
    return {};
  };
  if (check_head) {
    if (std::string why = read_until_full(); !why.empty()) return why;
    if (std::string why = check_head(size, bytes); !why.empty()) {
      bytes.clear();
      return why;
    }
    if (done < kInputHeadBytes) return {};  // the head was the whole file
    bytes.resize(static_cast<size_t>(size));
  }
  return read_until_full();
}

}  // namespace stoker::data::detail
