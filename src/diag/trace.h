// TraceWriter: events in the Chrome trace-event JSON format, which Perfetto (ui.perfetto.dev)
// and chrome://tracing open (docs/diagnostics.md lists the tracks stoker writes).
//
// Events are kept in memory and written in one go (write(), atomic: temp file + rename), so
// recording costs a push into a vector under a mutex and nothing touches the disk during
// training. Timestamps are milliseconds on the diag::now_ms() time line; the file holds
// microseconds ("displayTimeUnit": "ms"). Beyond `max_events` new events are dropped and
// counted.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace stoker::diag {

class TraceWriter {
 public:
  explicit TraceWriter(size_t max_events = 2'000'000) : max_events_(max_events) {}

  // Names shown for a process / thread track.
  void process_name(int pid, const std::string& name);
  void thread_name(int pid, int tid, const std::string& name);
  // A span ("X" event): [start_ms, start_ms + dur_ms) on track (pid, tid).
  void complete(const std::string& name, const std::string& category, int pid, int tid,
                double start_ms, double dur_ms,
                std::vector<std::pair<std::string, double>> args = {});
  // A counter track sample ("C" event): each (series, value) is one line of the track `name`.
  void counter(const std::string& name, int pid, double time_ms,
               std::vector<std::pair<std::string, double>> values);

  size_t size() const;
  int64_t dropped() const;
  // The whole trace as a JSON document {"traceEvents": [...], ...}.
  std::string json() const;
  // Writes json() to `path` atomically (creates parent folders).
  void write(const std::filesystem::path& path) const;

 private:
  struct Event {
    char ph = 'X';
    std::string name, category;
    int pid = 0, tid = 0;
    double ts_ms = 0, dur_ms = 0;
    std::vector<std::pair<std::string, double>> args;
    std::string text;  // metadata value (process/thread names)
  };
  void push(Event e);

  size_t max_events_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  int64_t dropped_ = 0;
};

}  // namespace stoker::diag
