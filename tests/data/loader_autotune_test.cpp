// The loader's autotuning policy on made-up measurement windows (no threads, no clock): what it
// decides for a slow, a fast and a bursty producer, that it respects fixed settings and bounds,
// and that repeated windows from a simulated pipeline converge without oscillating.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "data/loader_autotune.h"
#include "stoker/data/loader.h"

using stoker::data::autotune_policy;
using stoker::data::AutotuneLimits;
using stoker::data::Loader;
using stoker::data::LoaderTuning;
using stoker::data::LoaderWindow;

namespace {

// A steady pipeline measured over one window: workers cost `cost` thread-seconds per sample,
// the consumer needs 1/demand seconds per sample of its own time. When the workers' capacity
// (threads / cost) is below the demand, the consumer waits for the difference.
LoaderWindow simulate(int threads, double cost, double demand, int64_t samples = 4096) {
  const double capacity = threads / cost;
  LoaderWindow w;
  w.samples = samples;
  w.samples_made = samples;
  w.worker_s = cost * static_cast<double>(samples);
  const double busy = static_cast<double>(samples) / demand;
  w.seconds = capacity >= demand ? busy : static_cast<double>(samples) / capacity;
  w.consumer_wait_s = w.seconds - busy;
  return w;
}

int expected_threads(double cost, double demand, int max_threads) {
  return std::min(max_threads, static_cast<int>(std::ceil(demand * cost * Loader::kHeadroom)));
}

TEST(LoaderAutotuneTest, SlowWorkersGetTheThreadsTheDemandNeeds) {
  const AutotuneLimits limits{.max_threads = 16, .max_prefetch = 8};
  // 4 ms per sample, the consumer wants 2000 samples/s: 8 threads' worth, 10 with headroom.
  std::string why;
  const LoaderTuning t = autotune_policy(simulate(2, 0.004, 2000), {2, 4}, limits, &why);
  EXPECT_EQ(t.threads, 10) << why;
  EXPECT_EQ(t.prefetch, 4);
  EXPECT_NE(why.find("more threads"), std::string::npos) << why;
}

TEST(LoaderAutotuneTest, InputBoundAtTheMaximumChangesNothing) {
  const AutotuneLimits limits{.max_threads = 16, .max_prefetch = 8};
  std::string why;
  // A consumer that only waits (a throughput benchmark) wants more than 16 threads can make.
  const LoaderTuning t = autotune_policy(simulate(16, 0.004, 1e6), {16, 4}, limits, &why);
  EXPECT_EQ(t.threads, 16);
  EXPECT_EQ(t.prefetch, 4);
  EXPECT_NE(why.find("input-bound"), std::string::npos) << why;
}

TEST(LoaderAutotuneTest, FastWorkersGiveThreadsBackGradually) {
  const AutotuneLimits limits{.max_threads = 16, .max_prefetch = 8};
  // 1 ms per sample, the consumer takes 500 samples/s: one thread would do.
  const LoaderWindow w = simulate(16, 0.001, 500);
  ASSERT_EQ(w.consumer_wait_s, 0.0);
  std::string why;
  LoaderTuning t = autotune_policy(w, {16, 4}, limits, &why);
  EXPECT_EQ(t.threads, 12) << why;  // at most a quarter per window
  EXPECT_NE(why.find("fewer threads"), std::string::npos) << why;
  for (int i = 0; i < 20; ++i) t = autotune_policy(simulate(t.threads, 0.001, 500), t, limits);
  EXPECT_EQ(t.threads, 1);
  EXPECT_EQ(t.prefetch, 4);
}

TEST(LoaderAutotuneTest, BurstyProductionDeepensThePrefetchThenAddsThreads) {
  const AutotuneLimits limits{.max_threads = 16, .max_prefetch = 6};
  // Capacity 8 / 1 ms = 8000/s against a demand of ~1050/s, yet the consumer waited 5 %:
  // batches come in bursts, so a deeper queue absorbs them.
  const LoaderWindow w{.seconds = 1.0,
                       .samples = 1000,
                       .consumer_wait_s = 0.05,
                       .worker_s = 1.0,
                       .samples_made = 1000};
  std::string why;
  const LoaderTuning t = autotune_policy(w, {8, 4}, limits, &why);
  EXPECT_EQ(t.threads, 8);
  EXPECT_EQ(t.prefetch, 5) << why;
  EXPECT_NE(why.find("deeper prefetch"), std::string::npos) << why;
  // At the depth bound (the pinned-memory budget) it adds a thread instead.
  const LoaderTuning u = autotune_policy(w, {8, 6}, limits, &why);
  EXPECT_EQ(u.prefetch, 6);
  EXPECT_EQ(u.threads, 9) << why;
}

TEST(LoaderAutotuneTest, FixedSettingsAreNeverChanged) {
  const AutotuneLimits fixed{
      .max_threads = 3, .max_prefetch = 2, .tune_threads = false, .tune_prefetch = false};
  const LoaderWindow bursty{.seconds = 1.0,
                            .samples = 1000,
                            .consumer_wait_s = 0.05,
                            .worker_s = 1.0,
                            .samples_made = 1000};
  for (const LoaderWindow& w :
       {simulate(3, 0.004, 2000), simulate(3, 0.001, 100), simulate(3, 0.004, 1e6), bursty}) {
    const LoaderTuning t = autotune_policy(w, {3, 2}, fixed);
    EXPECT_EQ(t.threads, 3);
    EXPECT_EQ(t.prefetch, 2);
  }
  // Threads fixed, depth automatic: only the depth moves.
  const AutotuneLimits depth_only{.max_threads = 3, .max_prefetch = 8, .tune_threads = false};
  const LoaderTuning t = autotune_policy(bursty, {3, 4}, depth_only);
  EXPECT_EQ(t.threads, 3);
  EXPECT_EQ(t.prefetch, 5);
  const LoaderTuning u = autotune_policy(simulate(3, 0.001, 100), {3, 4}, depth_only);
  EXPECT_EQ(u.threads, 3);
}

TEST(LoaderAutotuneTest, EmptyWindowsChangeNothing) {
  const AutotuneLimits limits{.max_threads = 16, .max_prefetch = 8};
  std::string why;
  EXPECT_EQ(autotune_policy(LoaderWindow{}, {7, 3}, limits, &why).threads, 7);
  EXPECT_NE(why.find("too little"), std::string::npos) << why;
  const LoaderWindow no_made{.seconds = 1, .samples = 10, .consumer_wait_s = 0.9};
  EXPECT_EQ(autotune_policy(no_made, {7, 3}, limits).threads, 7);
}

// Windows measured on the simulated pipeline, fed back: the thread count settles at what the
// demand needs (or the maximum) from either side and then stays put.
TEST(LoaderAutotuneTest, ConvergesWithoutOscillating) {
  const AutotuneLimits limits{.max_threads = 16, .max_prefetch = 8};
  struct Case {
    double cost, demand;
  };
  for (const Case c : {Case{0.004, 2000}, Case{0.0006, 20000}, Case{0.002, 300},
                       Case{0.004, 100000}, Case{0.001, 7000}}) {
    const int want = std::max(1, expected_threads(c.cost, c.demand, limits.max_threads));
    for (const int start : {1, 4, 16}) {
      LoaderTuning t{start, 4};
      for (int i = 0; i < 30; ++i)
        t = autotune_policy(simulate(t.threads, c.cost, c.demand), t, limits);
      EXPECT_EQ(t.threads, want) << "cost " << c.cost << " demand " << c.demand << " start "
                                 << start;
      // Settled: ten more windows change nothing.
      for (int i = 0; i < 10; ++i) {
        const LoaderTuning again =
            autotune_policy(simulate(t.threads, c.cost, c.demand), t, limits);
        EXPECT_EQ(again.threads, t.threads);
        EXPECT_EQ(again.prefetch, t.prefetch);
      }
    }
  }
}

}  // namespace
