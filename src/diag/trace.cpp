#include "diag/trace.h"

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"

namespace stoker::diag {

void TraceWriter::push(Event e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

void TraceWriter::process_name(int pid, const std::string& name) {
  Event e;
  e.ph = 'M';
  e.name = "process_name";
  e.pid = pid;
  e.text = name;
  push(std::move(e));
}

void TraceWriter::thread_name(int pid, int tid, const std::string& name) {
  Event e;
  e.ph = 'M';
  e.name = "thread_name";
  e.pid = pid;
  e.tid = tid;
  e.text = name;
  push(std::move(e));
}

void TraceWriter::complete(const std::string& name, const std::string& category, int pid, int tid,
                           double start_ms, double dur_ms,
                           std::vector<std::pair<std::string, double>> args) {
  Event e;
  e.ph = 'X';
  e.name = name;
  e.category = category;
  e.pid = pid;
  e.tid = tid;
  e.ts_ms = start_ms;
  e.dur_ms = dur_ms < 0 ? 0 : dur_ms;
  e.args = std::move(args);
  push(std::move(e));
}

void TraceWriter::counter(const std::string& name, int pid, double time_ms,
                          std::vector<std::pair<std::string, double>> values) {
  Event e;
  e.ph = 'C';
  e.name = name;
  e.pid = pid;
  e.ts_ms = time_ms;
  e.args = std::move(values);
  push(std::move(e));
}

size_t TraceWriter::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

int64_t TraceWriter::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

std::string TraceWriter::json() const {
  using nlohmann::json;
  json events = json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const Event& e : events_) {
    json j = {{"ph", std::string(1, e.ph)}, {"name", e.name}, {"pid", e.pid}, {"tid", e.tid}};
    if (e.ph == 'M') {
      j["args"] = {{"name", e.text}};
    } else {
      j["ts"] = e.ts_ms * 1e3;  // microseconds
      if (e.ph == 'X') j["dur"] = e.dur_ms * 1e3;
      if (!e.category.empty()) j["cat"] = e.category;
      json args = json::object();
      for (const auto& [k, v] : e.args) args[k] = v;
      if (!args.empty() || e.ph == 'C') j["args"] = args;
    }
    events.push_back(std::move(j));
  }
  json doc = {{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"producer", "stoker diagnostics"}, {"dropped_events", dropped_}}}};
  return doc.dump();
}

void TraceWriter::write(const std::filesystem::path& path) const {
  const std::string text = json();
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  util::write_file_atomically(path,
                              [&](int fd) { util::write_all(fd, text.data(), text.size(), path); });
}

}  // namespace stoker::diag
