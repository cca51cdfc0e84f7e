// PeerWatch: ends a multi-rank job promptly, with a clear error on every rank, when one of its
// processes dies.
//
// Why: an NCCL collective whose peer died never completes — the surviving ranks would spin on
// the GPU until a launcher or a person kills them, with nothing in their logs. The watch keeps
// one TCP connection from every rank to rank 0 (a star, set up by a rendezvous with purpose
// `watch`) and a thread that polls it. A process that dies — crash, SIGKILL, SIGTERM, OOM
// killer — has its connections closed by the kernel at once:
//   - rank 0 sees rank k's connection close without a goodbye, tells every other rank "rank k
//     died", and fails;
//   - another rank fails when rank 0 tells it so, or when its own connection to rank 0 closes
//     without a goodbye (rank 0 died).
// Failing calls `on_failure` with a message naming the dead rank and its address; the default
// (exit_on_failure) prints it on stderr and ends the process with exit code 1, since a thread
// blocked in a collective cannot be woken safely. A rank that leaves normally (destructor, or
// exit() through the atexit hook) says goodbye first, so its peers go on (rank 0 may still
// write a checkpoint alone); a rank that leaves while an exception unwinds says it failed, and
// its peers fail too rather than wait in a collective for it.
//
// A rank that stops without dying (SIGSTOP, a deadlock in user code, a stuck filesystem) keeps
// its connection: NCCL's watchdog then times out on the ranks that wait for it, and asks the
// watch which ranks had not reached the collective. ask_progress() has rank 0 gather every
// rank's last collective sequence number (the `progress` function each rank installs, answered
// by its watch thread: a rank whose user code hangs still answers; a stopped process does not)
// and send the table to every rank.
//
// init_from_env starts one for every multi-rank NCCL job (DistContext::watch). The TCP backend
// needs none: its own connections report a closed peer and name the ranks that are behind.
//
// Thread-safety: set_progress, leave and abandon are called from one thread; ask_progress (and
// the function progress_query returns) from any thread; on_failure runs on the watch's thread,
// at most once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/rendezvous.h"

namespace stoker::dist {

// What one rank said when asked how far it had got.
struct RankProgress {
  enum class State {
    answered,   // last_seq: the sequence number of the last collective it had enqueued
    no_answer,  // did not answer in time: stopped, frozen, or its machine is unreachable
    left,       // had left the job normally
  };
  State state = State::no_answer;
  uint64_t last_seq = 0;
};
using ProgressTable = std::vector<RankProgress>;  // index: rank

class PeerWatch {
 public:
  using OnFailure = std::function<void(const std::string& message)>;
  // Asks the job; nullopt when no table arrived within `timeout_s`.
  using ProgressQuery = std::function<std::optional<ProgressTable>(double timeout_s)>;

  // Joins the watch of the job (collective: every rank constructs it; rank 0 listens on
  // options.master_port). Throws like the rendezvous when the ranks do not all arrive.
  PeerWatch(const RendezvousOptions& options, int rank, int world_size,
            OnFailure on_failure = exit_on_failure);
  // Leaves: goodbye (or "failed" while an exception unwinds), then stops the thread.
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Says goodbye now (failed = false) or tells the peers this rank failed; idempotent.
  void leave(bool failed);
  // Closes the connections without a word, as a process that died would (tests).
  void abandon();

  // What this rank answers when asked how far it had got (Communicator::last_seq); until set,
  // 0. It runs on the watch's thread, so it must be safe to call from there.
  void set_progress(std::function<uint64_t()> progress);
  // Every rank's progress, gathered by rank 0 (which waits up to the answer window for the
  // ranks' answers and reports the silent ones as no_answer) after this call: asks that reach
  // rank 0 while a gather is in flight are answered together by the next one, so the last of a
  // burst of asks may wait two answer windows. nullopt when rank 0's table did not arrive within
  // `timeout_s` (rank 0 stopped, or the watch has ended).
  std::optional<ProgressTable> ask_progress(double timeout_s = 3.0) const;
  // ask_progress as a function that outlives nobody: once the watch is destroyed it answers
  // nullopt at once (a communicator's watchdog may hold it longer than the watch lives).
  ProgressQuery progress_query() const;
  // How long rank 0 waits for the ranks' answers to a progress query (default 1 s).
  void set_answer_window(double seconds);

  // The default on_failure: the message on stderr, then std::_Exit(1).
  static void exit_on_failure(const std::string& message);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace stoker::dist
