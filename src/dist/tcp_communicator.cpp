// Wire format (little-endian), per collective:
//   request, rank q -> rank 0 (32 bytes): magic u32 "STKC" | seq u32 | kind u8 | dtype u8 |
//       op u8 | 0 u8 | root i32 | in elements i64 | out elements i64; then the data this rank
//       contributes (all_reduce, all_gather, reduce_scatter: its input; broadcast: the root's)
//   reply, rank 0 -> rank q (24 bytes): magic u32 | seq u32 | status u32 (0 ok, 1 error) |
//       0 u32 | length u64; then the result for rank q, or the error text
// seq counts the collectives of this communicator: a rank that skipped one is caught at once.
#include "dist/tcp_communicator.h"

#include <poll.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dist/collective_kind.h"
#include "dist/flight_recorder.h"
#include "dist/host_reduce.h"
#include "dist/rendezvous_links.h"
#include "stoker/core/error.h"

namespace stoker::dist {

namespace {

constexpr uint32_t kFrameMagic = 0x434B5453u;  // "STKC"
constexpr size_t kRequestBytes = 32, kReplyBytes = 24;
constexpr uint64_t kMaxErrorText = 1u << 16;
constexpr double kReportGraceS = 2.0;  // how long an error report may take to be read
constexpr std::string_view kPrefix = "TcpCommunicator: ";

// A reason that already names the class (an inner error's message) is not prefixed twice.
std::string without_prefix(std::string_view why) {
  if (why.substr(0, kPrefix.size()) == kPrefix) why.remove_prefix(kPrefix.size());
  return std::string(why);
}

using Kind = detail::CollectiveKind;
using detail::kind_name;

struct Call {
  Kind kind = Kind::barrier;
  DType dtype = DType::u8;
  ReduceOp op = ReduceOp::sum;
  int32_t root = 0;
  int64_t in_n = 0, out_n = 0;

  bool operator==(const Call& o) const {
    return kind == o.kind && dtype == o.dtype && op == o.op && root == o.root && in_n == o.in_n &&
           out_n == o.out_n;
  }
  size_t in_bytes() const { return static_cast<size_t>(in_n) * dtype_size(dtype); }
  size_t out_bytes() const { return static_cast<size_t>(out_n) * dtype_size(dtype); }
  std::string str() const {
    std::string s = std::string(kind_name(kind)) + "(";
    if (kind == Kind::barrier) return s + ")";
    s += fmt::format("{} x {}", dtype_name(dtype), in_n);
    if (kind == Kind::all_reduce || kind == Kind::reduce_scatter)
      s += std::string(", ") + reduce_op_name(op);
    if (kind == Kind::broadcast) s += fmt::format(", root {}", root);
    return s + ")";
  }
};

bool sends_data(const Call& c, int rank) {
  switch (c.kind) {
    case Kind::all_reduce:
    case Kind::all_gather:
    case Kind::reduce_scatter:
      return true;
    case Kind::broadcast:
      return rank == c.root;
    case Kind::barrier:
      return false;
  }
  return false;
}

// Bytes of the result rank 0 sends each peer.
size_t reply_bytes(const Call& c) {
  switch (c.kind) {
    case Kind::all_reduce:
    case Kind::all_gather:
    case Kind::reduce_scatter:
    case Kind::broadcast:
      return c.out_bytes();
    case Kind::barrier:
      return 0;
  }
  return 0;
}

}  // namespace

struct TcpCommunicator::Impl {
  TcpOptions options;
  detail::RendezvousLinks links;
  uint32_t seq = 0;
  std::vector<std::vector<uint8_t>> inputs;  // rank 0: what each peer sent
  std::vector<uint8_t> result;               // rank 0: the full result
  bool aborted = false;
  std::string abort_reason;
  // Rank 0, before it reports a failed collective: marks it failed and writes the flight recorder.
  std::function<void(const std::string&)> before_report;

  detail::Clock::time_point deadline() const { return detail::deadline_after(options.timeout_s); }

