// PeerWatch on localhost with threads as ranks: a rank that vanishes without a goodbye (what
// the kernel does for a killed process) makes every other rank fail with a message naming it;
// ranks that leave normally fail nobody; a rank that leaves while failing fails the others.
#include "stoker/dist/peer_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist_test_util.h"

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

}  // namespace
}  // namespace stoker::dist
