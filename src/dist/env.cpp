#include "stoker/dist/env.h"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <vector>

#include "dist/flight_recorder.h"
#include "dist/nccl_communicator.h"
#include "dist/peer_watch.h"
#include "dist/rendezvous.h"
#include "dist/tcp_communicator.h"
#include "stoker/core/error.h"

namespace stoker::core::detail {
// Defined in src/core/error.cpp: the rank that stoker::Error's location names (-1: none).
extern std::atomic<int> g_process_rank;
}  // namespace stoker::core::detail

namespace stoker::dist {

namespace {

using Lookup = std::function<const char*(const char*)>;

const char* get(const Lookup& lookup, const char* name) {
  const char* v = lookup(name);
  return v && *v ? v : nullptr;
}

int parse_int(const char* name, const char* value) {
  int out = 0;
  const char* end = value + std::char_traits<char>::length(value);
  const auto [ptr, ec] = std::from_chars(value, end, out);
  STOKER_CHECK(ec == std::errc() && ptr == end, "environment variable ", name, "='", value,
               "' is not an integer");
  return out;
}

int int_var(const Lookup& lookup, const char* name, int fallback) {
  const char* v = get(lookup, name);
  return v ? parse_int(name, v) : fallback;
}

// The first host of a SLURM host list: "node[01-04,07],gpu5" -> "node01".
std::string first_slurm_host(const std::string& list) {
  std::string prefix, token, suffix;
  size_t i = 0;
  while (i < list.size() && list[i] != '[' && list[i] != ',') prefix += list[i++];
  if (i < list.size() && list[i] == '[') {
    ++i;
    while (i < list.size() && list[i] != '-' && list[i] != ',' && list[i] != ']')
      token += list[i++];
    while (i < list.size() && list[i] != ']') ++i;
    if (i < list.size()) ++i;
    while (i < list.size() && list[i] != ',') suffix += list[i++];
  }
  return prefix + token + suffix;
}

// A launcher that exports the rank, the world size and their per-node counterparts (torchrun,
// Open MPI), named by these variables; without the per-node ones, all ranks are on one node.
void read_ranks(const Lookup& lookup, DistEnv& e, const char* source, const char* rank,
                const char* world_size, const char* local_rank, const char* local_world_size) {
  e.source = source;
  e.rank = int_var(lookup, rank, 0);
  e.world_size = int_var(lookup, world_size, 1);
  e.local_rank = int_var(lookup, local_rank, e.rank);
  e.local_world_size = int_var(lookup, local_world_size, e.world_size);
}

// "4(x2),3" -> 4: the task count of the first node.
int first_task_count(const char* name, const char* value) {
  std::string digits;
  for (const char* p = value; *p && *p >= '0' && *p <= '9'; ++p) digits += *p;
  STOKER_CHECK(!digits.empty(), "environment variable ", name, "='", value,
               "' does not start with a task count");
  return parse_int(name, digits.c_str());
}

}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::automatic:
      return "automatic";
    case Backend::nccl:
      return "nccl";
    case Backend::tcp:
      return "tcp";
  }
  return "?";
}

void set_process_rank(int rank) {
  core::detail::g_process_rank.store(rank, std::memory_order_relaxed);
}

