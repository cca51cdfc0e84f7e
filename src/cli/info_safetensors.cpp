#include "info_safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/train/safetensors.h"

namespace stoker::cli {

namespace fs = std::filesystem;
using train::SafetensorsReader;

namespace {

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string bytes_text(uint64_t b) {
  return fmt::format("{} bytes ({})", b, core::format_bytes(b));
}

// A metadata value, or `otherwise`.
std::string meta_or(const SafetensorsReader& r, const std::string& key,
                    const std::string& otherwise = "?") {
  const auto it = r.metadata().find(key);
  return it == r.metadata().end() ? otherwise : it->second;
}

// Long values (descriptions, JSON) cut for one line.
std::string cut(const std::string& s, size_t n = 160) {
  return s.size() <= n ? s : s.substr(0, n) + fmt::format("... ({} characters)", s.size());
}

// The run that wrote a checkpoint ("stoker.data"), as "world size 2, batch 16 per rank, ...".
std::string run_record(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return "not readable: " + cut(text);
  }
  if (!j.is_object()) return "not readable: " + cut(text);
  std::string out;
  auto add = [&](const char* label, const char* key) {
    if (!j.contains(key)) return;
    const nlohmann::json& v = j.at(key);
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", label,
                       v.is_string() ? v.get<std::string>() : v.dump());
  };
  add("world size", "world_size");
  add("batch size per rank", "batch_size");
  add("seed", "seed");
  add("samples", "samples");
  add("data fingerprint", "fingerprint");
  add("data at", "location");
  for (auto it = j.begin(); it != j.end(); ++it) {  // fields of later builds
    const std::string& k = it.key();
    if (k != "world_size" && k != "batch_size" && k != "seed" && k != "samples" &&
        k != "fingerprint" && k != "location")
      out += fmt::format("{}{} {}", out.empty() ? "" : ", ", k, cut(it.value().dump(), 80));
  }
  return out.empty() ? "not recorded" : out;
}

std::string checksum_state(const SafetensorsReader& r) {
  size_t listed = 0;
  for (const std::string& n : r.names()) listed += r.entry(n).has_checksum ? 1 : 0;
  const std::string tensors =
      fmt::format("{} of {} tensors have a checksum", listed, r.names().size());
  if (r.has_header_checksum()) return "header checksum ok (metadata and tensor table); " + tensors;
  if (r.has_checksums())
    return "no header checksum (written by an older stoker: its metadata is not covered); " +
           tensors;
  return "none (a file from PyTorch or another tool, or an older stoker: nothing can be "
         "verified)";
}

}  // namespace

bool is_safetensors_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;  // folders, FIFOs: never opened here
  if (path.extension() == ".safetensors") return true;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  unsigned char head[9] = {};
  const ssize_t n = ::read(fd, head, sizeof head);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof head)) return false;
  uint64_t len = 0;
  std::memcpy(&len, head, 8);
  const uintmax_t size = fs::file_size(path, ec);
  return !ec && len >= 2 && len <= size - 8 && head[8] == '{';
}

