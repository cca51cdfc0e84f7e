#include "stoker/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "stoker/core/error.h"

namespace stoker::data {
namespace {

std::vector<int64_t> vec(std::span<const int64_t> s) { return {s.begin(), s.end()}; }

TEST(Sampler, SameSeedSameOrderAndEpochsDiffer) {
  Sampler a(100, {.seed = 5}), b(100, {.seed = 5}), c(100, {.seed = 6});
  EXPECT_EQ(vec(a.indices()), vec(b.indices()));
  EXPECT_NE(vec(a.indices()), vec(c.indices()));
  const auto e0 = vec(a.indices());
  a.set_epoch(1);
  EXPECT_NE(vec(a.indices()), e0);
  a.set_epoch(0);
  EXPECT_EQ(vec(a.indices()), e0);  // epoch order is a pure function of (seed, epoch)
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
}

TEST(Sampler, NoShuffleIsIdentity) {
  Sampler s(7, {.shuffle = false});
  EXPECT_EQ(vec(s.indices()), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(Sampler, DropShardsAreDisjointEqualAndCoverAllButTheTail) {
  for (int world : {1, 2, 3, 4, 7}) {
    const int64_t n = 101;
    std::set<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      Sampler s(n, {.seed = 3, .rank = rank, .world_size = world, .tail = ShardTail::drop});
      s.set_epoch(2);
      EXPECT_EQ(s.num_samples(), n / world);
      for (int64_t i : s.indices()) EXPECT_TRUE(seen.insert(i).second) << "duplicate " << i;
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n / world * world);
  }
}

TEST(Sampler, DivisibleDatasetShardsPartitionIt) {
  std::set<int64_t> seen;
  for (int rank = 0; rank < 4; ++rank) {
    Sampler s(40, {.seed = 9, .rank = rank, .world_size = 4});
    for (int64_t i : s.indices()) EXPECT_TRUE(seen.insert(i).second);
  }
  EXPECT_EQ(seen.size(), 40u);
}

TEST(Sampler, PadMatchesDistributedSampler) {
  const int64_t n = 10;
  const int world = 4;
  Sampler r0(n, {.seed = 1, .rank = 0, .world_size = world});
  const std::vector<int64_t> perm = r0.permutation(0);
  EXPECT_EQ(r0.total_size(), 12);  // ceil(10 / 4) * 4
  EXPECT_EQ(r0.num_samples(), 3);
  // indices += indices[:padding]; rank r takes indices[r::world].
  std::vector<int64_t> padded = perm;
  padded.push_back(perm[0]);
  padded.push_back(perm[1]);
  std::set<int64_t> covered;
  for (int rank = 0; rank < world; ++rank) {
    Sampler s(n, {.seed = 1, .rank = rank, .world_size = world});
    std::vector<int64_t> expect;
    for (size_t k = static_cast<size_t>(rank); k < padded.size(); k += world) {
      expect.push_back(padded[k]);
    }
    EXPECT_EQ(vec(s.indices()), expect) << "rank " << rank;
    covered.insert(s.indices().begin(), s.indices().end());
  }
  EXPECT_EQ(covered.size(), static_cast<size_t>(n));
}

TEST(Sampler, PadRepeatsWhenWorldExceedsDataset) {
  // DistributedSampler repeats the permutation as often as needed.
  const int world = 5;
  std::vector<int64_t> all;
  for (int rank = 0; rank < world; ++rank) {
    Sampler s(2, {.shuffle = false, .rank = rank, .world_size = world});
    ASSERT_EQ(s.num_samples(), 1);
    all.push_back(s.indices()[0]);
  }
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 0, 1, 0}));
}