DistEnv read_env(const Lookup& lookup) {
  DistEnv e;
  const char* master_addr = get(lookup, "MASTER_ADDR");
  bool multi_node_needs_addr = false;
  if (get(lookup, "RANK") || get(lookup, "WORLD_SIZE")) {
    STOKER_CHECK(get(lookup, "RANK") && get(lookup, "WORLD_SIZE"),
                 "environment: RANK and WORLD_SIZE must be set together (found only ",
                 get(lookup, "RANK") ? "RANK" : "WORLD_SIZE", ")");
    read_ranks(lookup, e, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    multi_node_needs_addr = true;
  } else if (get(lookup, "SLURM_PROCID") &&
             (get(lookup, "SLURM_NTASKS") || get(lookup, "SLURM_NPROCS"))) {
    e.source = "slurm";
    e.rank = int_var(lookup, "SLURM_PROCID", 0);
    e.world_size = get(lookup, "SLURM_NTASKS") ? int_var(lookup, "SLURM_NTASKS", 1)
                                               : int_var(lookup, "SLURM_NPROCS", 1);
    e.local_rank = int_var(lookup, "SLURM_LOCALID", 0);
    if (const char* v = get(lookup, "SLURM_NTASKS_PER_NODE")) {
      e.local_world_size = first_task_count("SLURM_NTASKS_PER_NODE", v);
    } else if (const char* t = get(lookup, "SLURM_TASKS_PER_NODE")) {
      e.local_world_size = first_task_count("SLURM_TASKS_PER_NODE", t);
    } else {
      e.local_world_size = e.world_size;
    }
    if (!master_addr) {
      const char* nodes = get(lookup, "SLURM_JOB_NODELIST");
      if (!nodes) nodes = get(lookup, "SLURM_NODELIST");
      if (nodes) e.master_addr = first_slurm_host(nodes);
    }
  } else if (get(lookup, "OMPI_COMM_WORLD_RANK") && get(lookup, "OMPI_COMM_WORLD_SIZE")) {
    read_ranks(lookup, e, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
    multi_node_needs_addr = true;
  }
  if (master_addr) e.master_addr = master_addr;
  e.master_port = int_var(lookup, "MASTER_PORT", 29500);

  STOKER_CHECK(e.world_size >= 1, "environment (", e.source, "): world size ", e.world_size,
               " must be >= 1");
  STOKER_CHECK(e.rank >= 0 && e.rank < e.world_size, "environment (", e.source, "): rank ", e.rank,
               " is not in [0, world size ", e.world_size, ")");
  STOKER_CHECK(e.local_world_size >= 1 && e.local_world_size <= e.world_size, "environment (",
               e.source, "): local world size ", e.local_world_size, " must be in [1, ",
               e.world_size, "]");
  STOKER_CHECK(e.local_rank >= 0 && e.local_rank < e.local_world_size, "environment (", e.source,
               "): local rank ", e.local_rank, " is not in [0, local world size ",
               e.local_world_size, ")");
  STOKER_CHECK(e.master_port >= 1 && e.master_port <= 65535, "environment: MASTER_PORT ",
               e.master_port, " is not in 1..65535");
  STOKER_CHECK_HINT(!multi_node_needs_addr || master_addr || e.local_world_size == e.world_size,
                    "export MASTER_ADDR=<host of rank 0> on every node (mpirun -x MASTER_ADDR)",
                    "environment (", e.source, "): the job spans several nodes (world size ",
                    e.world_size, ", ", e.local_world_size,
                    " per node) but MASTER_ADDR is not set");

  const char* agent_store = get(lookup, "TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_listens = agent_store && std::string(agent_store) == "True";
  e.rendezvous_port = agent_listens && e.master_port < 65535 ? e.master_port + 1 : e.master_port;
  e.rendezvous_port = int_var(lookup, "STOKER_RENDEZVOUS_PORT", e.rendezvous_port);
  STOKER_CHECK(e.rendezvous_port >= 1 && e.rendezvous_port <= 65535,
               "environment: STOKER_RENDEZVOUS_PORT ", e.rendezvous_port, " is not in 1..65535");
  e.collective_timeout_s = collective_timeout_from_env(lookup, 0.0);
  return e;
}

DistEnv read_env() {
  return read_env([](const char* name) { return std::getenv(name); });
}

DistContext::DistContext() = default;
DistContext::DistContext(DistContext&&) noexcept = default;
DistContext& DistContext::operator=(DistContext&&) noexcept = default;
DistContext::~DistContext() = default;

DistContext init_from_env(InitOptions options) {
  DistContext ctx;
  ctx.env = read_env();
  const DistEnv& e = ctx.env;
  if (e.source != "none") set_process_rank(e.rank);
  Backend backend = options.backend;
  if (backend == Backend::automatic)
    backend =
        core::built_with_cuda() && core::cuda_device_count() > 0 ? Backend::nccl : Backend::tcp;
  const RendezvousOptions rdzv{e.master_addr, e.rendezvous_port, options.timeout_s};
  const double collective_timeout_s =
      e.collective_timeout_s > 0 ? e.collective_timeout_s : options.collective_timeout_s;
  STOKER_CHECK(collective_timeout_s > 0, "InitOptions: collective_timeout_s ", collective_timeout_s,
               " must be positive");
  // A single process started without a launcher has nobody to meet: no port is bound.
  const bool meet = e.source != "none" || e.world_size > 1;

  if (backend == Backend::nccl) {
    const int visible = core::cuda_device_count();
    STOKER_CHECK_HINT(e.local_rank < visible,
                      "start at most one process per GPU (--nproc-per-node <= the GPU count), or "
                      "set CUDA_VISIBLE_DEVICES so that each node shows enough GPUs",
                      "init_from_env: local rank ", e.local_rank, " needs cuda:", e.local_rank,
                      " but ", visible, " CUDA device", visible == 1 ? " is" : "s are", " visible",
                      core::built_with_cuda() ? "" : " (stoker built without CUDA)");
    ctx.device = Device::cuda(e.local_rank);
    NcclUniqueId id;
    if (e.rank == 0) id = NcclCommunicator::create_unique_id();
    if (meet) {
      const std::vector<uint8_t> got =
          rendezvous_broadcast(rdzv, e.rank, e.world_size, id.bytes, RendezvousPurpose::nccl);
      STOKER_CHECK(got.size() == id.bytes.size(), "init_from_env: rank 0 sent ", got.size(),
                   " bytes instead of an NCCL unique id (", id.bytes.size(), " bytes)");
      std::copy(got.begin(), got.end(), id.bytes.begin());
      // Before NCCL's own set-up, which would also block forever on a rank that died.
      if (options.watch_peers && e.world_size > 1)
        ctx.watch = std::make_unique<PeerWatch>(rdzv, e.rank, e.world_size);
    }
    NcclOptions nccl;
    nccl.timeout_s = collective_timeout_s;
    nccl.flight_recorder = options.flight_recorder;
    if (ctx.watch) nccl.progress_query = ctx.watch->progress_query();
    ctx.comm = std::make_unique<NcclCommunicator>(id, e.rank, e.world_size, ctx.device, nccl);
    // What this rank answers when a peer's watchdog asks how far it got.
    if (ctx.watch) ctx.watch->set_progress([seq = ctx.comm->seq_counter()] { return seq->load(); });
  } else {
    ctx.device = Device::cpu();
    TcpOptions tcp;
    tcp.rendezvous = rdzv;
    tcp.timeout_s = collective_timeout_s;
    tcp.flight_recorder = options.flight_recorder;
    ctx.comm = std::make_unique<TcpCommunicator>(e.rank, e.world_size, tcp);
  }
  return ctx;
}

}  // namespace stoker::dist