  void check_usable(const Call& c) const {
    STOKER_CHECK(!aborted, "TcpCommunicator: ", c.str(), " after abort (", abort_reason, ")");
  }

  void send_reply(const detail::Socket& s, uint32_t status, const void* data, uint64_t n,
                  detail::Clock::time_point dl, const std::string& what) {
    unsigned char h[kReplyBytes] = {};
    detail::put_u32(h, kFrameMagic);
    detail::put_u32(h + 4, seq);
    detail::put_u32(h + 8, status);
    detail::put_u64(h + 16, n);
    detail::send_all(s, h, sizeof(h), dl, what);
    if (n > 0) detail::send_all(s, data, static_cast<size_t>(n), dl, what);
  }

  // Rank 0 failed this collective: every peer is told why (best effort), then it throws. Peers
  // marked in `silent` (they had not reached the collective) are not drained.
  [[noreturn]] void fail_everyone(const std::string& why, const std::vector<char>& silent = {}) {
    // The file first: once the peers know, a launcher may stop this process at any moment.
    if (before_report) before_report(why);
    for (size_t q = 1; q < links.peers.size(); ++q) {
      if (!links.peers[q].valid()) continue;
      try {
        send_reply(links.peers[q], 1, why.data(), why.size(), detail::deadline_after(1.0),
                   "TcpCommunicator: error report");
      } catch (const std::exception&) {
      }
    }
    // The peers read the report and close; what they were still sending is drained so that
    // closing here does not reset their connections before they have read it.
    const auto dl = detail::deadline_after(kReportGraceS);
    for (size_t q = 1; q < links.peers.size(); ++q) {
      if (!links.peers[q].valid() || (q < silent.size() && silent[q])) continue;
      ::shutdown(links.peers[q].fd(), SHUT_WR);
      detail::discard_until_closed(links.peers[q], dl);
    }
    STOKER_THROW(kPrefix, without_prefix(why));
  }

  // Other ranks, after a failed send: rank 0 may have failed the collective and said why
  // before it stopped reading; that reason is the one to report.
  [[noreturn]] void rethrow_with_report(const Call& c, int rank) {
    std::string text;
    try {
      const detail::Socket& s = links.master;
      const auto dl = detail::deadline_after(kReportGraceS);
      unsigned char r[kReplyBytes];
      detail::recv_all(s, r, sizeof(r), dl, "report");
      const uint64_t n = detail::get_u64(r + 16);
      if (detail::get_u32(r) == kFrameMagic && detail::get_u32(r + 8) != 0 && n <= kMaxErrorText) {
        text.resize(static_cast<size_t>(n));
        detail::recv_all(s, text.data(), text.size(), dl, "report");
      }
    } catch (const std::exception&) {
    }
    if (text.empty()) throw;
    STOKER_THROW("TcpCommunicator: rank ", rank, " in ", c.str(), ": rank 0 reports: ", text);
  }

  // Rank 0, after the wait for rank q's request or data ended in `e`: when the collective
  // timed out, names every rank that had not reached it — q, and the later ranks that had sent
  // nothing yet (the earlier ones sent their requests) — and fails everyone.
  [[noreturn]] void fail_waiting(const Error& e, int q, bool in_data, int world,
                                 const CollectiveRecord& rec, detail::Clock::time_point dl) {
    if (detail::Clock::now() < dl) fail_everyone(e.message());  // closed, not timed out
    std::vector<char> silent(static_cast<size_t>(world), 0);
    std::vector<int> missing;
    if (!in_data) {
      missing.push_back(q);
      silent[static_cast<size_t>(q)] = 1;
    }
    for (int p = q + 1; p < world; ++p) {
      pollfd pf{links.peers[static_cast<size_t>(p)].fd(), POLLIN, 0};
      if (::poll(&pf, 1, 0) == 0) {
        missing.push_back(p);
        silent[static_cast<size_t>(p)] = 1;
      }
    }
    std::string who;
    for (size_t i = 0; i < missing.size(); ++i) who += (i ? ", " : "") + std::to_string(missing[i]);
    std::string why = fmt::format("rank 0 waited {:g} s (collective timeout) in {}",
                                  options.timeout_s, rec.str());
    if (!missing.empty())
      why += fmt::format(
          " for rank{}{} (world size {}), which had not reached it (every rank had reached "
          "collective #{})",
          missing.size() > 1 ? "s " : " ", who, world, rec.seq - 1);
    if (in_data)
      why += fmt::format("{} for the data of rank {}, which reached it but stopped sending",
                         missing.empty() ? "" : ";", q);
    // A cut link looks the same from here as a stopped rank (each side blames the other).
    fail_everyone(why +
                      ": a rank failed, hangs, or called other collectives, or the network "
                      "between it and rank 0 is down (a cut link, a firewall, a host "
                      "unreachable on MASTER_ADDR's network) [" +
                      without_prefix(e.message()) + "]",
                  silent);
  }

