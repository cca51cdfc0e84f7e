#include "util/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace stoker::util {

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