TEST(Sampler, Batches) {
  Sampler keep(10, {.shuffle = false, .batch_size = 4});
  ASSERT_EQ(keep.num_batches(), 3);
  EXPECT_EQ(vec(keep.batch(2)), (std::vector<int64_t>{8, 9}));
  Sampler drop(10, {.shuffle = false, .batch_size = 4, .drop_last = true});
  ASSERT_EQ(drop.num_batches(), 2);
  EXPECT_EQ(vec(drop.batch(1)), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_THROW(drop.batch(2), Error);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler(0, {}), Error);
  EXPECT_THROW(Sampler(10, {.rank = 2, .world_size = 2}), Error);
  EXPECT_THROW(Sampler(3, {.world_size = 4, .tail = ShardTail::drop}), Error);
  EXPECT_THROW(Sampler(3, {.batch_size = 4, .drop_last = true}), Error);
  EXPECT_THROW(Sampler(3, {.batch_size = 0}), Error);
}

// ---------------------------------------------------------------------------------------------
// Elastic resume: continuing an epoch at another world size.

using Counts = std::map<int64_t, int64_t>;  // sample -> times delivered

struct Job {
  int64_t n;
  ShardTail tail;
  int64_t batch;
  bool drop_last;
  uint64_t seed = 4;
};

SamplerOptions options_for(const Job& s, int rank, int world) {
  return {.seed = s.seed,
          .rank = rank,
          .world_size = world,
          .tail = s.tail,
          .batch_size = s.batch,
          .drop_last = s.drop_last};
}

// A job of `world` ranks on epoch `epoch`, every rank continued at `start` (0: a plain epoch),
// delivering batches [first, until) (until = -1: to the epoch's end). Adds what it delivered to
// `counts`; returns the progress it reached (the same on every rank, checked) and checks that
// every rank has the same batches, of the same sizes.
int64_t run_job(const Job& s, int world, int64_t epoch, int64_t start, int64_t until,
                Counts& counts, int64_t* batches_out = nullptr) {
  int64_t progress = -1, batches = -1;
  std::vector<int64_t> sizes;
  for (int rank = 0; rank < world; ++rank) {
    Sampler sm(s.n, options_for(s, rank, world));
    if (start > 0) sm.set_continuation(epoch, start);
    sm.set_epoch(epoch);
    const int64_t first = sm.first_batch(epoch);
    EXPECT_EQ(first, sm.num_batches() - sm.continued_batches(start));
    const int64_t end = until < 0 ? sm.num_batches() : std::max(first, until);
    std::vector<int64_t> my_sizes;
    for (int64_t b = first; b < end; ++b) {
      const auto batch = sm.batch(b);
      my_sizes.push_back(static_cast<int64_t>(batch.size()));
      for (int64_t i : batch) counts[i] += 1;
    }
    if (rank == 0) {
      sizes = my_sizes;
      batches = sm.num_batches() - first;
      progress = sm.progress_after(start, end);
    } else {
      EXPECT_EQ(my_sizes, sizes) << "rank " << rank << " of " << world;
      EXPECT_EQ(sm.num_batches() - first, batches) << "rank " << rank;
      EXPECT_EQ(sm.progress_after(start, end), progress) << "rank " << rank;
    }
  }
  if (batches_out) *batches_out = batches;
  return progress;
}

// What the model says a job of `world` ranks starting at progress `start` delivers when each of
// its ranks delivers `per_rank` samples: the first per_rank * world entries of P[start, N)
// padded from P's start (pad) or cut (drop) to a multiple of world.
void add_model(const Job& s, const std::vector<int64_t>& perm, int world, int64_t start,
               int64_t per_rank, Counts& counts) {
  const int64_t m = s.n - start;
  const int64_t share = s.tail == ShardTail::pad ? (m + world - 1) / world : m / world;
  ASSERT_LE(per_rank, share);
  std::vector<int64_t> order(perm.begin() + start, perm.end());
  for (size_t k = 0; static_cast<int64_t>(order.size()) < share * world; ++k) {
    order.push_back(perm[k % perm.size()]);
  }
  for (int64_t j = 0; j < per_rank * world; ++j) counts[order[static_cast<size_t>(j)]] += 1;
}

// Samples per rank delivered by batches [first, end) of a job continued at `start`.
int64_t per_rank_samples(const Job& s, int world, int64_t start, int64_t first, int64_t end) {
  const int64_t m = s.n - start;
  const int64_t share = s.tail == ShardTail::pad ? (m + world - 1) / world : m / world;
  return std::min((end - first) * s.batch, share);
}

