// The rendezvous: rank 0 serves, the other ranks join. The wire format and its parser are in
// dist/rendezvous_message.h.
#include <poll.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dist/rendezvous_links.h"
#include "dist/rendezvous_message.h"
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

using Kind = RendezvousMessageKind;
using Status = RendezvousMessage::Status;

// A connection must say who it is this quickly; until then it waits beside the others, so a
// silent one delays nobody.
constexpr double kHelloTimeoutS = 10.0;
// Connections that have not said who they are yet, at most: beyond, the oldest is dropped (a
// port scanner cannot take every descriptor of rank 0).
constexpr size_t kMaxPending = 64;
// Ignored connections logged one by one; the rest are only counted.
constexpr int kMaxLoggedStrays = 10;

std::string purpose_text(uint16_t p) {
  return rendezvous_purpose_name(static_cast<RendezvousPurpose>(p));
}

void send_reply(const Socket& s, uint16_t status, std::span<const uint8_t> body,
                Clock::time_point deadline) {
  const auto h = encode_rendezvous_reply_header(status, static_cast<uint32_t>(body.size()));
  send_all(s, h.data(), h.size(), deadline, "rendezvous: replying to " + s.peer());
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

// A connection that has not said who it is yet.
struct Pending {
  Socket socket;
  std::vector<uint8_t> bytes;  // received so far, at most a hello
  Clock::time_point deadline;  // when it is given up
};

// Connections to the port that are not stoker ranks: closed and logged, never fatal.
class Strays {
 public:
  explicit Strays(std::string at) : at_(std::move(at)) {}
  void ignore(const Socket& s, const std::string& why) {
    ++count_;
    if (count_ <= kMaxLoggedStrays) {
      std::fprintf(stderr, "%s: ignored a connection from %s that is not a stoker rank: %s%s\n",
                   at_.c_str(), s.peer().c_str(), why.c_str(),
                   count_ == kMaxLoggedStrays ? " (further ones are counted, not logged)" : "");
      std::fflush(stderr);
    }
  }
  int count() const { return count_; }

 private:
  std::string at_;
  int count_ = 0;
};

// Why a whole hello with the right magic cannot join (empty: it can). These come from stoker
// ranks started wrongly, so they fail the rendezvous rather than being ignored.
std::string refusal(const RendezvousMessage& m, const Socket& s, RendezvousPurpose purpose,
                    int world_size, const std::vector<Socket>& peers) {
  const int rank = m.rank;
  if (m.version != kRendezvousVersion)
    return fmt::format(
        "rank {} speaks rendezvous protocol version {} but rank 0 speaks version {}: run the same "
        "stoker build on every rank",
        rank, m.version, kRendezvousVersion);
  if (m.purpose != static_cast<uint16_t>(purpose))
    return fmt::format(
        "rank {} joins for backend {} but rank 0 for {}: every rank must use the same backend",
        rank, purpose_text(m.purpose), rendezvous_purpose_name(purpose));
  if (m.world_size != world_size)
    return fmt::format("rank {} was told WORLD_SIZE={} but rank 0 WORLD_SIZE={}", rank,
                       m.world_size, world_size);
  if (rank <= 0 || rank >= world_size)
    return fmt::format("a connection from {} claims rank {}, not in 1..{}", s.peer(), rank,
                       world_size - 1);
  if (peers[static_cast<size_t>(rank)].valid())
    return fmt::format(
        "rank {} joined twice (from {} and {}): two processes were given the same RANK", rank,
        peers[static_cast<size_t>(rank)].peer(), s.peer());
  return {};
}

// Rank 0: accepts connections until every rank has sent a valid hello. Connections are served
// side by side (poll), each with its own hello deadline, so one that sends nothing or garbage
// delays no rank; it is closed and logged and the rendezvous goes on.
RendezvousLinks serve(const RendezvousOptions& o, int world_size, std::span<const uint8_t> payload,
                      RendezvousPurpose purpose) {
  RendezvousLinks links;
  links.payload.assign(payload.begin(), payload.end());
  Socket listener = listen_on(o.master_port, std::min(world_size + 16, 4096));
  links.peers.resize(static_cast<size_t>(world_size));
  if (world_size == 1) return links;
  const auto deadline = deadline_after(o.timeout_s);
  const std::string at = "rendezvous on port " + std::to_string(o.master_port);
  Strays strays(at);
  std::vector<Pending> pending;
  int joined = 0;
  try {
    while (joined < world_size - 1) {
      const auto now = Clock::now();
      if (now >= deadline) {
        std::string missing;
        int n = 0;
        for (int q = 1; q < world_size; ++q) {
          if (links.peers[static_cast<size_t>(q)].valid()) continue;
          if (n < 16) missing += (n ? ", " : "") + std::to_string(q);
          ++n;
        }
        if (n > 16) missing += fmt::format(" and {} more", n - 16);
        STOKER_CHECK_HINT(
            false,
            "check that every rank started (their logs), that they were given "
            "the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE, and that rank 0's "
            "port is reachable from their hosts (firewall)",
            at, ": timed out after ", o.timeout_s, " s waiting for ", n, " of ", world_size - 1,
            " ranks; never connected: rank", n > 1 ? "s " : " ", missing,
            strays.count() > 0
                ? fmt::format(" ({} connections that were not stoker ranks were ignored)",
                              strays.count())
                : std::string());
      }
      // Connections that did not say who they are in time.
      for (size_t i = pending.size(); i-- > 0;) {
        if (now < pending[i].deadline) continue;
        strays.ignore(pending[i].socket,
                      fmt::format("it sent {} of the {} bytes of a greeting in {:g} s",
                                  pending[i].bytes.size(), kHelloBytes, kHelloTimeoutS));
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      }
      auto wake = deadline;
      for (const Pending& p : pending) wake = std::min(wake, p.deadline);
      std::vector<pollfd> fds;
      fds.push_back({listener.fd(), POLLIN, 0});
      for (const Pending& p : pending) fds.push_back({p.socket.fd(), POLLIN, 0});
      const int ms = static_cast<int>(std::min(seconds_left(wake) * 1000.0 + 1.0, 1000.0));  // >= 1
      const int r = ::poll(fds.data(), fds.size(), ms);
      if (r < 0 && errno != EINTR) STOKER_THROW(at, ": poll failed: ", std::strerror(errno));
      if (r <= 0) continue;

      // Hellos, from the newest connection back (erasing keeps the earlier indices valid).
      for (size_t i = pending.size(); i-- > 0;) {
        if (fds[i + 1].revents == 0) continue;
        Pending& p = pending[i];
        uint8_t buf[kHelloBytes];
        const ReadNow got = read_now(p.socket, buf, kHelloBytes - p.bytes.size());
        std::string why;
        if (got.bytes > 0) {
          p.bytes.insert(p.bytes.end(), buf, buf + got.bytes);
        } else if (got.closed) {
          why = p.bytes.empty()
                    ? std::string("it closed the connection without a greeting")
                    : fmt::format("it closed the connection after {} of the {} bytes of a greeting",
                                  p.bytes.size(), kHelloBytes);
        } else if (!got.error.empty()) {
          why = "reading its greeting failed: " + got.error;
        }
        RendezvousMessage m;
        if (why.empty()) {
          m = parse_rendezvous_message(p.bytes, Kind::hello);
          if (m.status == Status::invalid) why = m.error;
          if (m.status == Status::incomplete) continue;
        }
        if (!why.empty()) {
          strays.ignore(p.socket, why);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        // A whole hello with the magic: a stoker rank.
        const std::string no = refusal(m, p.socket, purpose, world_size, links.peers);
        if (!no.empty()) {
          refuse(p.socket, no);
          STOKER_THROW(at, ": ", no);
        }
        p.socket.set_peer(fmt::format("rank {} at {}", m.rank, p.socket.peer()));
        links.peers[static_cast<size_t>(m.rank)] = std::move(p.socket);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        ++joined;
      }

      if (fds[0].revents & POLLIN) {
        for (Socket s = accept_ready(listener); s.valid(); s = accept_ready(listener)) {
          if (pending.size() >= kMaxPending) {
            strays.ignore(
                pending.front().socket,
                fmt::format("it had not said who it is when {} more connections were waiting",
                            kMaxPending));
            pending.erase(pending.begin());
          }
          pending.push_back({std::move(s), {}, std::min(deadline, deadline_after(kHelloTimeoutS))});
        }
      }
    }
  } catch (const Error& e) {
    for (Socket& p : links.peers)
      if (p.valid()) refuse(p, e.message());
    throw;
  }
  for (const Pending& p : pending)
    strays.ignore(
        p.socket,
        fmt::format("it had sent {} of the {} bytes of a greeting when every rank had joined",
                    p.bytes.size(), kHelloBytes));
  for (int q = 1; q < world_size; ++q)
    send_reply(links.peers[static_cast<size_t>(q)], 0, payload, deadline);
  return links;
}

RendezvousLinks join(const RendezvousOptions& o, int rank, int world_size,
                     RendezvousPurpose purpose) {
  const auto deadline = deadline_after(o.timeout_s);
  RendezvousLinks links;
  links.master = connect_until(o.master_addr, o.master_port, deadline);
  const std::string server = links.master.peer();  // MASTER_ADDR:MASTER_PORT
  const std::string at = "rendezvous with rank 0 at " + server;
  const std::string not_rendezvous_hint =
      "MASTER_ADDR/MASTER_PORT lead to another program: give the job the address of its rank 0 "
      "and a port of its own (stoker launch --master-port)";
  const auto h = encode_rendezvous_hello(static_cast<uint16_t>(purpose), rank, world_size);
  send_all(links.master, h.data(), h.size(), deadline, at + ": sending the hello");
  // The answer is parsed as it arrives, so bytes that are no stoker answer fail at once.
  std::vector<uint8_t> got;
  RendezvousMessage m = parse_rendezvous_message(got, Kind::reply);
  while (m.status == Status::incomplete) {
    const size_t have = got.size();
    got.resize(m.size);
    const size_t k = recv_some(links.master, got.data() + have, m.size - have, deadline,
                               at + ": waiting for rank 0 to answer (it answers when all " +
                                   std::to_string(world_size) + " ranks have joined)");
    got.resize(have + k);
    if (k == 0) {
      STOKER_CHECK_HINT(have > 0,
                        "look at rank 0's log: it failed or exited; or MASTER_PORT leads to "
                        "another program that does not speak the rendezvous",
                        at, ": ", server, " closed the connection before answering");
      STOKER_THROW(at, ": ", server, " closed the connection in the middle of its answer (", have,
                   " of ", m.size, " bytes)");
    }
    m = parse_rendezvous_message(got, Kind::reply);
  }
  STOKER_CHECK_HINT(m.status == Status::complete, not_rendezvous_hint, "rendezvous: ", server,
                    " answered but is not a stoker rendezvous: ", m.error);
  STOKER_CHECK(m.version == kRendezvousVersion, at, ": rank 0 speaks protocol version ", m.version,
               ", this rank ", kRendezvousVersion, ": run the same stoker build on every rank");
  if (m.reply_status != 0) {
    STOKER_THROW(at, ": rank 0 refused rank ", rank, ": ",
                 std::string(m.payload.begin(), m.payload.end()));
  }
  links.payload.assign(m.payload.begin(), m.payload.end());
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