  // Rank 0: receives every peer's request (and data), checks it against its own call.
  void gather_requests(const Call& mine, int world, const CollectiveRecord& rec) {
    inputs.resize(static_cast<size_t>(world));
    const auto dl = deadline();
    for (int q = 1; q < world; ++q) {
      const detail::Socket& s = links.peers[static_cast<size_t>(q)];
      const std::string what =
          fmt::format("TcpCommunicator: rank 0 in {} waiting for rank {}", mine.str(), q);
      unsigned char h[kRequestBytes];
      try {
        detail::recv_all(s, h, sizeof(h), dl, what);
      } catch (const Error& e) {
        fail_waiting(e, q, false, world, rec, dl);
      }
      Call c;
      c.kind = static_cast<Kind>(h[8]);
      c.dtype = static_cast<DType>(h[9]);
      c.op = static_cast<ReduceOp>(h[10]);
      c.root = static_cast<int32_t>(detail::get_u32(h + 12));
      c.in_n = static_cast<int64_t>(detail::get_u64(h + 16));
      c.out_n = static_cast<int64_t>(detail::get_u64(h + 24));
      if (detail::get_u32(h) != kFrameMagic)
        fail_everyone(
            fmt::format("rank {} sent a corrupt request (bad magic) during {}", q, mine.str()));
      const uint32_t their_seq = detail::get_u32(h + 4);
      if (their_seq != seq)
        fail_everyone(
            fmt::format("rank {} is at collective #{} but rank 0 at #{} ({}): the ranks issued "
                        "different collectives",
                        q, their_seq, seq, mine.str()));
      if (!(c == mine))
        fail_everyone(
            fmt::format("collective mismatch: rank 0 called {} but rank {} called {}; every rank "
                        "must issue the same collectives in the same order",
                        mine.str(), q, c.str()));
      if (sends_data(mine, q)) {
        std::vector<uint8_t>& buf = inputs[static_cast<size_t>(q)];
        buf.resize(mine.in_bytes());
        try {
          detail::recv_all(s, buf.data(), buf.size(), dl, what);
        } catch (const Error& e) {
          fail_waiting(e, q, true, world, rec, dl);
        }
      }
    }
  }

  // Other ranks, when rank 0 has not answered within the timeout (and the grace its own report
  // would have taken): rank 0 had not reached the collective.
  [[noreturn]] void fail_rank0_missing(const CollectiveRecord& rec, int rank, int world,
                                       const Error& e) {
    STOKER_THROW("TcpCommunicator: rank ", rank, " waited ", options.timeout_s + kReportGraceS,
                 " s (collective timeout + ", kReportGraceS, " s for rank 0's report) in ",
                 rec.str(), " for rank 0 (world size ", world,
                 "), which had not answered: rank 0 had not reached the collective (it hangs, is "
                 "stopped, or computes elsewhere), or the network to rank 0 is down (a cut "
                 "link, a firewall, a host unreachable on MASTER_ADDR's network) [",
                 e.message(), "]");
  }

