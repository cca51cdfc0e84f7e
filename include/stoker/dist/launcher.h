// launch: `stoker launch` — one process per GPU of a node with torchrun's environment; stderr
// forwarded with a "[rank N] " prefix; signals forwarded; when a rank fails the others are
// stopped (SIGTERM, then SIGKILL) and its exit code returned.
// Thread-safety: one launch() at a time per process (it installs signal handlers).
// Details: docs/distributed.md#stoker-launch-one-node.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace stoker::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: a free port of this host (single-node jobs)
  std::string program;      // a path, or a name looked up in PATH
  std::vector<std::string> args;
  double kill_grace_s = 5.0;   // SIGTERM, then SIGKILL after this long
  int tail_lines = 20;         // stderr lines kept per rank for the failure report
  bool forward_stderr = true;  // false: keep the children's stderr out of ours (tests)
  bool quiet = false;          // no report lines of the launcher itself on stderr
  // Added to (or replacing in) every child's environment.
  std::vector<std::pair<std::string, std::string>> extra_env;
};

struct LaunchResult {
  // 0 when every rank exited 0; else the first failing rank's exit status (128 + signal when
  // it died of one), or 128 + the signal that interrupted the launcher.
  int exit_code = 0;
  int failed_rank = -1;  // global rank of the first failure, -1: none
  // "rank 1 (local 1, pid 4242) exited with status 3 after 0.21 s", empty when all succeeded.
  std::string failure;
  std::vector<std::string> failed_stderr_tail;  // the last stderr lines of that rank
  std::vector<int> exit_codes;                  // per local rank, as exit_code
  int master_port = 0;                          // the port the ranks were given
};

// Runs the job and waits for it; throws stoker::Error only when it cannot start (program not
// found, bad options).
LaunchResult launch(const LaunchOptions& options);

}  // namespace stoker::dist
