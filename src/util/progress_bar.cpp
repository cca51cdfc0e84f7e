#include "util/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace stoker::util {

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const long long s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  }
  return buf;
}

ProgressBar::ProgressBar(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO) == 1) {}

void ProgressBar::draw(const std::string& label, int64_t done, int64_t total,
                       const std::string& suffix, bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * std::min(done, total) / total) : kWidth;
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(kWidth, ' ');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld%s", label.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), suffix.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r%*s\r", 100, "");
  drawn_ = false;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace stoker::util