  // Other ranks: sends the request (and data), then receives the result into `out`. The wait is
  // the timeout plus a grace: when another rank is missing, rank 0 times out first and reports
  // which one.
  void exchange(const Call& c, int rank, int world, const void* in, void* out,
                const CollectiveRecord& rec) {
    const detail::Socket& s = links.master;
    const auto dl = detail::deadline_after(options.timeout_s + kReportGraceS);
    const std::string what = fmt::format("TcpCommunicator: rank {} in {} (rank 0)", rank, c.str());
    unsigned char h[kRequestBytes] = {};
    detail::put_u32(h, kFrameMagic);
    detail::put_u32(h + 4, seq);
    h[8] = static_cast<uint8_t>(c.kind);
    h[9] = static_cast<uint8_t>(c.dtype);
    h[10] = static_cast<uint8_t>(c.op);
    detail::put_u32(h + 12, static_cast<uint32_t>(c.root));
    detail::put_u64(h + 16, static_cast<uint64_t>(c.in_n));
    detail::put_u64(h + 24, static_cast<uint64_t>(c.out_n));
    try {
      detail::send_all(s, h, sizeof(h), dl, what);
      if (sends_data(c, rank)) detail::send_all(s, in, c.in_bytes(), dl, what);
    } catch (const Error& e) {
      if (detail::Clock::now() >= dl) fail_rank0_missing(rec, rank, world, e);
      rethrow_with_report(c, rank);
    }
    unsigned char r[kReplyBytes];
    try {
      detail::recv_all(s, r, sizeof(r), dl, what);
    } catch (const Error& e) {
      if (detail::Clock::now() >= dl) fail_rank0_missing(rec, rank, world, e);
      throw;
    }
    STOKER_CHECK(detail::get_u32(r) == kFrameMagic && detail::get_u32(r + 4) == seq, what,
                 ": corrupt reply from rank 0");
    const uint32_t status = detail::get_u32(r + 8);
    const uint64_t n = detail::get_u64(r + 16);
    if (status != 0) {
      STOKER_CHECK(n <= kMaxErrorText, what, ": corrupt error report from rank 0");
      std::string text(static_cast<size_t>(n), '\0');
      detail::recv_all(s, text.data(), text.size(), dl, what);
      STOKER_THROW("TcpCommunicator: rank ", rank, " in ", c.str(), ": rank 0 reports: ", text);
    }
    STOKER_CHECK(n == reply_bytes(c), what, ": rank 0 answered ", n, " bytes, expected ",
                 reply_bytes(c));
    if (n > 0) detail::recv_all(s, out, static_cast<size_t>(n), dl, what);
  }

  // Rank 0: sends peer q `n` bytes of result at `data`.
  void reply(int q, const void* data, size_t n) {
    send_reply(links.peers[static_cast<size_t>(q)], 0, data, n, deadline(),
               fmt::format("TcpCommunicator: rank 0 answering rank {}", q));
  }

  // Starts collective c on every rank: a peer exchanges its request for rank 0's reply (in: what
  // it sends, out: where the result goes) and is done; rank 0 gathers every peer's request and
  // returns true, to compute the result and reply.
  bool begin(const Call& c, int rank, int world, const void* in, void* out,
             const CollectiveRecord& rec) {
    check_usable(c);
    ++seq;
    if (rank != 0) {
      exchange(c, rank, world, in, out, rec);
      return false;
    }
    gather_requests(c, world, rec);
    return true;
  }

