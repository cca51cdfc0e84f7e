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
// init_from_env starts one for every multi-rank NCCL job (DistContext::watch). The TCP backend
// needs none: its own connections report a closed peer.
//
// Thread-safety: the public methods are called from one thread; on_failure runs on the watch's
// thread, at most once.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "stoker/dist/rendezvous.h"

namespace stoker::dist {

class PeerWatch {
 public:
  using OnFailure = std::function<void(const std::string& message)>;

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

  // The default on_failure: the message on stderr, then std::_Exit(1).
  static void exit_on_failure(const std::string& message);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::dist
