// The watch's wire protocol, after the rendezvous: each message is 13 bytes, a kind, a rank
// (u32) and a value (u64), little-endian. kGoodbye / kFailed: the sender leaves, cleanly or not.
// kDied (rank 0 only): rank r died. A closed connection without a goodbye is a death.
// Progress queries: kAsk (a rank to rank 0, value: the ask's number on that rank) asks for a
// gather; kQuery (rank 0 to the others) asks each rank for its last sequence number, kProgress
// (rank, value) answers; rank 0 then sends the table, one kAnswered / kNoAnswer / kLeft (rank,
// value) per rank and kEnd (value: the number of that rank's latest ask the gather answers).
// A gather answers only the asks that reached rank 0 before it started, so an ask never gets
// progress older than itself: asks arriving during a gather are answered together by the next
// one (at most two answer windows for the last of a burst of asks). The thread polls the
// connections and a self-pipe (written to stop it or to wake it for a local ask); only a gather
// in flight gives poll a timeout.
#include "dist/peer_watch.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
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
using Clock = std::chrono::steady_clock;

constexpr unsigned char kGoodbye = 'B';
constexpr unsigned char kFailed = 'F';
constexpr unsigned char kDied = 'D';
constexpr unsigned char kAsk = 'A';
constexpr unsigned char kQuery = 'Q';
constexpr unsigned char kProgress = 'P';
constexpr unsigned char kAnswered = 'R';
constexpr unsigned char kNoAnswer = 'N';
constexpr unsigned char kLeft = 'L';
constexpr unsigned char kEnd = 'E';
constexpr size_t kMessageBytes = 13;

constexpr unsigned char kWakeStop = 'S';
constexpr unsigned char kWakeAsk = 'W';

