// The watch's wire protocol, after the rendezvous: each message is 5 bytes, a kind and a rank
// (u32, little-endian). kGoodbye / kFailed: the sender leaves, cleanly or not. kDied (rank 0
// only): rank r died. A closed connection without a goodbye is a death. The thread polls the
// connections and a self-pipe (written to stop it), so it never needs a timeout.
#include "stoker/dist/peer_watch.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "dist/rendezvous_links.h"
#include "stoker/core/error.h"

namespace stoker::dist {

namespace {

using detail::Socket;

constexpr unsigned char kGoodbye = 'B';
constexpr unsigned char kFailed = 'F';
constexpr unsigned char kDied = 'D';
constexpr size_t kMessageBytes = 5;

// Best effort, never blocks long: the peer may be gone already.
void send_message(const Socket& s, unsigned char kind, int rank) {
  if (!s.valid()) return;
  unsigned char m[kMessageBytes];
  m[0] = kind;
  detail::put_u32(m + 1, static_cast<uint32_t>(rank));
  (void)::send(s.fd(), m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Every live watch, so that exit() (which runs no destructors of locals) still says goodbye.
std::mutex g_live_mu;
std::set<PeerWatch*> g_live;
std::once_flag g_atexit_once;

}  // namespace

struct PeerWatch::Impl {
  int rank = 0, world_size = 1;
  OnFailure on_failure;
  std::vector<Socket> peers;  // rank 0: index q is rank q's connection
  Socket master;              // other ranks: the connection to rank 0
  int wake[2] = {-1, -1};     // self-pipe: a byte stops the thread
  std::thread thread;
  std::atomic<bool> left{false};

  void fail(const std::string& message) {
    if (left.exchange(true)) return;  // leaving anyway, or failed once already
    on_failure(core::detail::str("stoker: rank ", rank, " of ", world_size, ": ", message));
  }

  // One message (or the end of the stream) from `s`; false when the connection is over.
  // `kind` is 0 for a close without a word.
  bool read(const Socket& s, unsigned char& kind, int& who) {
    unsigned char m[kMessageBytes];
    size_t got = 0;
    while (got < sizeof(m)) {
      const ssize_t n = ::recv(s.fd(), m + got, sizeof(m) - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      kind = 0;
      return false;
    }
    kind = m[0];
    who = static_cast<int>(detail::get_u32(m + 1));
    return true;
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<int> rank_of;  // rank whose connection fds[i] is (-1: the self-pipe)
    fds.push_back({wake[0], POLLIN, 0});
    rank_of.push_back(-1);
    if (rank == 0) {
      for (int q = 1; q < world_size; ++q) {
        fds.push_back({peers[static_cast<size_t>(q)].fd(), POLLIN, 0});
        rank_of.push_back(q);
      }
    } else {
      fds.push_back({master.fd(), POLLIN, 0});
      rank_of.push_back(0);
    }
    while (true) {
      const int r = ::poll(fds.data(), fds.size(), -1);
      if (r < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;  // stop
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0 || fds[i].fd < 0) continue;
        const int q = rank_of[i];
        const Socket& s = rank == 0 ? peers[static_cast<size_t>(q)] : master;
        unsigned char kind = 0;
        int who = q;
        const bool open = read(s, kind, who);
        if (open && kind == kGoodbye) {
          fds[i].fd = -1;  // q left cleanly: poll() ignores negative descriptors
          continue;
        }
        if (left.load()) return;  // this rank is leaving: its peers going away is expected
        std::string what;
        int dead = q;
        if (kind == kDied) {
          dead = who;
          what = core::detail::str("rank ", who, " died (rank 0 lost its connection)");
        } else if (kind == kFailed) {
          what = core::detail::str("rank ", q, " (", s.peer(), ") failed and left the job");
        } else {
          what = core::detail::str("rank ", q, " (", s.peer(),
                                   ") ended unexpectedly: its connection closed without a "
                                   "goodbye (crash, kill signal or out-of-memory kill)");
        }
        if (rank == 0) {
          for (int p = 1; p < world_size; ++p)
            if (p != dead) send_message(peers[static_cast<size_t>(p)], kDied, dead);
        }
        fail(what +
             "; collectives with it cannot complete, so this rank stops too. The log of rank " +
             std::to_string(dead) + " says why it ended.");
        return;
      }
    }
  }

  void stop_thread() {
    if (wake[1] >= 0) {
      const unsigned char b = 1;
      (void)!::write(wake[1], &b, 1);
    }
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }
};

PeerWatch::PeerWatch(const RendezvousOptions& options, int rank, int world_size,
                     OnFailure on_failure)
    : impl_(std::make_unique<Impl>()) {
  impl_->rank = rank;
  impl_->world_size = world_size;
  impl_->on_failure = on_failure ? std::move(on_failure) : OnFailure(exit_on_failure);
  detail::RendezvousLinks links =
      detail::rendezvous_links(options, rank, world_size, {}, RendezvousPurpose::watch);
  impl_->peers = std::move(links.peers);
  impl_->master = std::move(links.master);
  if (world_size == 1) return;
  STOKER_CHECK(::pipe(impl_->wake) == 0, "PeerWatch: pipe() failed: ", std::strerror(errno));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live.insert(this);
  }
  std::call_once(g_atexit_once, [] {
    std::atexit([] {
      std::lock_guard<std::mutex> lock(g_live_mu);
      for (PeerWatch* w : g_live) w->leave(false);
    });
  });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live.erase(this);
  }
  leave(std::uncaught_exceptions() > 0);
  impl_->stop_thread();
  for (int fd : impl_->wake)
    if (fd >= 0) ::close(fd);
}

void PeerWatch::leave(bool failed) {
  if (impl_->left.exchange(true)) return;
  const unsigned char kind = failed ? kFailed : kGoodbye;
  if (impl_->rank == 0) {
    for (size_t q = 1; q < impl_->peers.size(); ++q) send_message(impl_->peers[q], kind, 0);
  } else {
    send_message(impl_->master, kind, impl_->rank);
  }
}

void PeerWatch::abandon() {
  impl_->left.store(true);
  impl_->stop_thread();
  for (Socket& s : impl_->peers) s.close();
  impl_->master.close();
}

void PeerWatch::exit_on_failure(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace stoker::dist
