// Rendezvous: how the ranks of a job find each other over TCP before they can communicate.
//
// Rank 0 listens on MASTER_PORT; every other rank connects to MASTER_ADDR:MASTER_PORT (retrying
// while rank 0 is not up yet) and sends a hello — magic "STKR", protocol version, purpose, its
// rank and the world size it was told. Rank 0 accepts world_size - 1 distinct ranks, checks each
// hello and answers each with a reply (magic, version, status, length-prefixed payload): the
// NCCL unique id, for instance. Every step has a deadline (`timeout_s`), every read is bounded
// (the payload length is checked against kRendezvousMaxPayload before anything is allocated).
// Errors say what happened and what to do: a port in use, a peer that never connected (naming
// the missing ranks), a version, purpose, world-size or duplicate-rank mismatch (rank 0 tells
// the peer why it was refused), a MASTER_ADDR:MASTER_PORT that answers but is no stoker
// rendezvous (said as soon as the first wrong byte arrives, not after a timeout).
// Stray connections to rank 0's port (an HTTP client, a port scanner, a health check) are not
// errors: one that sends something other than a hello (wrong magic), closes before its hello, or
// sends no whole hello within 10 s is closed and logged on stderr ("ignored a connection from
// ADDR that is not a stoker rank: ..."), and rank 0 goes on waiting for the ranks. Connections
// are served side by side, so a silent one delays nobody.
//
// Thread-safety: each call is independent.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace stoker::dist {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // rank 0's host, as the other ranks reach it
  int master_port = 29500;
  double timeout_s = 300.0;  // for the whole rendezvous, on every rank
};

inline constexpr uint32_t kRendezvousMagic = 0x524B5453u;  // "STKR", little-endian
inline constexpr uint16_t kRendezvousVersion = 1;
inline constexpr uint32_t kRendezvousMaxPayload = 1u << 16;

// What the ranks meet for; ranks that disagree are refused (a CPU rank joining a GPU job).
enum class RendezvousPurpose : uint16_t { user = 1, nccl = 2, tcp = 3, watch = 4 };
const char* rendezvous_purpose_name(RendezvousPurpose p);

// Rank 0 sends `payload` (at most kRendezvousMaxPayload bytes; ignored on other ranks) to every
// rank; returns it on every rank. World size 1: rank 0 still binds the port (so a port in use
// fails the same way), then returns at once.
std::vector<uint8_t> rendezvous_broadcast(const RendezvousOptions& options, int rank,
                                          int world_size, std::span<const uint8_t> payload,
                                          RendezvousPurpose purpose = RendezvousPurpose::user);

}  // namespace stoker::dist
