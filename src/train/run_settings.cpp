#include "stoker/train/training_checkpoint.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace stoker::train {

namespace {

std::string ranks(int n) { return fmt::format("{}{}", n, n == 1 ? " rank" : " ranks"); }
}  // namespace

SettingsComparison compare_run_settings(const std::map<std::string, std::string>& recorded,
                                        const std::vector<RunSetting>& now,
                                        const GlobalBatches& batches) {
  SettingsComparison out;
  std::string refused, fixes;
  bool batch_fix = false;
  const auto refuse = [&](const RunSetting& s, const std::string& then, const std::string& why) {
    refused += (refused.empty() ? "" : "; ") + why;
    fixes += fmt::format("{}{} {}", fixes.empty() ? "" : ", ", s.flag, then);
  };
  for (const RunSetting& s : now) {
    const auto it = recorded.find(s.flag);
    if (it == recorded.end() || it->second == s.value) continue;
    const std::string& then = it->second;
    switch (s.on_change) {
      case SettingChange::note:
        out.notes.push_back(fmt::format("{} changed {} -> {}", s.flag, then, s.value));
        break;
      case SettingChange::model_shape:
        refuse(s, then,
               fmt::format(
                   "the checkpoint was written for {} {}, this run has {} {} (another model shape)",
                   s.flag, then, s.flag, s.value));
        break;
      case SettingChange::refuse:
        refuse(s, then,
               fmt::format("the checkpoint was written with {} {}, this run has {} {}, which "
                           "changes what the run trains",
                           s.flag, then, s.flag, s.value));
        break;
      case SettingChange::global_batch:
        // Allowed where the global batch stays: another world size made up for by this setting.
        if (batches.then > 0 && batches.then == batches.now) {
          out.notes.push_back(fmt::format(
              "{} changed {} -> {} (the global batch stays {} on {}, was {})", s.flag, then,
              s.value, batches.now, ranks(batches.world_now), ranks(batches.world_then)));
        } else {
          refuse(s, then,
                 fmt::format(
                     "{} changed {} -> {}{}", s.flag, then, s.value,
                     batches.now > 0 && batches.then > 0
                         ? fmt::format(", which makes the global batch (samples per step, every "
                                       "rank's) {}; the checkpoint's run had {}",
                                       batches.now, batches.then)
                         : std::string(", which changes the global batch")));
          batch_fix = batches.then > 0;
        }
        break;
    }
  }
  if (refused.empty()) return out;
  out.refusal = refused;
  out.hint = fmt::format(
      "resume with {} as the run that wrote it{}, or start a new run in another --checkpoint-dir",
      fixes,
      batch_fix ? fmt::format(" (or settings that keep the global batch at {} on this job's {})",
                              batches.then, ranks(batches.world_now))
                : std::string());
  return out;
}

std::string run_settings_json(const std::vector<RunSetting>& settings) {
  nlohmann::json j = nlohmann::json::object();
  for (const RunSetting& s : settings) j[s.flag] = s.value;
  return j.dump();
}

std::map<std::string, std::string> parse_run_settings(const std::string& file,
                                                      const std::string& json) {
  std::map<std::string, std::string> out;
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    if (!j.is_object()) throw std::invalid_argument("not a JSON object");
    for (const auto& [k, v] : j.items()) out[k] = v.get<std::string>();
  } catch (const std::exception& e) {
    STOKER_THROW(file, ": metadata stoker.settings = '", json,
                 "' is not a valid record of the run's settings (", e.what(),
                 "): the header is damaged");
  }
  return out;
}

}  // namespace stoker::train
