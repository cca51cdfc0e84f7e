#include "stoker/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

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

}  // namespace
}  // namespace stoker::data
