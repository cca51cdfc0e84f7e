#include "train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "stoker/core/error.h"
#include "util/atomic_file.h"

namespace stoker::train {

namespace {

// The lines of the existing file that belong to a run resumed at `step`: whole lines that parse
// as objects with "step" <= step. A file that is not there gives none.
std::string kept_prefix(const std::filesystem::path& path, int64_t step, bool evaluated) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string kept, line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: torn by a kill
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
      const int64_t s = j["step"].get<int64_t>();
      if (s > step || (s == step && !evaluated && j.value("kind", "") == "eval")) continue;
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    kept += line;
    kept += '\n';
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& path, int64_t resume_step, bool evaluated)
    : path_(path) {
  const std::string prefix =
      resume_step >= 0 ? kept_prefix(path, resume_step, evaluated) : std::string();
  util::write_file_atomically(
      path, [&](int fd) { util::write_all(fd, prefix.data(), prefix.size(), path); });
  file_ = std::fopen(path.c_str(), "ab");
  STOKER_CHECK_HINT(file_ != nullptr, "choose a path in a folder this process can write",
                    "metrics file ", path.string(),
                    " cannot be opened for appending: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::ordered_json& line) {
  const std::string text = line.dump() + "\n";
  const bool ok =
      std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0;
  STOKER_CHECK(ok, "metrics file ", path_.string(),
               ": writing a line failed: ", std::strerror(errno));
}

}  // namespace stoker::train
