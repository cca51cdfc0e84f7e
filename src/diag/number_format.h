// Private to src/diag: one number printed with a printf format ("%.1f") as a std::string, for
// the reports' text, the HTML page and the CSV files.
#pragma once

#include <cstdio>
#include <string>

namespace stoker::diag::detail {

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace stoker::diag::detail