  // Rank 0: `result` = the reduction by op of every rank's input (rank 0's at `mine`).
  void reduce_inputs(const Call& c, ReduceOp op, const void* mine, int world) {
    std::vector<const void*> srcs(static_cast<size_t>(world));
    srcs[0] = mine;
    for (int q = 1; q < world; ++q)
      srcs[static_cast<size_t>(q)] = inputs[static_cast<size_t>(q)].data();
    result.resize(c.in_bytes());
    detail::host_reduce(c.dtype, op, srcs, result.data(), 0, c.in_n);
  }
};

TcpCommunicator::TcpCommunicator(int rank, int world_size, TcpOptions options)
    : Communicator(rank, world_size), impl_(std::make_unique<Impl>()) {
  STOKER_CHECK(options.timeout_s > 0, "TcpOptions: timeout_s ", options.timeout_s,
               " must be positive");
  impl_->options = options;
  configure_flight_recorder(options.flight_recorder);
  impl_->before_report = [this](const std::string& why) {
    mark_collective_ended(current_collective().seq, CollectiveState::failed,
                          FlightRecorder::now_ns());
    dump_flight_recorder_on_failure("TcpCommunicator: " + why);
  };
  if (world_size == 1) return;  // nobody to meet: no port is bound
  impl_->links =
      detail::rendezvous_links(options.rendezvous, rank, world_size, {}, RendezvousPurpose::tcp);
}

TcpCommunicator::~TcpCommunicator() = default;

std::string TcpCommunicator::describe() const {
  return fmt::format("tcp rank {}/{}", rank(), world_size());
}

void TcpCommunicator::abort(const std::string& reason) {
  impl_->aborted = true;
  impl_->abort_reason = reason;
  impl_->links.master.shutdown();
  for (detail::Socket& s : impl_->links.peers) s.shutdown();
}

void TcpCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) {
  const Call c{Kind::all_reduce, in.dtype(), op, 0, in.numel(), out.numel()};
  const int w = world_size();
  if (!impl_->begin(c, rank(), w, in.data(), out.data(), current_collective())) return;
  impl_->reduce_inputs(c, op, in.data(), w);
  std::memcpy(out.data(), impl_->result.data(), c.out_bytes());
  for (int q = 1; q < w; ++q) impl_->reply(q, impl_->result.data(), c.out_bytes());
}

void TcpCommunicator::do_broadcast(const Tensor& t, int root) {
  const Call c{Kind::broadcast, t.dtype(), ReduceOp::sum, root, t.numel(), t.numel()};
  const int w = world_size();
  if (!impl_->begin(c, rank(), w, t.data(), t.data(), current_collective())) return;
  if (root != 0) std::memcpy(t.data(), impl_->inputs[static_cast<size_t>(root)].data(), t.nbytes());
  for (int q = 1; q < w; ++q) impl_->reply(q, t.data(), t.nbytes());
}

void TcpCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  const Call c{Kind::all_gather, in.dtype(), ReduceOp::sum, 0, in.numel(), out.numel()};
  const int w = world_size();
  if (!impl_->begin(c, rank(), w, in.data(), out.data(), current_collective())) return;
  const size_t bytes = in.nbytes();
  auto* dst = static_cast<uint8_t*>(out.data());
  if (dst != in.data()) std::memmove(dst, in.data(), bytes);
  for (int q = 1; q < w; ++q)
    std::memcpy(dst + static_cast<size_t>(q) * bytes, impl_->inputs[static_cast<size_t>(q)].data(),
                bytes);
  for (int q = 1; q < w; ++q) impl_->reply(q, out.data(), out.nbytes());
}

void TcpCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  const Call c{Kind::reduce_scatter, in.dtype(), op, 0, in.numel(), out.numel()};
  const int w = world_size();
  if (!impl_->begin(c, rank(), w, in.data(), out.data(), current_collective())) return;
  impl_->reduce_inputs(c, op, in.data(), w);
  const size_t chunk = out.nbytes();
  std::memcpy(out.data(), impl_->result.data(), chunk);
  for (int q = 1; q < w; ++q)
    impl_->reply(q, impl_->result.data() + static_cast<size_t>(q) * chunk, chunk);
}

void TcpCommunicator::do_barrier() {
  const Call c{};
  const int w = world_size();
  if (!impl_->begin(c, rank(), w, nullptr, nullptr, current_collective())) return;
  for (int q = 1; q < w; ++q) impl_->reply(q, nullptr, 0);
}

}  // namespace stoker::dist
