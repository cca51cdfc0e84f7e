
#include <fmt/format.h>
#include <set>

#include "stoker/core/error.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"

namespace stoker::train {

namespace {
// Every named tensor of the model: parameters (master values) then buffers.
std::vector<NamedTensor> model_tensors(nn::Module& model) {
  std::vector<NamedTensor> out;
  model.visit_parameters("", [&](const std::string& n, nn::Parameter& p) {
    out.push_back({n, p.value()});
  });
  model.visit_buffers("", [&](const std::string& n, Tensor& t) { out.push_back({n, t}); });
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void save_weights(nn::Module& model, const std::filesystem::path& path) {
  save_safetensors(path, model_tensors(model),
                   {{"format", "pt"}, {"stoker.model", model.describe()}});
}

uint64_t weights_file_bytes(nn::Module& model) {
  uint64_t bytes = 0;
  for (const NamedTensor& t : model_tensors(model)) bytes += t.tensor.nbytes();
  return bytes;
}

void check_space_for_weights(nn::Module& model, const std::filesystem::path& path,
                             const std::string& flag) {
  const uint64_t bytes = weights_file_bytes(model) + (64u << 10);  // + a header's room
  check_free_space(path.parent_path().empty() ? "." : path.parent_path(), bytes, 2 * bytes,
                   flag + " " + path.string(), flag);
}

void save_weights_with_fallback(nn::Module& model, const std::filesystem::path& path,
                                const std::string& flag,
                                const std::vector<std::filesystem::path>& fallback_dirs) {
  write_or_fall_back(
      path, flag, fallback_dirs, [&](const std::filesystem::path& p) { save_weights(model, p); },
      [&](const std::filesystem::path& p) {
        return fmt::format(
            "the trained weights are in {}: free space (or mend the folder) and move that file to "
            "{}",
            p.string(), path.string());
      },
      fmt::format("the trained weights could not be kept; free disk space, or give {} on another "
                  "disk (a --checkpoint-dir run keeps them in its checkpoints)",
                  flag));
}

std::vector<std::string> load_weights(nn::Module& model, const std::filesystem::path& path,
                                      const LoadWeightsOptions& options) {
  const SafetensorsReader reader(path);
  const std::vector<NamedTensor> targets = model_tensors(model);
  // Check everything first so a bad file changes nothing.
  std::set<std::string> wanted;
  for (const NamedTensor& t : targets) {
    wanted.insert(t.name);
    STOKER_CHECK_HINT(reader.contains(t.name),
                      "the file was saved from a different model; compare names with "
                      "SafetensorsReader::names()",
                      path.string(), " has no tensor '", t.name, "' for ", model.describe());
    const auto& e = reader.entry(t.name);
    STOKER_CHECK(e.dtype == t.tensor.dtype() && e.shape == t.tensor.shape(), path.string(),
                 ", tensor '", t.name, "': the file holds ", safetensors_dtype_name(e.dtype),
                 e.shape.str(), " but the model expects ", t.tensor.str());
  }
  std::vector<std::string> ignored;
  for (const std::string& name : reader.names()) {
    if (wanted.count(name)) continue;
    bool skip = !options.strict;
    for (const std::string& suffix : options.ignore_suffixes)
      skip = skip || ends_with(name, suffix);
    STOKER_CHECK_HINT(skip, "pass LoadWeightsOptions{.strict = false} to ignore extra tensors",
                      path.string(), " has tensor '", name, "' that ", model.describe(),
                      " does not have");
    ignored.push_back(name);
  }
  for (const NamedTensor& t : targets) reader.load_into(t.name, t.tensor);
  model.visit_parameters("", [](const std::string&, nn::Parameter& p) { p.value_changed(); });
  return ignored;
}

}  // namespace stoker::train