std::string describe(const Job& s, int w, int w2, int64_t b) {
  return "N " + std::to_string(s.n) + (s.tail == ShardTail::pad ? " pad" : " drop") + " B " +
         std::to_string(s.batch) + (s.drop_last ? " drop_last" : "") + " W " + std::to_string(w) +
         " -> " + std::to_string(w2) + " at batch " + std::to_string(b);
}

// The old ranks' delivered prefix plus the new ranks' continuation is exactly the epoch: each
// sample once when N - k is divisible by W' (and the old run reached no padding, which happens
// only at an epoch's very end, and the continuation drops no partial batch: drop_last); with
// pad every sample at least once, the extra entries being the continuation's padding, which
// repeats the start of the permutation; with drop the cut tail (fewer than W' samples) and with
// drop_last the continuation's partial last batches are all that is missing. Every new rank has
// the same batches; the next epoch is a plain W'-rank epoch.
TEST(SamplerContinuation, ThePrefixAndTheContinuationAreTheEpoch) {
  const int64_t epoch = 3;
  int exact = 0, padded = 0, lossy = 0;
  for (const int64_t n : {37, 40, 400}) {
    for (const ShardTail tail : {ShardTail::pad, ShardTail::drop}) {
      for (const bool drop_last : {false, true}) {
        const Job s{.n = n, .tail = tail, .batch = n == 400 ? 16 : 3, .drop_last = drop_last};
        const std::vector<int64_t> perm = Sampler(n, options_for(s, 0, 1)).permutation(epoch);
        for (const auto [w, w2] : {std::pair{2, 1}, {1, 3}, {4, 2}, {3, 5}}) {
          const int64_t nb = Sampler(n, options_for(s, 0, w)).num_batches();
          for (const int64_t b : {int64_t{0}, int64_t{1}, nb / 2, nb - 1, nb}) {
            SCOPED_TRACE(describe(s, w, w2, b));
            Counts got, want;
            const int64_t k = run_job(s, w, epoch, 0, b, got);
            const int64_t d = per_rank_samples(s, w, 0, 0, b);
            EXPECT_EQ(k, std::min(d * w, n));
            add_model(s, perm, w, 0, d, want);
            int64_t nbc = 0;
            const int64_t p = run_job(s, w2, epoch, k, -1, got, &nbc);
            const int64_t d2 = per_rank_samples(s, w2, k, 0, nbc);
            EXPECT_EQ(p, std::min(k + d2 * w2, n));
            add_model(s, perm, w2, k, d2, want);
            EXPECT_EQ(got, want);
            // The strong statements.
            const int64_t m = n - k;
            const int64_t share = tail == ShardTail::pad ? (m + w2 - 1) / w2 : m / w2;
            const bool whole_continuation = d2 == share;  // no partial batch dropped
            int64_t entries = 0;
            for (const auto& [i, c] : got) entries += c;
            if (d * w <= n && m % w2 == 0 && whole_continuation) {
              ++exact;
              ASSERT_EQ(static_cast<int64_t>(got.size()), n);
              for (const auto& [i, c] : got) ASSERT_EQ(c, 1) << "sample " << i;
            } else if (tail == ShardTail::pad && whole_continuation) {
              ++padded;
              EXPECT_EQ(static_cast<int64_t>(got.size()), n);  // every sample
              if (d * w <= n) {
                // The extra entries are the continuation's padding: P[0, share * W' - m).
                Counts extra;
                for (int64_t j = 0; j < share * w2 - m; ++j) extra[perm[j % n]] += 1;
                for (const auto& [i, c] : got) {
                  const auto it = extra.find(i);
                  EXPECT_EQ(c, 1 + (it == extra.end() ? 0 : it->second)) << "sample " << i;
                }
              }
            } else {
              ++lossy;  // drop's tail or drop_last's partial batches: nothing is delivered twice
              if (d * w <= n && share * w2 <= m) {
                for (const auto& [i, c] : got) EXPECT_EQ(c, 1) << "sample " << i;
              }
              if (tail == ShardTail::drop) EXPECT_LE(entries, n);
            }
            // The next epoch is a plain W'-rank epoch.
            for (int rank = 0; rank < w2; ++rank) {
              Sampler cont(n, options_for(s, rank, w2)), fresh(n, options_for(s, rank, w2));
              cont.set_continuation(epoch, k);
              cont.set_epoch(epoch + 1);
              fresh.set_epoch(epoch + 1);
              EXPECT_EQ(cont.first_batch(epoch + 1), 0);
              EXPECT_EQ(vec(cont.indices()), vec(fresh.indices()));
            }
          }
        }
      }
    }
  }
  EXPECT_GT(exact, 20);
  EXPECT_GT(padded, 20);
  EXPECT_GT(lossy, 20);
}

