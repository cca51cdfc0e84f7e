#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "stoker/core/error.h"

namespace stoker::util {

namespace {
std::atomic<uint64_t> g_counter{0};

std::string errno_text() { return std::strerror(errno); }
}  // namespace

void write_all(int fd, const void* data, size_t size, const std::filesystem::path& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    STOKER_CHECK_HINT(n > 0, "check free disk space and permissions", "writing ", path.string(),
                      " failed: ", errno_text());
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(int fd)>& write) {
  const std::filesystem::path dir =
      path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  STOKER_CHECK_HINT(std::filesystem::is_directory(dir), "create the folder first", "cannot write ",
                    path.string(), ": folder ", dir.string(), " does not exist");
  const std::filesystem::path tmp =
      path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STOKER_CHECK_HINT(fd >= 0, "check permissions of the folder", "cannot create ", tmp.string(),
                    ": ", errno_text());
  try {
    write(fd);
    STOKER_CHECK(::fsync(fd) == 0, "fsync of ", tmp.string(), " failed: ", errno_text());
    STOKER_CHECK(::close(fd) == 0, "closing ", tmp.string(), " failed: ", errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    STOKER_THROW("cannot rename ", tmp.string(), " to ", path.string(), ": ", err);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on folders
    ::close(dfd);
  }
}

}  // namespace stoker::util
