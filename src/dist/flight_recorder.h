// FlightRecorder: each communicator's record of its last N collectives, so that a hang or a
// failure can be explained after the fact (docs/distributed.md#hangs-and-the-flight-recorder).
//
// Every collective a Communicator issues gets a sequence number (1, 2, ...: the same on every
// rank for the same call, since all ranks issue the same collectives in the same order) and one
// entry in a ring buffer of `entries` records: the op, dtype, element count and bytes, the
// reduce op or root, the caller's tag (CollectiveTag: "grad_sync bucket 3"), and its enqueue,
// start and end times. CPU backends run a collective synchronously (start = enqueue, end when it
// returns); NCCL's end is when its completion event is seen by the communicator's watchdog.
// Recording is a few stores under an uncontended mutex: no allocation, no device work.
//
// On a collective's failure or timeout the communicator writes the recorder to
// <dir>/rank<r>.json (dir: FlightRecorderOptions::dir, else $STOKER_FLIGHT_RECORDER, else
// nowhere); Communicator::dump_flight_recorder() writes it on request. The file is one JSON
// object (fields in docs/distributed.md): the rank, world size, backend, reason, capacity, how
// many collectives were recorded in all, and the entries oldest first.
//
// Thread-safety: every method may be called from any thread (the NCCL watchdog marks
// completions while the rank's thread records new collectives).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dist/communicator.h"

namespace stoker::dist {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t entries = 2048);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // The steady clock in nanoseconds, the time base of the records.
  static int64_t now_ns();

  size_t capacity() const;
  // Collectives recorded in all (the ring keeps the last capacity() of them).
  uint64_t recorded() const;
  // Drops every entry and sets a new capacity.
  void reset(size_t entries);

  void record(const CollectiveRecord& r);
  // Updates the entry of `seq` when the ring still holds it.
  void mark_started(uint64_t seq, int64_t t_ns);
  void mark_ended(uint64_t seq, CollectiveState state, int64_t t_ns);

  // The kept entries, oldest first.
  std::vector<CollectiveRecord> entries() const;
  std::optional<CollectiveRecord> find(uint64_t seq) const;

  // The JSON document of the file (see the header comment).
  std::string to_json(int rank, int world_size, const std::string& backend,
                      const std::string& reason) const;

 private:
  mutable std::mutex mu_;
  std::vector<CollectiveRecord> ring_;
  uint64_t recorded_ = 0;
};

// The directory a recorder with `options` dumps to ("" for none): options.dir, else
// $STOKER_FLIGHT_RECORDER.
std::string flight_recorder_dir(const FlightRecorderOptions& options);

// STOKER_COLLECTIVE_TIMEOUT (seconds, > 0) read through `lookup` (nullptr: unset): `fallback`
// when unset; a malformed or non-positive value is an error naming the variable.
double collective_timeout_from_env(const std::function<const char*(const char*)>& lookup,
                                   double fallback);
double collective_timeout_from_env(double fallback);

}  // namespace stoker::dist
