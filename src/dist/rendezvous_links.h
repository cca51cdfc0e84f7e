// The rendezvous with its connections kept open, for the TcpCommunicator. Private to src/dist.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dist/rendezvous.h"
#include "dist/socket.h"

namespace stoker::dist::detail {

struct RendezvousLinks {
  std::vector<uint8_t> payload;  // what rank 0 sent
  std::vector<Socket> peers;     // rank 0: the connection of rank q at index q ([0] unused)
  Socket master;                 // other ranks: the connection to rank 0
};

RendezvousLinks rendezvous_links(const RendezvousOptions& options, int rank, int world_size,
                                 std::span<const uint8_t> payload, RendezvousPurpose purpose);

}  // namespace stoker::dist::detail
