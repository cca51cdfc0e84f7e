#include "util/stop_signal.h"

#include <signal.h>
#include <string.h>

#include <atomic>
#include <mutex>
#include <utility>

namespace stoker::util {

namespace {

// Written by the handler: only lock-free atomics are async-signal-safe.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free);

std::mutex g_mutex;  // guards the nesting count and the saved handlers
int g_guards = 0;
std::vector<std::pair<int, struct sigaction>> g_saved;  // (signal, what was there) installed

void on_signal(int sig) {
  int expected = 0;
  if (!g_received.compare_exchange_strong(expected, sig)) {
    // A second signal: end now, as that signal would have ended the process. raise() is
    // delivered when this handler returns (the signal is blocked while it runs).
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace

StopSignalGuard::StopSignalGuard(const std::vector<int>& signals) {
  std::lock_guard lock(g_mutex);
  if (g_guards++ > 0) return;
  g_received.store(0);
  g_saved.clear();
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (const int sig : signals) sigaddset(&action.sa_mask, sig);  // one handler at a time
  action.sa_flags = SA_RESTART;  // reads and writes go on; the loop polls the flag
  for (const int sig : signals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    const bool plain = !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
    if (!plain) continue;  // ignored, or the program's own handler: left as it is
    if (::sigaction(sig, &action, nullptr) == 0) g_saved.emplace_back(sig, old);
  }
}

StopSignalGuard::~StopSignalGuard() {
  std::lock_guard lock(g_mutex);
  if (--g_guards > 0) return;
  for (const auto& [sig, old] : g_saved) ::sigaction(sig, &old, nullptr);
  g_saved.clear();
}

int StopSignalGuard::received() { return g_received.load(std::memory_order_relaxed); }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return "signal " + std::to_string(signal);
  }
}

}  // namespace stoker::util
