#include "stoker/train/checkpoint_files.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <system_error>

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

std::vector<fs::path> set_aside_checkpoints_after(const fs::path& dir, int64_t step) {
  std::vector<fs::path> renamed;
  for (const CheckpointFile& c : list_checkpoints(dir)) {
    if (c.step <= step) continue;
    fs::path to = c.path;
    to += ".abandoned";
    std::error_code ec;
    fs::rename(c.path, to, ec);
    STOKER_CHECK_HINT(!ec, "move it out of the checkpoint folder by hand", "checkpoint ",
                      c.path.string(), " (step ", c.step,
                      ") is further into the run than the resumed step ", step,
                      " and could not be renamed to ", to.string(), ": ", ec.message());
    renamed.push_back(to);
  }
  return renamed;
}

}  // namespace stoker::train
