// Private: stopping cleanly on a signal (preemption). While a StopSignalGuard lives, the signals
// it was given (SIGTERM, SIGINT, SIGUSR1 in the Trainer) only set a flag that a loop polls at its
// own safe points (the Trainer: after each step), so that the work in flight finishes and is
// saved; the loop then ends and reports the signal. The handler does nothing else (an atomic
// store is all that is safe there).
//
// A second signal of the set while the first is being handled takes the default action at once
// (the process ends as that signal would end it): what a user who insists, or a scheduler's
// second notice, asks for. A signal that already had a handler of the program's own, or was
// ignored, when the guard was made is left alone (a shell starts background jobs with SIGINT
// ignored). The destructor restores what it found.
//
// Thread-safety: guards may nest (the first installs, the last restores); received() is
// lock-free and may be read from any thread.
#pragma once

#include <string>
#include <vector>

namespace stoker::util {

class StopSignalGuard {
 public:
  explicit StopSignalGuard(const std::vector<int>& signals);
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  // The first signal received since the outermost guard was made, or 0.
  static int received();
};

// "SIGTERM", "SIGINT", "SIGUSR1", ... else "signal N".
std::string signal_name(int signal);

}  // namespace stoker::util
