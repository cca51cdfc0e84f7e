#include "dist/flight_recorder.h"

#include <fmt/format.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "stoker/core/error.h"

namespace stoker::dist {

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// A steady-clock time of the records as microseconds since the Unix epoch (0 stays 0), so that
// the files of several ranks (hosts with synchronized clocks) can be compared.
int64_t epoch_us(int64_t steady_ns, int64_t offset_ns) {
  return steady_ns == 0 ? 0 : (steady_ns + offset_ns) / 1000;
}

}  // namespace

const char* collective_state_name(CollectiveState s) {
  switch (s) {
    case CollectiveState::enqueued:
      return "enqueued";
    case CollectiveState::started:
      return "started";
    case CollectiveState::completed:
      return "completed";
    case CollectiveState::failed:
      return "failed";
  }
  return "?";
}

std::string CollectiveRecord::str() const {
  std::string s = fmt::format("collective #{} {}(", seq, op);
  if (std::strcmp(op, "barrier") != 0) {
    s += fmt::format("{} x {}", dtype_name(dtype), numel);
    if (*reduce_op) s += fmt::format(", {}", reduce_op);
    if (root >= 0) s += fmt::format(", root {}", root);
    s += fmt::format(", {} bytes", bytes);
  }
  if (!tag_view().empty())
    s += fmt::format("{}tag '{}'", std::strcmp(op, "barrier") ? ", " : "", tag_view());
  return s + ")";
}

FlightRecorder::FlightRecorder(size_t entries) { reset(entries); }

int64_t FlightRecorder::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

size_t FlightRecorder::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_.size();
}

uint64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_;
}

void FlightRecorder::reset(size_t entries) {
  STOKER_CHECK(entries >= 1, "FlightRecorderOptions: entries ", entries, " must be >= 1");
  std::lock_guard<std::mutex> lock(mu_);
  ring_.assign(entries, CollectiveRecord{});
  recorded_ = 0;
}

void FlightRecorder::record(const CollectiveRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_[static_cast<size_t>(recorded_ % ring_.size())] = r;
  ++recorded_;
}

void FlightRecorder::mark_started(uint64_t seq, int64_t t_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (seq == 0) return;
  CollectiveRecord& r = ring_[static_cast<size_t>((seq - 1) % ring_.size())];
  if (r.seq != seq || r.state != CollectiveState::enqueued) return;
  r.state = CollectiveState::started;
  r.start_ns = t_ns;
}

void FlightRecorder::mark_ended(uint64_t seq, CollectiveState state, int64_t t_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (seq == 0) return;
  CollectiveRecord& r = ring_[static_cast<size_t>((seq - 1) % ring_.size())];
  if (r.seq != seq) return;
  if (r.start_ns == 0) r.start_ns = t_ns;
  r.state = state;
  r.end_ns = t_ns;
}

std::vector<CollectiveRecord> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CollectiveRecord> out;
  const uint64_t n = std::min<uint64_t>(recorded_, ring_.size());
  out.reserve(static_cast<size_t>(n));
  for (uint64_t i = recorded_ - n; i < recorded_; ++i)
    out.push_back(ring_[static_cast<size_t>(i % ring_.size())]);
  return out;
}

std::optional<CollectiveRecord> FlightRecorder::find(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (seq == 0) return std::nullopt;
  const CollectiveRecord& r = ring_[static_cast<size_t>((seq - 1) % ring_.size())];
  if (r.seq != seq) return std::nullopt;
  return r;
}

std::string FlightRecorder::to_json(int rank, int world_size, const std::string& backend,
                                    const std::string& reason) const {
  const std::vector<CollectiveRecord> all = entries();
  const int64_t offset_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count() -
                            now_ns();
  std::string out =
      fmt::format("{{\"version\":1,\"rank\":{},\"world_size\":{},\"backend\":", rank, world_size);
  append_json_string(out, backend);
  out += ",\"reason\":";
  append_json_string(out, reason);
  out += fmt::format(",\"written_us\":{},\"capacity\":{},\"recorded\":{},\"entries\":[",
                     epoch_us(now_ns(), offset_ns), capacity(), recorded());
  for (size_t i = 0; i < all.size(); ++i) {
    const CollectiveRecord& r = all[i];
    out += i ? ",\n" : "\n";
    out += fmt::format(
        "{{\"seq\":{},\"op\":\"{}\",\"dtype\":\"{}\",\"numel\":{},\"bytes\":{},\"reduce_op\":\"{}"
        "\",\"root\":{},\"tag\":",
        r.seq, r.op, dtype_name(r.dtype), r.numel, r.bytes, r.reduce_op, r.root);
    append_json_string(out, r.tag_view());
    out += fmt::format(",\"state\":\"{}\",\"enqueue_us\":{},\"start_us\":{},\"end_us\":{}}}",
                       collective_state_name(r.state), epoch_us(r.enqueue_ns, offset_ns),
                       epoch_us(r.start_ns, offset_ns), epoch_us(r.end_ns, offset_ns));
  }
  out += "\n]}\n";
  return out;
}

std::string flight_recorder_dir(const FlightRecorderOptions& options) {
  if (!options.dir.empty()) return options.dir;
  const char* env = std::getenv("STOKER_FLIGHT_RECORDER");
  return env && *env ? std::string(env) : std::string();
}

double collective_timeout_from_env(const std::function<const char*(const char*)>& lookup,
                                   double fallback) {
  const char* v = lookup("STOKER_COLLECTIVE_TIMEOUT");
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  STOKER_CHECK_HINT(
      end != v && *end == '\0' && std::isfinite(s) && s > 0,
      "set it to the seconds a collective may take, e.g. STOKER_COLLECTIVE_TIMEOUT=600",
      "environment variable STOKER_COLLECTIVE_TIMEOUT='", v,
      "' is not a positive number of seconds");
  return s;
}

double collective_timeout_from_env(double fallback) {
  return collective_timeout_from_env([](const char* name) { return std::getenv(name); }, fallback);
}

}  // namespace stoker::dist
