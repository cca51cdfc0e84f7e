#include "util/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>

#include "stoker/core/error.h"

namespace stoker::util {

namespace {
std::atomic<uint64_t> g_counter{0};

std::string errno_text() { return std::strerror(errno); }

// The in-flight temporaries, for the signal handler. A slot is free (0), being filled or emptied
// (1), or holds the path of a live temporary (2); the handler reads only slots in state 2, whose
// path does not change until the slot leaves that state. Fixed storage: the handler may not
// allocate. A write that finds no free slot (more than kSlots at once) is simply not covered.
constexpr int kSlots = 32;
constexpr size_t kPathBytes = 4096;
struct InFlight {
  std::atomic<int> state{0};
  char path[kPathBytes];
};
InFlight g_in_flight[kSlots];

constexpr int kSignals[] = {SIGINT, SIGTERM};

// Installation of the handler (under g_install_mu): the writes in flight and, per signal,
// whether the handler is ours to remove again.
std::mutex g_install_mu;
int g_writes_in_flight = 0;
bool g_installed[std::size(kSignals)] = {};

extern "C" void remove_temporaries_and_reraise(int sig) {
  const int saved_errno = errno;
  for (InFlight& slot : g_in_flight)
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlink(slot.path);
  // Installed only over the default disposition: restore it and let the signal end the process
  // as it would have (it is blocked while this handler runs and is delivered on return).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
  errno = saved_errno;
}

bool is_ours(const struct sigaction& a) {
  return !(a.sa_flags & SA_SIGINFO) && a.sa_handler == remove_temporaries_and_reraise;
}

void begin_signal_cover() {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (g_writes_in_flight++ > 0) return;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction current {};
    if (::sigaction(kSignals[i], nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL) continue;  // not ours
    struct sigaction ours {};
    ours.sa_handler = remove_temporaries_and_reraise;
    sigemptyset(&ours.sa_mask);
    g_installed[i] = ::sigaction(kSignals[i], &ours, nullptr) == 0;
  }
}

void end_signal_cover() {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (--g_writes_in_flight > 0) return;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (!g_installed[i]) continue;
    g_installed[i] = false;
    struct sigaction current {};
    // A handler the program installed meanwhile stays.
    if (::sigaction(kSignals[i], nullptr, &current) != 0 || !is_ours(current)) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(kSignals[i], &dfl, nullptr);
  }
}

// Registers `path` for the signal handler for the lifetime of the object.
class SignalCover {
 public:
  explicit SignalCover(const std::filesystem::path& path) {
    begin_signal_cover();
    const std::string& s = path.native();
    if (s.size() >= kPathBytes) return;
    for (InFlight& slot : g_in_flight) {
      int expected = 0;
      if (!slot.state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) continue;
      std::memcpy(slot.path, s.c_str(), s.size() + 1);
      slot.state.store(2, std::memory_order_release);
      slot_ = &slot;
      break;
    }
  }
  ~SignalCover() {
    if (slot_) {
      slot_->state.store(1, std::memory_order_release);
      slot_->state.store(0, std::memory_order_release);
    }
    end_signal_cover();
  }
  SignalCover(const SignalCover&) = delete;
  SignalCover& operator=(const SignalCover&) = delete;

 private:
  InFlight* slot_ = nullptr;
};

// Throws WriteError (a stoker::Error) with the hint and the message: a fmt format string and its
// arguments.
#define STOKER_WRITE_CHECK(cond, hint, ...)                                                      \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      throw WriteError(fmt::format(__VA_ARGS__), core::detail::where(__FILE__, __LINE__), hint); \
  } while (0)

// The writer's pid when `name` is "<base>.tmp.<pid>.<n>" with <base> ending in `suffix`.
bool parse_temporary_name(const std::string& name, std::string_view suffix, long& pid) {
  const size_t tag = name.rfind(".tmp.");
  if (tag == std::string::npos) return false;
  const std::string_view base(name.data(), tag);
  if (base.size() <= suffix.size() || base.substr(base.size() - suffix.size()) != suffix)
    return false;
  const char* p = name.data() + tag + 5;
  const char* end = name.data() + name.size();
  const auto [after_pid, e1] = std::from_chars(p, end, pid);
  if (e1 != std::errc() || after_pid == p || after_pid == end || *after_pid != '.') return false;
  uint64_t n = 0;
  const auto [after_n, e2] = std::from_chars(after_pid + 1, end, n);
  return e2 == std::errc() && after_n == end && after_n != after_pid + 1 && pid > 0 &&
         pid <= INT_MAX;
}
}  // namespace

void write_all(int fd, const void* data, size_t size, const std::filesystem::path& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    STOKER_WRITE_CHECK(n > 0, "check free disk space and permissions", "writing {} failed: {}",
                       path.string(), errno_text());
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(int fd)>& write) {
  const std::filesystem::path dir =
      path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  STOKER_WRITE_CHECK(std::filesystem::is_directory(dir), "create the folder first",
                     "cannot write {}: folder {} does not exist", path.string(), dir.string());
  const std::filesystem::path tmp =
      path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_counter++);
  // Registered before the file exists, so no signal can fall between its creation and its cover.
  const SignalCover cover(tmp);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STOKER_WRITE_CHECK(fd >= 0, "check permissions of the folder", "cannot create {}: {}",
                     tmp.string(), errno_text());
  try {
    write(fd);
    STOKER_WRITE_CHECK(::fsync(fd) == 0, "check free disk space and the disk's health",
                       "fsync of {} failed: {}", tmp.string(), errno_text());
    STOKER_WRITE_CHECK(::close(fd) == 0, "check free disk space and the disk's health",
                       "closing {} failed: {}", tmp.string(), errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    STOKER_WRITE_CHECK(false, "check the folder's permissions", "cannot rename {} to {}: {}",
                       tmp.string(), path.string(), err);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on folders
    ::close(dfd);
  }
}

std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& dir,
                                                            std::string_view suffix) {
  std::vector<std::filesystem::path> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir.empty() ? std::filesystem::path(".") : dir,
                                         std::filesystem::directory_options::skip_permission_denied,
                                         ec);
  if (ec) return removed;
  const long self = ::getpid();
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    long pid = 0;
    if (!parse_temporary_name(it->path().filename().string(), suffix, pid) || pid == self) continue;
    if (!it->is_regular_file(ec)) continue;
    // kill(pid, 0) delivers nothing: ESRCH means no such process; EPERM means it lives.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (std::filesystem::remove(it->path(), ec)) removed.push_back(it->path());
  }
  return removed;
}

}  // namespace stoker::util
