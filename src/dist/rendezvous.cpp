// Wire format (little-endian):
//   hello, peer -> rank 0 (20 bytes): magic u32 | version u16 | purpose u16 | rank u32 |
//                                     world_size u32 | reserved u32 (0)
//   reply, rank 0 -> peer (12 bytes + length): magic u32 | version u16 | status u16 (0 = ok,
//                                     1 = refused) | length u32 | payload, or the reason when
//                                     refused (length <= kRendezvousMaxPayload)
// Rank 0 answers only once every rank has joined, so a reply also means "everybody is here".
#include <algorithm>
#include <cstdio>

#include "dist/rendezvous_links.h"
#include "stoker/core/error.h"

namespace stoker::dist {

const char* rendezvous_purpose_name(RendezvousPurpose p) {
  switch (p) {
    case RendezvousPurpose::user:
      return "user";
    case RendezvousPurpose::nccl:
      return "nccl";
    case RendezvousPurpose::tcp:
      return "tcp";
    case RendezvousPurpose::watch:
      return "peer watch";
  }
  return "unknown";
}

namespace detail {

namespace {

constexpr size_t kHelloBytes = 20;
constexpr size_t kReplyBytes = 12;
constexpr double kHelloTimeoutS = 10.0;  // a connection must say who it is this quickly

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string purpose_text(uint16_t p) {
  return rendezvous_purpose_name(static_cast<RendezvousPurpose>(p));
}

void send_reply(const Socket& s, uint16_t status, std::span<const uint8_t> body,
                Clock::time_point deadline) {
  unsigned char h[kReplyBytes];
  put_u32(h, kRendezvousMagic);
  put_u16(h + 4, kRendezvousVersion);
  put_u16(h + 6, status);
  put_u32(h + 8, static_cast<uint32_t>(body.size()));
  send_all(s, h, sizeof(h), deadline, "rendezvous: replying to " + s.peer());
  if (!body.empty())
    send_all(s, body.data(), body.size(), deadline, "rendezvous: replying to " + s.peer());
}

// Best effort: tells a connected peer why the rendezvous failed, so it fails now with that
// reason instead of waiting for its own timeout.
void refuse(const Socket& s, const std::string& why) {
  try {
    const std::string text = why.substr(0, kRendezvousMaxPayload);
    send_reply(s, 1, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
               deadline_after(1.0));
  } catch (const std::exception&) {
  }
}

RendezvousLinks serve(const RendezvousOptions& o, int world_size, std::span<const uint8_t> payload,
                      RendezvousPurpose purpose) {
  RendezvousLinks links;
  links.payload.assign(payload.begin(), payload.end());
  Socket listener = listen_on(o.master_port, std::min(world_size + 16, 4096));
  links.peers.resize(static_cast<size_t>(world_size));
  if (world_size == 1) return links;
  const auto deadline = deadline_after(o.timeout_s);
  const std::string at = "rendezvous on port " + std::to_string(o.master_port);
  int joined = 0;
  try {
    while (joined < world_size - 1) {
      Socket s = accept_until(listener, deadline);
      if (!s.valid()) {
        std::string missing;
        int n = 0;
        for (int q = 1; q < world_size; ++q) {
          if (links.peers[static_cast<size_t>(q)].valid()) continue;
          if (n < 16) missing += (n ? ", " : "") + std::to_string(q);
          ++n;
        }
        if (n > 16) missing += core::detail::str(" and ", n - 16, " more");
        STOKER_CHECK_HINT(false,
                          "check that every rank started (their logs), that they were given "
                          "the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE, and that rank 0's "
                          "port is reachable from their hosts (firewall)",
                          at, ": timed out after ", o.timeout_s, " s waiting for ", n, " of ",
                          world_size - 1, " ranks; never connected: rank", n > 1 ? "s " : " ",
                          missing);
      }
      unsigned char h[kHelloBytes];
      recv_all(s, h, sizeof(h), std::min(deadline, deadline_after(kHelloTimeoutS)),
               at + ": reading the hello of a connection from " + s.peer());
      const uint32_t magic = get_u32(h);
      const uint16_t version = get_u16(h + 4), their_purpose = get_u16(h + 6);
      const auto rank = static_cast<int32_t>(get_u32(h + 8));
      const auto world = static_cast<int32_t>(get_u32(h + 12));
      STOKER_CHECK_HINT(magic == kRendezvousMagic,
                        "another program uses this port, or a process of another job connected: "
                        "give this job its own MASTER_PORT",
                        at, ": a connection from ", s.peer(), " sent magic ", hex32(magic),
                        " (expected ", hex32(kRendezvousMagic), "): it is not a stoker rank");
      std::string why;
      if (version != kRendezvousVersion) {
        why = core::detail::str("rank ", rank, " speaks rendezvous protocol version ", version,
                                " but rank 0 speaks version ", kRendezvousVersion,
                                ": run the same stoker build on every rank");
      } else if (their_purpose != static_cast<uint16_t>(purpose)) {
        why = core::detail::str("rank ", rank, " joins for backend ", purpose_text(their_purpose),
                                " but rank 0 for ", rendezvous_purpose_name(purpose),
                                ": every rank must use the same backend");
      } else if (world != world_size) {
        why = core::detail::str("rank ", rank, " was told WORLD_SIZE=", world,
                                " but rank 0 WORLD_SIZE=", world_size);
      } else if (rank <= 0 || rank >= world_size) {
        why = core::detail::str("a connection from ", s.peer(), " claims rank ", rank,
                                ", not in 1..", world_size - 1);
      } else if (links.peers[static_cast<size_t>(rank)].valid()) {
        why = core::detail::str("rank ", rank, " joined twice (from ",
                                links.peers[static_cast<size_t>(rank)].peer(), " and ", s.peer(),
                                "): two processes were given the same RANK");
      }
      if (!why.empty()) {
        refuse(s, why);
        STOKER_THROW(at, ": ", why);
      }
      s.set_peer(core::detail::str("rank ", rank, " at ", s.peer()));
      links.peers[static_cast<size_t>(rank)] = std::move(s);
      ++joined;
    }
  } catch (const Error& e) {
    for (Socket& p : links.peers)
      if (p.valid()) refuse(p, e.message());
    throw;
  }
  for (int q = 1; q < world_size; ++q)
    send_reply(links.peers[static_cast<size_t>(q)], 0, payload, deadline);
  return links;
}

RendezvousLinks join(const RendezvousOptions& o, int rank, int world_size,
                     RendezvousPurpose purpose) {
  const auto deadline = deadline_after(o.timeout_s);
  RendezvousLinks links;
  links.master = connect_until(o.master_addr, o.master_port, deadline);
  const std::string at = "rendezvous with rank 0 at " + links.master.peer();
  unsigned char h[kHelloBytes] = {};
  put_u32(h, kRendezvousMagic);
  put_u16(h + 4, kRendezvousVersion);
  put_u16(h + 6, static_cast<uint16_t>(purpose));
  put_u32(h + 8, static_cast<uint32_t>(rank));
  put_u32(h + 12, static_cast<uint32_t>(world_size));
  send_all(links.master, h, sizeof(h), deadline, at + ": sending the hello");
  unsigned char r[kReplyBytes];
  recv_all(links.master, r, sizeof(r), deadline,
           at + ": waiting for rank 0 to answer (it answers when all " +
               std::to_string(world_size) + " ranks have joined)");
  const uint32_t magic = get_u32(r);
  STOKER_CHECK_HINT(magic == kRendezvousMagic,
                    "another program listens on MASTER_PORT: give this job its own port", at,
                    ": the answer starts with ", hex32(magic), " instead of ",
                    hex32(kRendezvousMagic), ": this is not a stoker rendezvous");
  const uint16_t version = get_u16(r + 4), status = get_u16(r + 6);
  const uint32_t length = get_u32(r + 8);
  STOKER_CHECK(version == kRendezvousVersion, at, ": rank 0 speaks protocol version ", version,
               ", this rank ", kRendezvousVersion, ": run the same stoker build on every rank");
  STOKER_CHECK(length <= kRendezvousMaxPayload, at, ": rank 0 announced ", length,
               " bytes (at most ", kRendezvousMaxPayload, " allowed): a corrupt answer");
  std::vector<uint8_t> body(length);
  if (length > 0)
    recv_all(links.master, body.data(), length, deadline, at + ": reading the payload");
  if (status != 0) {
    STOKER_THROW(at, ": rank 0 refused rank ", rank, ": ", std::string(body.begin(), body.end()));
  }
  links.payload = std::move(body);
  return links;
}

}  // namespace

RendezvousLinks rendezvous_links(const RendezvousOptions& options, int rank, int world_size,
                                 std::span<const uint8_t> payload, RendezvousPurpose purpose) {
  STOKER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rendezvous: rank ", rank,
               " is not in [0, world_size = ", world_size, ")");
  STOKER_CHECK(options.timeout_s > 0, "rendezvous: timeout_s ", options.timeout_s,
               " must be positive");
  STOKER_CHECK(payload.size() <= kRendezvousMaxPayload, "rendezvous: payload of ", payload.size(),
               " bytes exceeds ", kRendezvousMaxPayload);
  return rank == 0 ? serve(options, world_size, payload, purpose)
                   : join(options, rank, world_size, purpose);
}

}  // namespace detail

std::vector<uint8_t> rendezvous_broadcast(const RendezvousOptions& options, int rank,
                                          int world_size, std::span<const uint8_t> payload,
                                          RendezvousPurpose purpose) {
  return detail::rendezvous_links(options, rank, world_size, payload, purpose).payload;
}

}  // namespace stoker::dist