// A continued epoch checkpointed again continues at yet another world size: W -> W' -> W''
// still delivers the epoch exactly (pad, no drop_last: each sample once plus the last stage's
// padding; the earlier stages reach none before the epoch's end).
TEST(SamplerContinuation, ContinuingTwiceStillCoversTheEpoch) {
  const int64_t epoch = 1;
  int checked = 0;
  for (const int64_t n : {37, 40, 400}) {
    const Job s{.n = n, .tail = ShardTail::pad, .batch = 4, .drop_last = false};
    const std::vector<int64_t> perm = Sampler(n, options_for(s, 0, 1)).permutation(epoch);
    for (const auto [w, w2, w3] : {std::tuple{2, 1, 3}, {1, 3, 2}, {4, 2, 5}, {3, 5, 1}}) {
      const int64_t nb = Sampler(n, options_for(s, 0, w)).num_batches();
      for (const int64_t b : {int64_t{1}, nb / 2}) {
        SCOPED_TRACE(describe(s, w, w2, b) + " -> " + std::to_string(w3));
        Counts got;
        const int64_t k = run_job(s, w, epoch, 0, b, got);
        // The W'-job delivers half of its continuation, then stops.
        int64_t nbc = 0;
        {
          Counts ignored;
          run_job(s, w2, epoch, k, -1, ignored, &nbc);
        }
        const int64_t nb2 = Sampler(n, options_for(s, 0, w2)).num_batches();
        const int64_t stop = nb2 - nbc + nbc / 2;
        const int64_t p = run_job(s, w2, epoch, k, stop, got);
        EXPECT_EQ(p, std::min(k + (nbc / 2) * s.batch * w2, n));
        const int64_t p2 = run_job(s, w3, epoch, p, -1, got);
        EXPECT_EQ(p2, n);
        const int64_t m = n - p;
        const int64_t pad = (m + w3 - 1) / w3 * w3 - m;
        Counts extra;
        for (int64_t j = 0; j < pad; ++j) extra[perm[j % n]] += 1;
        ASSERT_EQ(static_cast<int64_t>(got.size()), n);
        for (const auto& [i, c] : got) {
          const auto it = extra.find(i);
          EXPECT_EQ(c, 1 + (it == extra.end() ? 0 : it->second)) << "sample " << i;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 24);
}

// At the world size that reported the progress, continuing is the exact resume: a plain epoch
// from its batch on (padding included), and a continued epoch from where it stood.
TEST(SamplerContinuation, AtTheSameWorldSizeContinuingIsTheExactResume) {
  for (const ShardTail tail : {ShardTail::pad, ShardTail::drop}) {
    for (const bool drop_last : {false, true}) {
      const Job s{.n = 37, .tail = tail, .batch = 3, .drop_last = drop_last};
      for (const int w : {1, 2, 3, 5}) {
        for (int rank = 0; rank < w; ++rank) {
          Sampler plain(s.n, options_for(s, rank, w));
          plain.set_epoch(2);
          for (int64_t b = 0; b <= plain.num_batches(); ++b) {
            Sampler cont(s.n, options_for(s, rank, w));
            const int64_t k = plain.progress_after(0, b);
            cont.set_continuation(2, k);
            cont.set_epoch(2);
            ASSERT_EQ(cont.first_batch(2), b) << "W " << w << " batch " << b;
            for (int64_t q = b; q < plain.num_batches(); ++q) {
              ASSERT_EQ(vec(cont.batch(q)), vec(plain.batch(q))) << "W " << w << " batch " << q;
              ASSERT_EQ(cont.progress_after(k, q + 1), plain.progress_after(0, q + 1));
            }
          }
          // A continued epoch (from progress 7) stopped at each of its batches and continued.
          Sampler first(s.n, options_for(s, rank, w));
          first.set_continuation(2, 7);
          first.set_epoch(2);
          for (int64_t b = first.first_batch(2); b <= first.num_batches(); ++b) {
            const int64_t p = first.progress_after(7, b);
            Sampler again(s.n, options_for(s, rank, w));
            again.set_continuation(2, p);
            again.set_epoch(2);
            ASSERT_EQ(again.first_batch(2), b);
            for (int64_t q = b; q < first.num_batches(); ++q) {
              ASSERT_EQ(vec(again.batch(q)), vec(first.batch(q)));
            }
          }
        }
      }
    }
  }
}

TEST(SamplerContinuation, ContinuationIsRememberedForItsEpochOnlyAndCanBeCleared) {
  Sampler s(40, {.seed = 2, .rank = 1, .world_size = 2, .batch_size = 4});
  Sampler plain(40, {.seed = 2, .rank = 1, .world_size = 2, .batch_size = 4});
  s.set_epoch(5);
  plain.set_epoch(5);
  s.set_continuation(5, 16);  // rebuilds the current epoch
  EXPECT_EQ(s.continued_epoch(), 5);
  EXPECT_EQ(s.continued_progress(), 16);
  EXPECT_EQ(s.start_progress(5), 16);
  EXPECT_EQ(s.start_progress(4), 0);
  EXPECT_EQ(s.first_batch(5), 2);  // 16 = 2 batches of 4 on 2 ranks
  EXPECT_EQ(static_cast<int64_t>(s.indices().size()), 12);
  EXPECT_EQ(vec(s.batch(2)), vec(plain.batch(2)));
  EXPECT_THROW(s.batch(1), Error);
  s.set_epoch(6);
  plain.set_epoch(6);
  EXPECT_EQ(vec(s.indices()), vec(plain.indices()));
  EXPECT_EQ(vec(s.batch(0)), vec(plain.batch(0)));
  s.set_epoch(5);
  EXPECT_EQ(s.first_batch(5), 2);
  s.clear_continuation();  // rebuilds the current epoch, plain
  plain.set_epoch(5);
  EXPECT_EQ(s.continued_epoch(), -1);
  EXPECT_EQ(vec(s.indices()), vec(plain.indices()));
  EXPECT_EQ(s.first_batch(5), 0);
  // Nothing left: the epoch starts at its end.
  s.set_continuation(5, 40);
  EXPECT_EQ(s.first_batch(5), s.num_batches());
  EXPECT_TRUE(s.indices().empty());
  EXPECT_EQ(s.progress_after(40, s.num_batches()), 40);
}

TEST(SamplerContinuation, ProgressOutOfRangeIsAnErrorNamingIt) {
  Sampler s(37, {.world_size = 2, .batch_size = 3});
  for (const int64_t bad : {int64_t{-1}, int64_t{38}}) {
    try {
      s.set_continuation(0, bad);
      ADD_FAILURE() << "no error for progress " << bad;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("progress " + std::to_string(bad)), std::string::npos) << what;
      EXPECT_NE(what.find("[0, 37]"), std::string::npos) << what;
    }
    EXPECT_THROW(s.continued_batches(bad), Error);
  }
  EXPECT_EQ(s.continued_epoch(), -1);  // nothing changed
  EXPECT_THROW(s.set_continuation(-1, 0), Error);
}

}  // namespace
}  // namespace stoker::data
