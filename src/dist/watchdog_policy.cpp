#include "dist/watchdog_policy.h"

#include <fmt/format.h>
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
    d.message = fmt::format(
        "rank {} of {}: NCCL reported an asynchronous error: {}{}; the communicator was aborted "
        "(ncclCommAbort)",
        rank, world_size, async_error,
        d.record ? fmt::format(" (oldest collective not completed: {}, running {:g} s)",
                               d.record->str(), d.waited_s)
                 : std::string());
    return d;
  }
  if (d.record && d.waited_s > timeout_s) {
    d.action = WatchdogDecision::Action::abort_timeout;
    d.message = fmt::format(
        "rank {} of {} waited {:g} s (collective timeout {:g} s) for {} to complete{}", rank,
        world_size, d.waited_s, timeout_s, d.record->str(),
        outstanding.size() > 1 ? fmt::format(" ({} more queued behind it)", outstanding.size() - 1)
                               : std::string());
    return d;
  }
  return d;
}

std::string describe_laggards(const ProgressTable& table, uint64_t seq) {
  std::string out;
  for (size_t q = 0; q < table.size(); ++q) {
    const RankProgress& p = table[q];
    std::string why;
    switch (p.state) {
      case RankProgress::State::answered:
        if (p.last_seq >= seq) continue;
        why = p.last_seq == 0 ? "it had issued no collective yet"
                              : fmt::format("its last collective was #{}", p.last_seq);
        break;
      case RankProgress::State::no_answer:
        why =
            "it did not answer the peer watch in time: stopped (SIGSTOP, a debugger), frozen, "
            "or cut off by the network (a cut link, a firewall)";
        break;
      case RankProgress::State::left:
        why = "it had left the job";
        break;
    }
    out += fmt::format("{}rank {} ({})", out.empty() ? "" : ", ", q, why);
  }
  return out;
}

std::string WatchdogPolicy::timeout_message(const WatchdogDecision& d, bool watched,
                                            const std::optional<ProgressTable>& table) {
  const uint64_t seq = d.record ? d.record->seq : 0;
  // A rank that cannot be asked may be alive behind a cut link: each side then blames the other.
  const std::string network =
      "; or the network between the ranks is down (a cut link, a firewall, NCCL_SOCKET_IFNAME "
      "naming an interface the hosts do not share)";
  std::string who;
  if (!watched) {
    who =
        "which ranks had not reached it is unknown (this job has no peer watch; each rank's "
        "flight recorder file shows the last collective it issued)" +
        network;
  } else if (!table) {
    who =
        "which ranks had not reached it is unknown: rank 0 sent no progress table over the "
        "peer watch (rank 0 itself may be stopped; each rank's flight recorder file shows the "
        "last collective it issued)" +
        network;
  } else {
    const std::string laggards = describe_laggards(*table, seq);
    who = laggards.empty() ? fmt::format(
                                 "every rank had issued collective #{}, so it is stuck inside NCCL "
                                 "or the network (NCCL_DEBUG=INFO shows more)",
                                 seq)
                           : fmt::format("not reached by {}", laggards);
  }
  return d.message + "; " + who + "; the communicator was aborted (ncclCommAbort)";
}

}  // namespace stoker::dist
