#include "stoker/train/checkpoint_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "stoker/core/error.h"

namespace stoker::train {

namespace fs = std::filesystem;

namespace {

// The locks this process holds, by absolute path: one lock per path and process. An entry made
// before a fork() belongs to the parent (the child must lock for itself).
struct Held {
  std::weak_ptr<RunLock> lock;
  pid_t pid = -1;
};
std::mutex g_mutex;
std::map<std::string, Held> g_held;

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// This process's command line, its words joined by spaces (at most 500 characters).
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw)
    if (c == '\0') c = ' ';
  if (raw.size() > 500) raw = raw.substr(0, 497) + "...";
  return raw;
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  off_t at = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0 || text.size() > (1 << 16)) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

LockOwner parse_owner(const std::string& text) {
  LockOwner o;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.contains("pid") && j["pid"].is_number_integer()) o.pid = j["pid"].get<int64_t>();
    if (j.contains("host") && j["host"].is_string()) o.host = j["host"].get<std::string>();
    if (j.contains("since") && j["since"].is_string()) o.since = j["since"].get<std::string>();
    if (j.contains("command") && j["command"].is_string())
      o.command = j["command"].get<std::string>();
  } catch (const std::exception&) {
    o.pid = -1;  // empty (a run killed between creating and writing it) or not ours
  }
  return o;
}

// "process 1234 on host h since 2024-05-01T12:00:00Z (stoker_gpt --checkpoint-dir run)".
std::string describe(const LockOwner& o) {
  return fmt::format("process {}{}{}{}", o.pid,
                     o.host.empty() ? std::string() : " on host " + o.host,
                     o.since.empty() ? std::string() : " since " + o.since,
                     o.command.empty() ? std::string() : " (" + o.command + ")");
}

}  // namespace

RunLock::RunLock(fs::path path, std::string key, int fd)
    : path_(std::move(path)), key_(std::move(key)), fd_(fd), pid_(::getpid()) {}

fs::path RunLock::dir_lock_path(const fs::path& dir) { return dir / ".stoker-lock"; }

fs::path RunLock::file_lock_path(const fs::path& file) {
  fs::path p = file;
  p += ".lock";
  return p;
}

LockOwner RunLock::read_owner(const fs::path& lock_file) {
  std::ifstream in(lock_file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_owner(text);
}

std::shared_ptr<RunLock> RunLock::acquire(const fs::path& lock_file, std::string_view what,
                                          std::string_view flag) {
  std::error_code ec;
  const fs::path abs = fs::absolute(lock_file, ec).lexically_normal();
  const std::string key = ec ? lock_file.string() : abs.string();
  std::lock_guard guard(g_mutex);
  if (const auto it = g_held.find(key); it != g_held.end() && it->second.pid == ::getpid()) {
    if (std::shared_ptr<RunLock> held = it->second.lock.lock()) return held;
  }
  const std::string me = host_name();
  // The holder removes the file when it releases the lock: a file locked after it was removed
  // (or replaced) is not the lock any more, so lock the one now under the name.
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    STOKER_CHECK_HINT(
        fd >= 0, fmt::format("check the permissions of {}", lock_file.parent_path().string()), what,
        ": cannot create the lock file ", lock_file.string(), " (", std::strerror(errno), ")");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const LockOwner owner = parse_owner(read_all(fd));
        ::close(fd);
        const bool here = owner.host.empty() || owner.host == me;
        STOKER_CHECK_HINT(
            false,
            fmt::format(
                "wait for that run to end, or stop it (kill {}{}), or give this run another {}",
                owner.pid, here ? std::string() : " on " + owner.host, flag),
            what, " is in use by another run: ",
            owner.pid > 0 ? describe(owner) : std::string("a process that is starting"),
            " holds its lock ", lock_file.string());
      }
      // No locking on this file system (ENOLCK): the run goes on, unprotected, and says so.
      std::fprintf(stderr,
                   "warning: %.*s: cannot lock %s (%s): another run on it would not be refused\n",
                   static_cast<int>(what.size()), what.data(), lock_file.string().c_str(),
                   std::strerror(err));
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) != 0 || ::stat(lock_file.c_str(), &named) != 0 ||
        held.st_ino != named.st_ino || held.st_dev != named.st_dev) {
      ::close(fd);
      STOKER_CHECK(attempt < 100, what, ": the lock file ", lock_file.string(),
                   " keeps being replaced by another process");
      continue;
    }
    const LockOwner previous = parse_owner(read_all(fd));
    if (previous.pid > 0 && !(previous.pid == ::getpid() && previous.host == me)) {
      const bool other_host = !previous.host.empty() && previous.host != me;
      std::fprintf(stderr,
                   "%.*s: took over the lock %s of %s, which no longer holds it (it ended without "
                   "releasing it: killed or crashed)%s\n",
                   static_cast<int>(what.size()), what.data(), lock_file.string().c_str(),
                   describe(previous).c_str(),
                   other_host ? "; it ran on another host: if that run is still going there, stop "
                                "one of the two (locks may not reach across hosts on a network "
                                "file system)"
                              : "");
    }
    const std::string record = nlohmann::json{{"pid", static_cast<int64_t>(::getpid())},
                                              {"host", me},
                                              {"since", utc_now()},
                                              {"command", command_line()}}
                                   .dump() +
                               "\n";
    const bool written = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, record.data(), record.size(), 0) ==
                                                        static_cast<ssize_t>(record.size());
    if (!written) {
      const int err = errno;
      ::close(fd);
      STOKER_CHECK_HINT(
          false, fmt::format("free space on the disk of {}", lock_file.parent_path().string()),
          what, ": cannot write the lock file ", lock_file.string(), " (", std::strerror(err), ")");
    }
    std::shared_ptr<RunLock> lock(new RunLock(lock_file, key, fd));
    g_held[key] = {lock, ::getpid()};
    return lock;
  }
}

RunLock::~RunLock() {
  // A copy of the parent's lock in a forked child is not the child's to release.
  if (pid_ != ::getpid()) return;
  {
    std::lock_guard guard(g_mutex);
    if (const auto it = g_held.find(key_); it != g_held.end() && it->second.lock.expired())
      g_held.erase(it);
  }
  // Removed while still locked: a process that opened the old file finds it replaced and
  // locks the new one (see acquire).
  std::error_code ec;
  fs::remove(path_, ec);
  ::close(fd_);
}

}  // namespace stoker::train
