#include "stoker/train/run_settings.h"

#include <nlohmann/json.hpp>

namespace stoker::train {

namespace {
using core::detail::str;

std::string ranks(int n) { return str(n, n == 1 ? " rank" : " ranks"); }
}  // namespace

SettingsComparison compare_run_settings(const std::map<std::string, std::string>& recorded,
                                        const std::vector<RunSetting>& now,
                                        const GlobalBatches& batches) {
  SettingsComparison out;
  std::string refused, fixes;
  bool batch_fix = false;
  const auto refuse = [&](const RunSetting& s, const std::string& then, const std::string& why) {
    refused += (refused.empty() ? "" : "; ") + why;
    fixes += str(fixes.empty() ? "" : ", ", s.flag, " ", then);
  };
  for (const RunSetting& s : now) {
    const auto it = recorded.find(s.flag);
    if (it == recorded.end() || it->second == s.value) continue;
    const std::string& then = it->second;
    switch (s.on_change) {
      case SettingChange::note:
        out.notes.push_back(str(s.flag, " changed ", then, " -> ", s.value));
        break;
      case SettingChange::model_shape:
        refuse(s, then,
               str("the checkpoint was written for ", s.flag, " ", then, ", this run has ", s.flag,
                   " ", s.value, " (another model shape)"));
        break;
      case SettingChange::refuse:
        refuse(s, then,
               str("the checkpoint was written with ", s.flag, " ", then, ", this run has ", s.flag,
                   " ", s.value, ", which changes what the run trains"));
        break;
      case SettingChange::global_batch:
        // Allowed where the global batch stays: another world size made up for by this setting.
        if (batches.then > 0 && batches.then == batches.now) {
          out.notes.push_back(str(
              s.flag, " changed ", then, " -> ", s.value, " (the global batch stays ", batches.now,
              " on ", ranks(batches.world_now), ", was ", ranks(batches.world_then), ")"));
        } else {
          refuse(s, then,
                 str(s.flag, " changed ", then, " -> ", s.value,
                     batches.now > 0 && batches.then > 0
                         ? str(", which makes the global batch (samples per step, every rank's) ",
                               batches.now, "; the checkpoint's run had ", batches.then)
                         : std::string(", which changes the global batch")));
          batch_fix = batches.then > 0;
        }
        break;
    }
  }
  if (refused.empty()) return out;
  out.refusal = refused;
  out.hint = str("resume with ", fixes, " as the run that wrote it",
                 batch_fix ? str(" (or settings that keep the global batch at ", batches.then,
                                 " on this job's ", ranks(batches.world_now), ")")
                           : std::string(),
                 ", or start a new run in another --checkpoint-dir");
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
