#include "data/pack_interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <mutex>
#include <utility>

#include "stoker/core/error.h"

namespace stoker::data::detail {

namespace fs = std::filesystem;

namespace {

// Written by the handler: only lock-free atomics are async-signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

std::mutex g_mutex;  // guards the installation count and the saved handlers
int g_guards = 0;
struct sigaction g_old_int {
}, g_old_term{};

void on_signal(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig) && expected == sig) {
    // The same signal again: the user insists. Die as that signal would have made us.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace

InterruptGuard::InterruptGuard() {
  std::lock_guard lock(g_mutex);
  if (g_guards++ > 0) return;
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes of the pack go on; the loop polls
  // A signal the process was started ignoring stays ignored (a shell runs background jobs with
  // SIGINT ignored, so that Ctrl-C meant for the foreground does not reach them).
  for (auto [sig, old] : {std::pair{SIGINT, &g_old_int}, std::pair{SIGTERM, &g_old_term}}) {
    ::sigaction(sig, nullptr, old);
    if (old->sa_handler != SIG_IGN) ::sigaction(sig, &action, nullptr);
  }
}

InterruptGuard::~InterruptGuard() {
  std::lock_guard lock(g_mutex);
  if (--g_guards > 0) return;
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

int InterruptGuard::signal() { return g_signal.load(std::memory_order_relaxed); }

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return fmt::format("signal {}", signal);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

std::vector<std::string> remove_stale_leftovers(const fs::path& out) {
  std::vector<std::string> lines;
  const std::string prefix = out.filename().string() + ".tmp-";
  std::error_code ec;
  const fs::path parent = fs::absolute(out, ec).parent_path();
  fs::directory_iterator it(parent, ec), end;
  const std::string me = host_name();
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path path = it->path();
    const std::string name = path.filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const char* digits = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    long pid = 0;
    const auto parsed = std::from_chars(digits, last, pid);
    if (parsed.ec != std::errc() || parsed.ptr != last || *digits == '+' || *digits == '-' ||
        pid <= 0 || pid == static_cast<long>(::getpid())) {
      continue;
    }
    std::error_code type_ec;
    if (!fs::is_directory(it->symlink_status(type_ec)) || type_ec) continue;
    std::string host;
    std::ifstream(path / kPackOwnerFile) >> host;
    if (!host.empty() && host != me) {
      lines.push_back(
          fmt::format("{}: a pack's temporary folder made on host {} (process {}), left alone: "
                      "remove it by hand if that pack is not running",
                      path.string(), host, pid));
      continue;
    }
    if (::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH) {
      std::error_code rm_ec;
      fs::remove_all(path, rm_ec);
      lines.push_back(
          rm_ec ? fmt::format("could not remove the leftover of an interrupted pack {}: {}",
                              path.string(), rm_ec.message())
                : fmt::format(
                      "removed a leftover of an interrupted pack: {} (its process {} is gone)",
                      path.string(), pid));
    } else {
      lines.push_back(
          fmt::format("{} belongs to process {}, which is running (another pack to the same "
                      "output?): left alone",
                      path.string(), pid));
    }
  }
  return lines;
}

}  // namespace stoker::data::detail