int run_info_safetensors(const fs::path& path, bool verify) {
  const SafetensorsReader r(path);  // checks the header (and its checksum): throws when damaged
  const std::string file = path.string();
  const bool checkpoint = meta_or(r, "stoker.kind", "") == "training-checkpoint";
  uint64_t tensor_bytes = 0;
  int64_t parameters = 0;
  std::map<std::string, std::pair<size_t, uint64_t>> by_kind;  // prefix -> (tensors, bytes)
  std::map<std::string, size_t> dtypes;
  for (const std::string& n : r.names()) {
    const auto& e = r.entry(n);
    tensor_bytes += e.end - e.begin;
    const size_t dot = n.find('.');
    auto& k = by_kind[dot == std::string::npos ? n : n.substr(0, dot)];
    ++k.first;
    k.second += e.end - e.begin;
    ++dtypes[train::safetensors_dtype_name(e.dtype)];
    if (!checkpoint || n.rfind("model.", 0) == 0) parameters += e.shape.numel();
  }
  std::string dtype_list;
  for (const auto& [d, count] : dtypes)
    dtype_list += fmt::format("{}{} {}", dtype_list.empty() ? "" : ", ", count, d);

  if (checkpoint) {
    std::printf("%s: stoker training checkpoint (checkpoint version %s), %s\n", file.c_str(),
                meta_or(r, "stoker.checkpoint_version", "1").c_str(),
                bytes_text(r.file_size()).c_str());
    std::printf("  position: step %s, epoch %s, batch %s of the epoch, epoch progress %s\n",
                meta_or(r, "stoker.step").c_str(), meta_or(r, "stoker.epoch").c_str(),
                meta_or(r, "stoker.batch_index").c_str(),
                meta_or(r, "stoker.epoch_progress", "not recorded").c_str());
    std::printf("  optimizer steps %s, evaluated at step %s\n",
                meta_or(r, "stoker.optimizer_steps").c_str(),
                meta_or(r, "stoker.evaluated_step", "not recorded").c_str());
    std::printf("  run: %s\n", run_record(meta_or(r, "stoker.data", "{}")).c_str());
    std::printf("  model: %s\n  optimizer: %s\n", cut(meta_or(r, "stoker.model")).c_str(),
                cut(meta_or(r, "stoker.optimizer")).c_str());
    // Keys of later builds (run settings and the like), shown as stored.
    static const char* const shown[] = {"stoker.kind",
                                        "stoker.checkpoint_version",
                                        "stoker.step",
                                        "stoker.epoch",
                                        "stoker.batch_index",
                                        "stoker.epoch_progress",
                                        "stoker.optimizer_steps",
                                        "stoker.evaluated_step",
                                        "stoker.data",
                                        "stoker.model",
                                        "stoker.optimizer",
                                        "stoker.generators",
                                        train::kChecksumsKey,
                                        train::kHeaderChecksumKey,
                                        train::kSafetensorsVersionKey};
    for (const auto& [k, v] : r.metadata()) {
      bool known = false;
      for (const char* s : shown) known = known || k == s;
      if (!known) std::printf("  %s: %s\n", k.c_str(), cut(v).c_str());
    }
    std::printf("  tensors: %zu, %s:", r.names().size(), bytes_text(tensor_bytes).c_str());
    for (const auto& [kind, c] : by_kind)
      std::printf(" %s %zu (%s)", kind.c_str(), c.first, core::format_bytes(c.second).c_str());
    std::printf("\n  model parameters: %lld\n", static_cast<long long>(parameters));
  } else {
    std::printf("%s: safetensors weights, %s\n", file.c_str(), bytes_text(r.file_size()).c_str());
    for (const auto& [k, v] : r.metadata()) {
      if (k == train::kChecksumsKey || k == train::kHeaderChecksumKey ||
          k == train::kSafetensorsVersionKey)
        continue;
      std::printf("  %s: %s\n", k.c_str(), cut(v).c_str());
    }
    std::printf("  tensors: %zu, %s; %lld parameters; dtypes: %s\n", r.names().size(),
                bytes_text(tensor_bytes).c_str(), static_cast<long long>(parameters),
                dtype_list.empty() ? "none" : dtype_list.c_str());
    constexpr size_t kShown = 20;
    for (size_t i = 0; i < r.names().size() && i < kShown; ++i) {
      const auto& e = r.entry(r.names()[i]);
      std::printf("    %s  %s%s\n", r.names()[i].c_str(), train::safetensors_dtype_name(e.dtype),
                  e.shape.str().c_str());
    }
    if (r.names().size() > kShown) std::printf("    and %zu more\n", r.names().size() - kShown);
  }
  std::printf("  checksums: %s\n", checksum_state(r).c_str());
  if (!verify) {
    std::printf("checked: the header%s; --verify also reads every tensor against its checksum\n",
                r.has_header_checksum() ? " and its checksum" : "");
    return 0;
  }
  std::vector<std::string> bad;
  size_t checked = 0;
  for (const std::string& n : r.names()) {
    const SafetensorsReader::ChecksumCheck c = r.check_checksum(n);
    checked += c.stored ? 1 : 0;
    if (!c.ok())
      bad.push_back(fmt::format("{}: fails its checksum (stored {}, computed {})", n,
                                hex(c.expected), hex(c.computed)));
  }
  std::printf("verified: %s, %zu tensor%s against their checksums (%s read): %zu bad\n",
              r.has_header_checksum() ? "header checksum ok" : "no header checksum", checked,
              checked == 1 ? "" : "s", core::format_bytes(tensor_bytes).c_str(), bad.size());
  if (bad.empty()) return 0;
  std::printf("bad tensors:\n");
  for (const std::string& b : bad) std::printf("  %s\n", b.c_str());
  std::fflush(stdout);
  std::fprintf(
      stderr, "stoker: error: %s is damaged: %zu of %zu tensors fail their checksums\n  hint: %s\n",
      file.c_str(), bad.size(), r.names().size(),
      checkpoint ? "resume from an earlier checkpoint of the run (step_N.safetensors) or "
                   "a copy of this file"
                 : "use an intact copy of the file or write it again");
  return 1;
}

}  // namespace stoker::cli
