// init_from_env: a process joins its data-parallel job from the environment its launcher set
// (torchrun / `stoker launch`, SLURM, Open MPI; none: rank 0 of 1), picks its device
// (cuda:LOCAL_RANK, or the CPU), runs the rendezvous and returns the communicator. Overrides:
// STOKER_COLLECTIVE_TIMEOUT, STOKER_FLIGHT_RECORDER, STOKER_RENDEZVOUS_PORT.
// Details: docs/distributed.md#running-it, docs/distributed.md#the-rendezvous.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "stoker/core/device.h"
#include "stoker/dist/communicator.h"

namespace stoker::dist {

class PeerWatch;  // dist/peer_watch.h (private)

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rendezvous_port = 29500;
  // Where the values came from: "torchrun", "slurm", "openmpi" or "none" (a single process).
  std::string source = "none";
  // STOKER_COLLECTIVE_TIMEOUT in seconds; 0 when unset.
  double collective_timeout_s = 0.0;
};

// Reads the variables through `lookup` (nullptr for an unset variable); throws naming the
// variable when one is malformed or the values contradict each other.
DistEnv read_env(const std::function<const char*(const char*)>& lookup);
// The same from the process environment.
DistEnv read_env();

enum class Backend {
  automatic,  // nccl when this build has CUDA and a GPU is visible, tcp otherwise
  nccl,       // one GPU per process: cuda:LOCAL_RANK
  tcp,        // CPU tensors over TCP (TcpCommunicator)
};
const char* backend_name(Backend b);

struct InitOptions {
  Backend backend = Backend::automatic;
  double timeout_s = 300.0;  // the rendezvous
  // The collective timeout (tcp: TcpOptions::timeout_s, nccl: the watchdog's
  // NcclOptions::timeout_s); STOKER_COLLECTIVE_TIMEOUT overrides it.
  double collective_timeout_s = 600.0;
  // The communicator's flight recorder (dir empty: STOKER_FLIGHT_RECORDER).
  FlightRecorderOptions flight_recorder{};
  // NCCL jobs of 2+ ranks: a PeerWatch ends every rank with a clear error
  // as soon as one process of the job dies, instead of leaving them blocked in a collective.
  bool watch_peers = true;
};

struct DistContext {
  DistContext();
  DistContext(DistContext&&) noexcept;
  DistContext& operator=(DistContext&&) noexcept;
  ~DistContext();

  DistEnv env;
  Device device;  // where this rank computes: cuda:LOCAL_RANK (nccl) or cpu (tcp)
  std::unique_ptr<Communicator> comm;
  // Destroyed before comm (members go in reverse order): says goodbye to the peers first.
  std::unique_ptr<PeerWatch> watch;
};

// Joins the job described by read_env() (a single process gets a communicator of one rank).
DistContext init_from_env(InitOptions options = {});

// Error messages raised by this process name `rank` from now on (init_from_env sets it).
void set_process_rank(int rank);

}  // namespace stoker::dist
