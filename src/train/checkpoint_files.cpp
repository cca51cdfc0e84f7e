#include "stoker/train/checkpoint_files.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/train/safetensors.h"

namespace stoker::train {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "step_";
constexpr std::string_view kSuffix = ".safetensors";
constexpr std::string_view kFinal = "last.safetensors";

// N of "step_<N>.safetensors" (digits only), else none.
std::optional<int64_t> periodic_step(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return std::nullopt;
  const std::string_view digits(name.data() + kPrefix.size(),
                                name.size() - kPrefix.size() - kSuffix.size());
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

std::vector<fs::directory_entry> regular_files(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return out;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) out.push_back(*it);
  }
  return out;
}

// rename(from, to) that fails with EEXIST instead of replacing an existing `to`; 0 or errno.
int rename_no_replace(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return errno;
  // A file system without RENAME_NOREPLACE: a hard link fails on an existing name too.
  if (::link(from.c_str(), to.c_str()) != 0) {
    if (errno == EEXIST) return EEXIST;
    // Nor hard links: check, then rename (a race with another writer is left open here).
    std::error_code ec;
    if (fs::symlink_status(to, ec).type() != fs::file_type::not_found) return EEXIST;
    return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
  }
  return ::unlink(from.c_str()) == 0 ? 0 : errno;
}

}  // namespace

fs::path periodic_checkpoint_path(const fs::path& dir, int64_t step) {
  return dir / (std::string(kPrefix) + std::to_string(step) + std::string(kSuffix));
}

fs::path final_checkpoint_path(const fs::path& dir) { return dir / std::string(kFinal); }

std::vector<CheckpointFile> list_checkpoints(const fs::path& dir,
                                             std::vector<std::string>* skipped) {
  std::vector<CheckpointFile> out;
  for (const fs::directory_entry& e : regular_files(dir)) {
    const std::string name = e.path().filename().string();
    const bool final = name == kFinal;
    if (!final && !periodic_step(name)) continue;
    try {
      const SafetensorsReader reader(e.path());
      const auto& meta = reader.metadata();
      const auto kind = meta.find("stoker.kind");
      const auto step = meta.find("stoker.step");
      STOKER_CHECK(
          kind != meta.end() && kind->second == "training-checkpoint" && step != meta.end(),
          "not a stoker training checkpoint");
      out.push_back({e.path(), std::stoll(step->second), final});
    } catch (const std::exception& ex) {
      if (skipped) skipped->push_back(e.path().string() + ": " + ex.what());
    }
  }
  std::sort(out.begin(), out.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step < b.step : (a.final != b.final ? b.final : a.path < b.path);
  });
  return out;
}

std::vector<fs::path> prune_checkpoints(const fs::path& dir, int keep_last) {
  STOKER_CHECK(keep_last >= 0, "prune_checkpoints: keep_last ", keep_last, " must be >= 0");
  std::vector<fs::path> removed;
  if (keep_last == 0) return removed;
  // By the steps their headers record: a file under a checkpoint's name that is not a readable
  // one (junk, a damaged header) is neither counted nor removed, so it can never push the
  // run's good checkpoints out.
  std::vector<CheckpointFile> periodic;
  for (CheckpointFile& c : list_checkpoints(dir))
    if (!c.final) periodic.push_back(std::move(c));
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < periodic.size(); ++i) {
    std::error_code ec;
    if (fs::remove(periodic[i].path, ec)) removed.push_back(periodic[i].path);
  }
  return removed;
}

fs::path abandoned_name(const fs::path& path, int branch) {
  fs::path to = path;
  to += branch <= 1 ? std::string(".abandoned") : ".abandoned-" + std::to_string(branch);
  return to;
}

