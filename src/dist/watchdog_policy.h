// WatchdogPolicy: the decision of NcclCommunicator's watchdog thread, as a pure function of what
// it observed, so that CPU tests can run it on recorded timings.
//
// The watchdog polls, every `poll_interval_s`, the completion events of the collectives it has
// enqueued and ncclCommGetAsyncError. It hands decide() the collectives not yet completed (from
// the flight recorder, oldest first), when it last saw one complete, and NCCL's asynchronous
// error ("" when none). The policy answers:
//   - abort_error at once on an asynchronous error;
//   - abort_timeout when the oldest outstanding collective has run longer than `timeout_s`: it
//     is taken to start at its start time when known, else when the collective before it
//     completed or when it was enqueued, whichever is later (a collective queued behind a long
//     one is not charged for its wait);
//   - none otherwise.
// On a timeout the watchdog then asks the peer watch (dist/peer_watch.h) how far every rank had
// got, and timeout_message() names the ranks that had not reached the collective; it calls
// ncclCommAbort, records the message, writes the flight recorder and makes the communicator's
// next call throw.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/flight_recorder.h"
#include "dist/peer_watch.h"

namespace stoker::dist {

struct WatchdogDecision {
  enum class Action { none, abort_timeout, abort_error };
  Action action = Action::none;
  std::optional<CollectiveRecord> record;  // the collective that timed out, or the oldest one
                                           // outstanding at an async error
  double waited_s = 0.0;                   // how long `record` had run
  std::string message;  // what the communicator's calls then throw; for a timeout, the start
                        // of it, which timeout_message() completes
};
const char* watchdog_action_name(WatchdogDecision::Action a);

struct WatchdogPolicy {
  double timeout_s = 600.0;
  double poll_interval_s = 0.1;

  // `rank`/`world_size` name this rank in the message.
  WatchdogDecision decide(int64_t now_ns, const std::vector<CollectiveRecord>& outstanding,
                          int64_t last_completed_ns, const std::string& async_error, int rank,
                          int world_size) const;

  // The full message of an abort_timeout decision: which ranks had not reached its collective,
  // from the peer watch's progress table (`watched`: the job has a peer watch; `table`: what it
  // answered, nullopt when no table came).
  static std::string timeout_message(const WatchdogDecision& d, bool watched,
                                     const std::optional<ProgressTable>& table);
};

// "rank 3 (its last collective was #40), rank 5 (did not answer within the peer watch's
// window: stopped or frozen)" for the ranks of `table` that had not reached collective `seq`;
// "" when every rank had.
std::string describe_laggards(const ProgressTable& table, uint64_t seq);

}  // namespace stoker::dist
