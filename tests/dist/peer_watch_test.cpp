// PeerWatch on localhost with threads as ranks: a rank that vanishes without a goodbye (what
// the kernel does for a killed process) makes every other rank fail with a message naming it;
// ranks that leave normally fail nobody; a rank that leaves while failing fails the others.
// Progress queries: every rank's answer reaches every asker, never older than the ask; with real
// processes under dist::launch, a stopped rank is reported as not answering, and a stopped rank
// 0 gives no table.
#include "dist/peer_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist_test_util.h"
#include "stoker/dist/env.h"
#include "stoker/dist/launcher.h"

namespace stoker::dist {
namespace {

using namespace std::chrono_literals;

// A world of `n` watches, each recording the failure message it gets.
struct World {
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::unique_ptr<PeerWatch>> watch;

  explicit World(int n) : failures(n), watch(n) {
    const RendezvousOptions o{"127.0.0.1", test::free_port(), 20.0};
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        watch[r] = std::make_unique<PeerWatch>(o, r, n, [this, r](const std::string& m) {
          std::lock_guard<std::mutex> lock(mu);
          failures[r] = m;
        });
      });
    for (auto& t : threads) t.join();
  }

  std::string failure(int r) {
    std::lock_guard<std::mutex> lock(mu);
    return failures[r];
  }
  // Waits up to 5 s for rank r's failure.
  std::string wait_failure(int r) {
    for (auto until = std::chrono::steady_clock::now() + 5s;
         std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(5ms))
      if (!failure(r).empty()) return failure(r);
    return failure(r);
  }
};