// Best effort, never blocks long: the peer may be gone already.
void send_message(const Socket& s, unsigned char kind, int rank, uint64_t value = 0) {
  if (!s.valid()) return;
  unsigned char m[kMessageBytes];
  m[0] = kind;
  detail::put_u32(m + 1, static_cast<uint32_t>(rank));
  detail::put_u64(m + 5, value);
  (void)::send(s.fd(), m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool is_table_entry(unsigned char kind) {
  return kind == kAnswered || kind == kNoAnswer || kind == kLeft;
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
  int wake[2] = {-1, -1};     // self-pipe: kWakeStop stops the thread, kWakeAsk wakes it
  std::thread thread;
  std::atomic<bool> left{false};
  std::mutex send_mu;  // the watch's thread and the askers write to the same sockets

  // Progress queries, under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::function<uint64_t()> progress;
  double answer_window_s = 1.0;
  bool ended = false;               // the thread has returned: no table will come
  uint64_t asks_made = 0;           // this rank's asks so far (an ask's number: asks_made after it)
  uint64_t answered = 0;            // the number of this rank's latest ask that `table` answers
  ProgressTable table;              // the last table received (rank 0: gathered)
  ProgressTable incoming;           // other ranks: the entries of the table being received
  bool ask_pending = false;         // rank 0: an ask came that no gather in flight answers
  bool gathering = false;           // rank 0: a gather is in flight
  std::vector<uint64_t> asked;      // rank 0: per rank, the number of its latest ask received
  std::vector<uint64_t> answering;  // rank 0: per rank, the ask number the gather answers
  Clock::time_point gather_deadline;
  ProgressTable answers;   // rank 0: the gather's answers so far
  std::vector<char> gone;  // rank 0: rank q said goodbye

  ~Impl() {
    for (int fd : wake)
      if (fd >= 0) ::close(fd);
  }

  void send(const Socket& s, unsigned char kind, int r, uint64_t value = 0) {
    std::lock_guard<std::mutex> lock(send_mu);
    send_message(s, kind, r, value);
  }

  uint64_t my_progress_locked() const { return progress ? progress() : 0; }

  void fail(const std::string& message) {
    if (left.exchange(true)) return;  // leaving anyway, or failed once already
    on_failure(fmt::format("stoker: rank {} of {}: {}", rank, world_size, message));
  }

  // One message (or the end of the stream) from `s`; false when the connection is over.
  // `kind` is 0 for a close without a word.
  bool read(const Socket& s, unsigned char& kind, int& who, uint64_t& value) {
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
    value = detail::get_u64(m + 5);
    return true;
  }

  // Rank 0, under mu.
  void start_gather_locked() {
    ask_pending = false;
    gathering = true;
    answering = asked;  // the asks this gather answers: those received before it started
    answers.assign(static_cast<size_t>(world_size), RankProgress{});
    answers[0] = {RankProgress::State::answered, my_progress_locked()};
    for (int q = 1; q < world_size; ++q) {
      if (gone[static_cast<size_t>(q)]) {
        answers[static_cast<size_t>(q)].state = RankProgress::State::left;
        continue;
      }
      send(peers[static_cast<size_t>(q)], kQuery, 0);
    }
    gather_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(answer_window_s));
  }
  bool gather_complete_locked() const {
    return std::none_of(answers.begin(), answers.end(), [](const RankProgress& p) {
      return p.state == RankProgress::State::no_answer;
    });
  }
  void finish_gather_locked() {
    gathering = false;
    for (int q = 1; q < world_size; ++q) {
      if (gone[static_cast<size_t>(q)]) continue;
      const Socket& s = peers[static_cast<size_t>(q)];
      for (int r = 0; r < world_size; ++r) {
        const RankProgress& p = answers[static_cast<size_t>(r)];
        const unsigned char kind = p.state == RankProgress::State::answered ? kAnswered
                                   : p.state == RankProgress::State::left   ? kLeft
                                                                            : kNoAnswer;
        send(s, kind, r, p.last_seq);
      }
      send(s, kEnd, world_size, answering[static_cast<size_t>(q)]);
    }
    publish_locked(answers, answering[0]);
  }
  void publish_locked(ProgressTable t, uint64_t answers_ask) {
    table = std::move(t);
    answered = std::max(answered, answers_ask);
    cv.notify_all();
  }

  // A progress message from `q` (rank 0: from rank q; others: from rank 0). False when it is
  // not one.
  bool on_progress_message(int q, unsigned char kind, int who, uint64_t value) {
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) {
      if (kind == kAsk) {
        // Answered by the next gather to start (the one in flight, if any, queried the ranks
        // before this ask).
        uint64_t& latest = asked[static_cast<size_t>(q)];
        latest = std::max(latest, value);
        ask_pending = true;
        return true;
      }
      if (kind == kProgress) {
        if (gathering && who == q && q < world_size)
          answers[static_cast<size_t>(q)] = {RankProgress::State::answered, value};
        return true;
      }
      return false;
    }
    if (kind == kQuery) {
      send(master, kProgress, rank, my_progress_locked());
      return true;
    }
    if (is_table_entry(kind)) {
      if (who >= 0 && who < world_size) {
        if (incoming.size() != static_cast<size_t>(world_size))
          incoming.assign(static_cast<size_t>(world_size), RankProgress{});
        incoming[static_cast<size_t>(who)] = {kind == kAnswered ? RankProgress::State::answered
                                              : kind == kLeft   ? RankProgress::State::left
                                                                : RankProgress::State::no_answer,
                                              value};
      }
      return true;
    }
    if (kind == kEnd) {
      incoming.resize(static_cast<size_t>(world_size));
      publish_locked(std::move(incoming), value);
      incoming.clear();
      return true;
    }
    return false;
  }

  void run() {
    run_loop();
    std::lock_guard<std::mutex> lock(mu);
    ended = true;
    cv.notify_all();
  }

  void run_loop() {
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
      int timeout_ms = -1;
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        if (ask_pending && !gathering) start_gather_locked();
        if (gathering && gather_complete_locked()) finish_gather_locked();
        if (gathering) {
          const auto left_ms =
              std::chrono::duration_cast<std::chrono::milliseconds>(gather_deadline - Clock::now())
                  .count();
          timeout_ms = static_cast<int>(std::max<int64_t>(0, left_ms) + 1);
        }
      }
      const int r = ::poll(fds.data(), fds.size(), timeout_ms);
      if (r < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) {
        unsigned char b[16];
        const ssize_t n = ::read(wake[0], b, sizeof(b));
        if (n <= 0 || std::find(b, b + n, kWakeStop) != b + n) return;  // stop
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0 || fds[i].fd < 0) continue;
        const int q = rank_of[i];
        const Socket& s = rank == 0 ? peers[static_cast<size_t>(q)] : master;
        unsigned char kind = 0;
        int who = q;
        uint64_t value = 0;
        const bool open = read(s, kind, who, value);
        if (open && kind == kGoodbye) {
          fds[i].fd = -1;  // q left cleanly: poll() ignores negative descriptors
          if (rank == 0) {
            std::lock_guard<std::mutex> lock(mu);
            gone[static_cast<size_t>(q)] = 1;
            if (gathering) answers[static_cast<size_t>(q)].state = RankProgress::State::left;
          }
          continue;
        }
        if (open && on_progress_message(q, kind, who, value)) continue;
        if (left.load()) return;  // this rank is leaving: its peers going away is expected
        std::string what;
        int dead = q;
        if (kind == kDied) {
          dead = who;
          what = fmt::format("rank {} died (rank 0 lost its connection)", who);
        } else if (kind == kFailed) {
          what = fmt::format("rank {} ({}) failed and left the job", q, s.peer());
        } else {
          what = fmt::format(
              "rank {} ({}) ended unexpectedly: its connection closed without a goodbye (crash, "
              "kill signal or out-of-memory kill)",
              q, s.peer());
        }
        if (rank == 0) {
          for (int p = 1; p < world_size; ++p)
            if (p != dead) send(peers[static_cast<size_t>(p)], kDied, dead);
        }
        fail(what +
             "; collectives with it cannot complete, so this rank stops too. The log of rank " +
             std::to_string(dead) + " says why it ended.");
        return;
      }
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        if (gathering && (gather_complete_locked() || Clock::now() >= gather_deadline))
          finish_gather_locked();
      }
    }
  }

  void wake_thread(unsigned char why) {
    if (wake[1] >= 0) (void)!::write(wake[1], &why, 1);
  }

  void stop_thread() {
    wake_thread(kWakeStop);
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }

  std::optional<ProgressTable> ask(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu);
    if (world_size == 1)
      return ProgressTable{{RankProgress::State::answered, my_progress_locked()}};
    if (ended || !thread.joinable()) return std::nullopt;
    const uint64_t ask = ++asks_made;
    if (rank == 0) {
      asked[0] = ask;
      ask_pending = true;
      wake_thread(kWakeAsk);
    } else {
      send(master, kAsk, rank, ask);
    }
    const bool got = cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                 [&] { return answered >= ask || ended; });
    if (!got || answered < ask) return std::nullopt;
    return table;
  }
};

