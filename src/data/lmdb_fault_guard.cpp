// The LMDB fault guard (lmdb_fault_guard.h): one process-wide SIGSEGV/SIGBUS handler that
// siglongjmps back into the guarded call of the faulting thread, and chains every other fault to
// the handler that was installed before it.
#include "data/lmdb_fault_guard.h"

#include <lmdb.h>
#include <setjmp.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>
#include <atomic>
#include <cstdio>
#include <iterator>
#include <mutex>

#include "stoker/core/error.h"

namespace stoker::data::detail {

namespace {

// This thread's state. Trivially constant-initialized, so the signal handler reads them without
// running a TLS initializer. t_jump is the jump target of the guarded call the thread is in
// (null: none).
thread_local sigjmp_buf* t_jump = nullptr;
thread_local int t_signal = 0;  // SIGSEGV, SIGBUS, kLoopSignal, or 0 for an assertion
thread_local void* t_address = nullptr;
thread_local char t_assertion[320];

// A damaged page can also send LMDB round a loop that never ends (a binary search over a node
// count computed from a damaged header): each guarded call runs under a timer of the thread's
// CPU time that raises kLoopSignal (a real-time signal of the guard's own) past kLoopCpuMs,
// far more than any one LMDB call takes (microseconds, also under a sanitizer; waiting for the
// disk is not CPU time), and short enough that a database whose every key loops still fails
// all its keys quickly.
const int kLoopSignal = SIGRTMIN + 7;
constexpr int kLoopCpuMs = 50;

// This thread's CPU-time timer, made on its first guarded call.
struct LoopTimer {
  timer_t id{};
  bool made = false;
  bool failed = false;
  ~LoopTimer() {
    if (made) timer_delete(id);
  }
  void arm(int ms) {
    if (!made && !failed) {
      struct sigevent event {};
      event.sigev_notify = SIGEV_THREAD_ID;
      event.sigev_signo = kLoopSignal;
      event._sigev_un._tid = static_cast<pid_t>(::gettid());
      made = timer_create(CLOCK_THREAD_CPUTIME_ID, &event, &id) == 0;
      failed = !made;  // then calls run without the limit
    }
    if (!made) return;
    struct itimerspec spec {};
    spec.it_value.tv_sec = ms / 1000;
    spec.it_value.tv_nsec = static_cast<long>(ms % 1000) * 1000000L;
    timer_settime(id, 0, &spec, nullptr);
  }
};
thread_local LoopTimer t_loop_timer;

// The faults a damaged page can cause inside LMDB (SIGFPE: a page size of 0 read from a damaged
// meta page divides by zero in mdb_env_open), and the handlers that were there before ours.
constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS, SIGFPE};
struct sigaction g_previous[std::size(kFaultSignals)] = {};

// A fault that is not ours: what would have happened without the guard.
void chain(int sig, siginfo_t* info, void* context) {
  size_t k = 0;
  while (k + 1 < std::size(kFaultSignals) && kFaultSignals[k] != sig) ++k;
  const struct sigaction& previous = g_previous[k];
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if ((previous.sa_flags & SA_SIGINFO) == 0 && previous.sa_handler != SIG_DFL &&
      previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // No handler before ours (an ignored fault would repeat forever: the kernel kills then too):
  // restore the default action and raise the signal again. It is blocked while this handler
  // runs, so it arrives as the handler returns and ends the process as it would have (with a
  // core dump where enabled); a fault also re-executes the faulting access.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(sig, &default_action, nullptr);
  raise(sig);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  // si_code > 0: the kernel raised it for an access of this thread (kill() and tgkill() give
  // SI_USER / SI_TKILL, <= 0: those are someone's request to end the process, never a page).
  if (t_jump != nullptr && info != nullptr && info->si_code > 0) {
    sigjmp_buf* const jump = t_jump;
    t_jump = nullptr;
    t_signal = sig;
    t_address = info->si_addr;
    siglongjmp(*jump, 1);
  }
  chain(sig, info, context);
}

void on_loop_timer(int sig, siginfo_t* /*info*/, void* /*context*/) {
  // Not inside a guarded call (the timer fired as the call returned): nothing to stop.
  if (t_jump == nullptr) return;
  sigjmp_buf* const jump = t_jump;
  t_jump = nullptr;
  t_signal = sig;
  t_address = nullptr;
  siglongjmp(*jump, 1);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The previous handlers are read before ours goes in, so a fault in another thread in
    // between never finds them unset.
    for (size_t k = 0; k < std::size(kFaultSignals); ++k) {
      sigaction(kFaultSignals[k], nullptr, &g_previous[k]);
    }
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;  // the alternate stack, where a thread has one
    sigemptyset(&action.sa_mask);
    for (const int sig : kFaultSignals) sigaction(sig, &action, nullptr);
    struct sigaction loop {};
    loop.sa_sigaction = on_loop_timer;
    loop.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&loop.sa_mask);
    sigaction(kLoopSignal, &loop, nullptr);
  });
}

// LMDB calls this with the assertion's text, then prints it and aborts when this returns.
void on_assertion(MDB_env* /*env*/, const char* message) {
  if (t_jump == nullptr) return;
  size_t n = 0;
  for (; message != nullptr && message[n] != '\0' && n + 1 < sizeof t_assertion; ++n) {
    t_assertion[n] = message[n];
  }
  t_assertion[n] = '\0';
  sigjmp_buf* const jump = t_jump;
  t_jump = nullptr;
  t_signal = 0;
  siglongjmp(*jump, 1);
}

std::string describe_fault() {
  if (t_signal == 0) return fmt::format("LMDB assertion: {}", t_assertion);
  if (t_signal == kLoopSignal) {
    return fmt::format("LMDB was stopped after {} ms of CPU time in one call: a loop", kLoopCpuMs);
  }
  char address[32];
  std::snprintf(address, sizeof address, "%p", t_address);
  if (t_signal == SIGFPE) return "SIGFPE (arithmetic exception: a division by zero)";
  return fmt::format("{} reading address {}",
                     t_signal == SIGBUS ? "SIGBUS (bus error)" : "SIGSEGV (segmentation fault)",
                     address);
}

}  // namespace

bool run_lmdb_guarded(void (*fn)(void*), void* arg, std::string* why) {
  install_handlers();
  sigjmp_buf jump;
  sigjmp_buf* const outer = t_jump;  // a guarded call inside another one jumps to its own
  // savemask = 1: the jump from the handler restores the signal mask (unblocks the signal).
  if (sigsetjmp(jump, 1) != 0) {
    t_jump = outer;
    if (outer == nullptr) t_loop_timer.arm(0);
    if (why != nullptr) *why = describe_fault();
    return false;
  }
  t_jump = &jump;
  if (outer == nullptr) t_loop_timer.arm(kLoopCpuMs);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(arg);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // t_jump first: a timer that fires in between finds no call to stop.
  t_jump = outer;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (outer == nullptr) t_loop_timer.arm(0);
  return true;
}

void guard_lmdb_assertions(MDB_env* env) { mdb_env_set_assert(env, on_assertion); }

}  // namespace stoker::data::detail