TEST(PeerWatchTest, ARankThatVanishesFailsEveryOtherRankNamingIt) {
  World w(3);
  const auto t0 = std::chrono::steady_clock::now();
  w.watch[1]->abandon();
  const std::string f0 = w.wait_failure(0), f2 = w.wait_failure(2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "detection must be prompt";
  EXPECT_NE(f0.find("rank 0 of 3"), std::string::npos) << f0;
  EXPECT_NE(f0.find("rank 1"), std::string::npos) << f0;
  EXPECT_NE(f0.find("ended unexpectedly"), std::string::npos) << f0;
  EXPECT_NE(f2.find("rank 2 of 3"), std::string::npos) << f2;
  EXPECT_NE(f2.find("rank 1 died"), std::string::npos) << f2;
  EXPECT_TRUE(w.failure(1).empty());  // the vanished rank itself is not told anything
}

TEST(PeerWatchTest, WhenRankZeroVanishesTheOthersFail) {
  World w(3);
  w.watch[0]->abandon();
  for (int r : {1, 2}) {
    const std::string f = w.wait_failure(r);
    EXPECT_NE(f.find("rank 0 ("), std::string::npos) << f;
    EXPECT_NE(f.find("ended unexpectedly"), std::string::npos) << f;
  }
}

TEST(PeerWatchTest, RanksThatLeaveNormallyFailNobody) {
  World w(3);
  // Rank 2 finishes first (its destructor says goodbye); the others run on, then leave too.
  w.watch[2].reset();
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(w.failure(0).empty()) << w.failure(0);
  EXPECT_TRUE(w.failure(1).empty()) << w.failure(1);
  w.watch[1].reset();
  w.watch[0].reset();
  std::this_thread::sleep_for(100ms);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(w.failure(r).empty()) << r << ": " << w.failure(r);
}

TEST(PeerWatchTest, ARankLeavingWithAFailureFailsTheOthers) {
  World w(2);
  w.watch[1]->leave(/*failed=*/true);
  const std::string f = w.wait_failure(0);
  EXPECT_NE(f.find("rank 1"), std::string::npos) << f;
  EXPECT_NE(f.find("failed and left"), std::string::npos) << f;
}

TEST(PeerWatchTest, OneRankNeedsNoConnections) {
  const RendezvousOptions o{"127.0.0.1", test::free_port(), 5.0};
  PeerWatch alone(o, 0, 1, [](const std::string& m) { ADD_FAILURE() << m; });
}

using State = RankProgress::State;

TEST(PeerWatchProgressTest, EveryAskerGetsEveryRanksLastSequenceNumber) {
  World w(4);
  for (int r = 0; r < 4; ++r) w.watch[r]->set_progress([r] { return uint64_t(10 + r); });
  // Ranks 0, 2 and 3 ask at the same time (what the watchdogs of the waiting ranks do).
  std::vector<std::optional<ProgressTable>> got(4);
  std::vector<std::thread> askers;
  for (int r : {0, 2, 3}) askers.emplace_back([&, r] { got[r] = w.watch[r]->ask_progress(5.0); });
  for (auto& t : askers) t.join();
  for (int r : {0, 2, 3}) {
    ASSERT_TRUE(got[r].has_value()) << "rank " << r << " got no table";
    ASSERT_EQ(got[r]->size(), 4u);
    for (int q = 0; q < 4; ++q) {
      EXPECT_EQ((*got[r])[q].state, State::answered) << r << " " << q;
      EXPECT_EQ((*got[r])[q].last_seq, uint64_t(10 + q)) << r << " " << q;
    }
  }
  // A later ask sees new progress.
  w.watch[1]->set_progress([] { return uint64_t(99); });
  const auto again = w.watch[3]->ask_progress(5.0);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ((*again)[1].last_seq, 99u);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(w.failure(r).empty()) << w.failure(r);
}

// An ask that reaches rank 0 while a gather is in flight is not answered by that gather (it
// queried the ranks before the ask) but by the next: the asker sees progress made after it
// asked. Rank 1 answers slowly (its progress function sleeps on its watch thread), so the first
// gather is still in flight when rank 2 moves on and rank 3 asks.
TEST(PeerWatchProgressTest, AnAskDuringAGatherIsAnsweredByALaterOne) {
  World w(4);
  std::atomic<uint64_t> rank2{20};
  w.watch[1]->set_progress([] {
    std::this_thread::sleep_for(300ms);
    return uint64_t(11);
  });
  w.watch[2]->set_progress([&] { return rank2.load(); });
  std::optional<ProgressTable> first;
  std::thread asker([&] { first = w.watch[0]->ask_progress(5.0); });
  std::this_thread::sleep_for(100ms);  // rank 0's gather waits for rank 1
  rank2 = 21;
  const std::optional<ProgressTable> second = w.watch[3]->ask_progress(5.0);
  asker.join();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ((*second)[2].last_seq, 21u) << "rank 3 got progress from before its ask";
  EXPECT_EQ((*second)[1].state, State::answered);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(w.failure(r).empty()) << w.failure(r);
}

TEST(PeerWatchProgressTest, ARankThatLeftIsReportedAsLeft) {
  World w(3);
  w.watch[2].reset();  // goodbye
  std::this_thread::sleep_for(100ms);
  const auto t = w.watch[1]->ask_progress(5.0);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ((*t)[2].state, State::left);
  EXPECT_EQ((*t)[0].state, State::answered);
}

TEST(PeerWatchProgressTest, TheQueryOfADestroyedWatchAnswersNothingAtOnce) {
  World w(2);
  const PeerWatch::ProgressQuery q = w.watch[1]->progress_query();
  EXPECT_TRUE(q(5.0).has_value());
  w.watch[1].reset();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(q(5.0).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

TEST(PeerWatchProgressTest, OneRankAnswersItself) {
  const RendezvousOptions o{"127.0.0.1", test::free_port(), 5.0};
  PeerWatch alone(o, 0, 1, [](const std::string& m) { ADD_FAILURE() << m; });
  alone.set_progress([] { return uint64_t(3); });
  const auto t = alone.ask_progress();
  ASSERT_TRUE(t.has_value());
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].last_seq, 3u);
}

// Real processes (a stopped process cannot be a thread): `stopped` raises SIGSTOP, rank 1 asks
// and writes what it got to <dir>/answer, then exits with status 3 so that the launcher ends
// the job.
std::string run_stopped_rank_job(int stopped, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  fs::create_directories(dir);
  LaunchOptions o;
  o.nproc_per_node = 3;
  o.master_port = 0;
  o.program = fs::read_symlink("/proc/self/exe").string();
  o.args = {"--gtest_filter=PeerWatchChild.StoppedRank", "--gtest_brief=1"};
  o.extra_env = {{"STOKER_TEST_PEER_WATCH_CHILD", std::to_string(stopped)},
                 {"STOKER_TEST_PEER_WATCH_DIR", dir.string()}};
  o.kill_grace_s = 0.5;
  o.forward_stderr = false;
  o.quiet = true;
  const LaunchResult r = launch(o);
  EXPECT_EQ(r.failed_rank, 1) << r.failure;
  std::ifstream in(dir / "answer");
  std::string answer((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove_all(dir);
  return answer;
}

TEST(PeerWatchProgressTest, AStoppedRankIsReportedAsNotAnswering) {
  const std::string a = run_stopped_rank_job(
      2, std::filesystem::temp_directory_path() / ("stoker_pw_" + std::to_string(::getpid())));
  // Rank 0 waited its 0.5 s answer window for rank 2, then sent the table.
  EXPECT_NE(a.find("table 0:answered:10 1:answered:11 2:no_answer"), std::string::npos) << a;
  const double s = std::strtod(a.substr(a.find("after ") + 6).c_str(), nullptr);
  EXPECT_GE(s, 0.4) << a;
  EXPECT_LT(s, 2.0) << a;
}

TEST(PeerWatchProgressTest, AStoppedRankZeroSendsNoTable) {
  const std::string a = run_stopped_rank_job(
      0, std::filesystem::temp_directory_path() / ("stoker_pw0_" + std::to_string(::getpid())));
  EXPECT_NE(a.find("no table"), std::string::npos) << a;
}

// What the launched processes run (skipped unless the tests above started them).
TEST(PeerWatchChild, StoppedRank) {
  const char* stopped_env = std::getenv("STOKER_TEST_PEER_WATCH_CHILD");
  if (!stopped_env) GTEST_SKIP() << "run by PeerWatchProgressTest's stopped-rank tests";
  const int stopped = std::atoi(stopped_env);
  const DistEnv e = read_env();
  PeerWatch w({e.master_addr, e.rendezvous_port, 30.0}, e.rank, e.world_size,
              [](const std::string&) { std::_Exit(4); });
  w.set_progress([r = e.rank] { return uint64_t(10 + r); });
  w.set_answer_window(0.5);
  if (e.rank == stopped) std::raise(SIGSTOP);  // until the launcher kills it
  if (e.rank != 1) {
    std::this_thread::sleep_for(30s);  // the launcher kills it when rank 1 exits
    std::_Exit(0);
  }
  std::this_thread::sleep_for(300ms);  // the stopped rank has stopped
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<ProgressTable> t = w.ask_progress(1.5);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out = "no table";
  if (t) {
    out = "table";
    for (size_t q = 0; q < t->size(); ++q) {
      const RankProgress& p = (*t)[q];
      out += " " + std::to_string(q) + ":" +
             (p.state == State::answered ? "answered:" + std::to_string(p.last_seq)
              : p.state == State::left   ? std::string("left")
                                         : std::string("no_answer"));
    }
  }
  std::ofstream(std::filesystem::path(std::getenv("STOKER_TEST_PEER_WATCH_DIR")) / "answer")
      << out << " after " << s << "\n";
  w.leave(false);  // rank 0 goes on: the launcher reports this rank's status 3, not its failure
  std::_Exit(3);
}

}  // namespace
}  // namespace stoker::dist