PeerWatch::PeerWatch(const RendezvousOptions& options, int rank, int world_size,
                     OnFailure on_failure)
    : impl_(std::make_shared<Impl>()) {
  impl_->rank = rank;
  impl_->world_size = world_size;
  impl_->on_failure = on_failure ? std::move(on_failure) : OnFailure(exit_on_failure);
  detail::RendezvousLinks links =
      detail::rendezvous_links(options, rank, world_size, {}, RendezvousPurpose::watch);
  impl_->peers = std::move(links.peers);
  impl_->master = std::move(links.master);
  impl_->gone.assign(static_cast<size_t>(world_size), 0);
  impl_->asked.assign(static_cast<size_t>(world_size), 0);
  impl_->answering.assign(static_cast<size_t>(world_size), 0);
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
}

void PeerWatch::leave(bool failed) {
  if (impl_->left.exchange(true)) return;
  const unsigned char kind = failed ? kFailed : kGoodbye;
  if (impl_->rank == 0) {
    for (size_t q = 1; q < impl_->peers.size(); ++q) impl_->send(impl_->peers[q], kind, 0);
  } else {
    impl_->send(impl_->master, kind, impl_->rank);
  }
}

void PeerWatch::abandon() {
  impl_->left.store(true);
  impl_->stop_thread();
  std::lock_guard<std::mutex> lock(impl_->send_mu);
  for (Socket& s : impl_->peers) s.close();
  impl_->master.close();
}

void PeerWatch::set_progress(std::function<uint64_t()> progress) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->progress = std::move(progress);
}

void PeerWatch::set_answer_window(double seconds) {
  STOKER_CHECK(seconds > 0, "PeerWatch: answer window ", seconds, " s must be positive");
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->answer_window_s = seconds;
}

std::optional<ProgressTable> PeerWatch::ask_progress(double timeout_s) const {
  return impl_->ask(timeout_s);
}

PeerWatch::ProgressQuery PeerWatch::progress_query() const {
  return [weak = std::weak_ptr<Impl>(impl_)](double timeout_s) -> std::optional<ProgressTable> {
    const std::shared_ptr<Impl> impl = weak.lock();
    if (!impl) return std::nullopt;
    return impl->ask(timeout_s);
  };
}

void PeerWatch::exit_on_failure(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace stoker::dist
