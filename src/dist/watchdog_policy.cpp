#include "stoker/dist/watchdog_policy.h"

#include <algorithm>

#include "stoker/core/error.h"

namespace stoker::dist {

const char* watchdog_action_name(WatchdogDecision::Action a) {
  switch (a) {
    case WatchdogDecision::Action::none:
      return "none";
    case WatchdogDecision::Action::abort_timeout:
      return "abort_timeout";
    case WatchdogDecision::Action::abort_error:
      return "abort_error";
  }
  return "?";
}

WatchdogDecision WatchdogPolicy::decide(int64_t now_ns,
                                        const std::vector<CollectiveRecord>& outstanding,
                                        int64_t last_completed_ns, const std::string& async_error,
                                        int rank, int world_size) const {
  WatchdogDecision d;
  if (!outstanding.empty()) {
    const CollectiveRecord& oldest = outstanding.front();
    const int64_t start =
        oldest.start_ns != 0 ? oldest.start_ns : std::max(oldest.enqueue_ns, last_completed_ns);
    d.record = oldest;
    d.waited_s = static_cast<double>(std::max<int64_t>(0, now_ns - start)) * 1e-9;
  }
  if (!async_error.empty()) {
    d.action = WatchdogDecision::Action::abort_error;
    d.message = core::detail::str(
        "rank ", rank, " of ", world_size, ": NCCL reported an asynchronous error: ", async_error,
        d.record ? core::detail::str(" (oldest collective not completed: ", d.record->str(),
                                     ", running ", d.waited_s, " s)")
                 : std::string(),
        "; the communicator was aborted (ncclCommAbort)");
    return d;
  }
  if (d.record && d.waited_s > timeout_s) {
    d.action = WatchdogDecision::Action::abort_timeout;
    d.message = core::detail::str(
        "rank ", rank, " of ", world_size, " waited ", d.waited_s, " s (collective timeout ",
        timeout_s, " s) for ", d.record->str(), " to complete",
        outstanding.size() > 1
            ? core::detail::str(" (", outstanding.size() - 1, " more queued behind it)")
            : std::string(),
        "; the ranks that had not reached it are unknown to NCCL: each rank's flight recorder "
        "file (STOKER_FLIGHT_RECORDER) shows the last collective it enqueued. The communicator "
        "was aborted (ncclCommAbort)");
    return d;
  }
  return d;
}

}  // namespace stoker::dist