std::vector<fs::path> set_aside_checkpoints_after(const fs::path& dir, int64_t step) {
  std::vector<CheckpointFile> later;
  for (CheckpointFile& c : list_checkpoints(dir))
    if (c.step > step) later.push_back(std::move(c));
  if (later.empty()) return {};
  // One suffix for the whole branch, the first that none of its files has yet: a folder that
  // is taken back twice keeps both branches (.abandoned, .abandoned-2, ...), told apart.
  int branch = 1;
  for (bool taken = true; taken; branch += taken ? 1 : 0) {
    taken = false;
    for (const CheckpointFile& c : later) {
      std::error_code ec;
      taken = taken || fs::symlink_status(abandoned_name(c.path, branch), ec).type() !=
                           fs::file_type::not_found;
    }
  }
  std::vector<fs::path> renamed;
  for (const CheckpointFile& c : later) {
    // Never onto an existing file (one may appear meanwhile): the next free suffix then.
    for (int b = branch;; ++b) {
      const fs::path to = abandoned_name(c.path, b);
      const int err = rename_no_replace(c.path, to);
      if (err == EEXIST) continue;
      STOKER_CHECK_HINT(err == 0, "move it out of the checkpoint folder by hand", "checkpoint ",
                        c.path.string(), " (step ", c.step,
                        ") is further into the run than the resumed step ", step,
                        " and could not be renamed to ", to.string(), ": ", std::strerror(err));
      renamed.push_back(to);
      break;
    }
  }
  return renamed;
}

int64_t free_bytes(const fs::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

bool check_free_space(const fs::path& dir, uint64_t needed, uint64_t comfortable,
                      const std::string& what, const std::string& flag) {
  const int64_t free = free_bytes(dir.empty() ? fs::path(".") : dir);
  if (free < 0) return false;
  const auto have = static_cast<uint64_t>(free);
  STOKER_CHECK_HINT(have >= needed,
                    fmt::format("free space there, or give {} on another disk", flag), what,
                    ": its disk has ", core::format_bytes(have), " (", have,
                    " bytes) free, but the file takes about ", core::format_bytes(needed), " (",
                    needed, " bytes): the run would train and then fail to write it");
  if (have >= comfortable) return false;
  std::fprintf(stderr,
               "warning: %s: its disk has %s free, and the run's files there take about %s: "
               "it may fill the disk (free space there, or give %s on another disk)\n",
               what.c_str(), core::format_bytes(have).c_str(),
               core::format_bytes(comfortable).c_str(), flag.c_str());
  return true;
}

std::vector<fs::path> fallback_paths(const fs::path& path, const std::vector<fs::path>& dirs) {
  std::vector<fs::path> folders = {path.parent_path().empty() ? fs::path(".") : path.parent_path()};
  for (const fs::path& d : dirs)
    if (!d.empty()) folders.push_back(d);
  const char* tmp = std::getenv("TMPDIR");
  folders.push_back(tmp && *tmp ? fs::path(tmp) : fs::path("/tmp"));
  folders.push_back(".");
  std::vector<fs::path> out;
  std::vector<fs::path> seen;
  const std::string stem = path.stem().string(), ext = path.extension().string();
  for (const fs::path& f : folders) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(f, ec);
    const fs::path key = ec ? f : canonical;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    for (int k = 0;; ++k) {
      const fs::path p = f / fmt::format("{}.unsaved-{}-{}{}", stem, ::getpid(), k, ext);
      std::error_code exists_ec;
      if (fs::symlink_status(p, exists_ec).type() != fs::file_type::not_found) continue;
      if (std::find(out.begin(), out.end(), p) != out.end()) continue;
      out.push_back(p);
      break;
    }
  }
  return out;
}

void write_or_fall_back(const fs::path& path, const std::string& what,
                        const std::vector<fs::path>& dirs,
                        const std::function<void(const fs::path&)>& write,
                        const std::function<std::string(const fs::path&)>& hint,
                        const std::string& lost_hint) {
  auto reason = [](const std::exception& e) {
    const auto* err = dynamic_cast<const Error*>(&e);
    return err ? err->message() : std::string(e.what());
  };
  std::string failure;
  try {
    write(path);
    return;
  } catch (const std::exception& e) {
    failure = reason(e);
  }
  std::string attempts;
  for (const fs::path& p : fallback_paths(path, dirs)) {
    try {
      write(p);
    } catch (const std::exception& e) {
      attempts += fmt::format("\n  {}: {}", p.string(), reason(e));
      continue;
    }
    STOKER_CHECK_HINT(false, hint(p), what, " ", path.string(), " could not be written (", failure,
                      "); it was written to ", p.string(), " instead");
  }
  STOKER_CHECK_HINT(false, lost_hint, what, " ", path.string(), " could not be written (", failure,
                    "), nor any of the places tried instead:", attempts);
}

}  // namespace stoker::train
