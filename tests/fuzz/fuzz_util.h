// Helpers shared by the fuzz targets (tests/fuzz/*_fuzz.cpp).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace stoker::fuzz {

// An invariant the code under test promises: when it does not hold, report and abort (a finding
// under libFuzzer, a failed replay under CTest). Always on, unlike assert().
#define STOKER_FUZZ_EXPECT(cond, what)                                                     \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz finding at %s:%d: %s (failed: %s)\n", __FILE__, __LINE__, \
                   std::string(what).c_str(), #cond);                                      \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

// A folder of this process's own, in /dev/shm when there is one (no disk writes), else in
// $TMPDIR or /tmp; created on first use and removed at exit. A process that ends in a finding
// (abort) leaves its folder: the next one removes the folders of processes that are gone.
inline const std::filesystem::path& scratch_dir(const char* target) {
  static const std::filesystem::path dir = [&] {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path root = "/dev/shm";
    if (!fs::is_directory(root, ec) || ::access(root.c_str(), W_OK) != 0) {
      const char* tmp = std::getenv("TMPDIR");
      root = tmp && *tmp ? tmp : "/tmp";
    }
    const std::string prefix = "stoker-fuzz-" + std::string(target) + "-";
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        fs::remove_all(e.path(), ec);
    }
    fs::path d = root / (prefix + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  static const bool cleanup_registered = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    return true;
  }();
  (void)cleanup_registered;
  return dir;
}

// The file descriptors of this process open on a file below `dir` ("/dev/shm/x/input (fd 5)",
// comma-separated; empty when none): after a call returns, any is a leak (LeakSanitizer sees
// memory, not descriptors). Reads /proc/self/fd, so descriptors that libFuzzer or a sanitizer
// opens (a symbolizer's pipes) do not count.
inline std::string open_fds_under(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const std::string prefix = dir.string() + "/";
  std::string found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (ec || target.string().compare(0, prefix.size(), prefix) != 0) continue;
    found += (found.empty() ? "" : ", ") + target.string() + " (fd " +
             e.path().filename().string() + ")";
  }
  return found;
}

// The mappings of this process of a file below `dir` (lines of /proc/self/maps; empty when
// none): a map left after a call returns is a leak too. /proc/self/maps is slow to read under
// AddressSanitizer (hundreds of mappings), so it is read only when the process' size grew since
// the last call (a leaked map makes it grow; a steady state of the allocator does not).
inline std::string mapped_under(const std::filesystem::path& dir) {
  static long last_pages = 0;
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages != 0 && pages <= last_pages) return {};
  last_pages = pages;
  const std::string needle = " " + dir.string() + "/";
  std::string found;
  if (FILE* f = std::fopen("/proc/self/maps", "r")) {
    char line[4096];
    while (std::fgets(line, sizeof line, f)) {
      // A plain loop, not strstr: libFuzzer hooks strstr and would learn these strings.
      const size_t n = std::strlen(line);
      for (size_t i = 0; i + needle.size() <= n; ++i) {
        size_t k = 0;
        while (k < needle.size() && line[i + k] == needle[k]) ++k;
        if (k == needle.size()) {
          found += line;
          break;
        }
      }
    }
    std::fclose(f);
  }
  return found;
}

}  // namespace stoker::fuzz
