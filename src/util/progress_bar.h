// Private: a one-line progress bar on stderr, drawn only when stderr is a terminal (logs and
// CI output stay clean) and redrawn at most ten times a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace stoker::util {

// "45s", "12m30s", "3h05m", "2d04h": a duration as a person reads it (negative: "?").
std::string format_duration(double seconds);

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled);

  bool enabled() const { return enabled_; }
  // "\r<label> [=====     ] done/total<suffix>"; `force` draws even within the 0.1 s window.
  void draw(const std::string& label, int64_t done, int64_t total, const std::string& suffix = {},
            bool force = false);
  // Erases the line (before a log line is printed).
  void clear();
  // Leaves the last drawing on screen and moves to the next line.
  void finish();

 private:
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace stoker::util
