// plan_buckets: the one bucket layout of the replicated and sharded gradient syncs.
#include "stoker/dist/grad_sync.h"

#include <gtest/gtest.h>

#include <vector>

#include "dist_test_util.h"

namespace dist = stoker::dist;
using stoker::Shape;
using stoker::test::error_of;

namespace {

// make_mlp's parameters in backward order (reverse registration).
const std::vector<dist::BucketPlanEntry> kMlpBackward = {
    {"4.bias", {3}},        {"4.weight", {3, 16}}, {"2.bias", {16}},
    {"2.weight", {16, 16}}, {"0.bias", {16}},      {"0.weight", {16, 8}},
};

}  // namespace

TEST(BucketPlanTest, FillsBucketsInBackwardOrderWithASmallFirstBucket) {
  const auto plan =
      dist::plan_buckets(kMlpBackward, {.bucket_bytes = 1000, .first_bucket_bytes = 200});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].parameters, (std::vector<std::string>{"4.bias", "4.weight"}));
  EXPECT_EQ(plan[0].offsets, (std::vector<int64_t>{0, 16}));  // 3 values padded to 16
  EXPECT_EQ(plan[0].elements, 16 + 48);
  EXPECT_EQ(plan[0].bytes, (16 + 48) * 4);
  EXPECT_EQ(plan[0].shapes, (std::vector<Shape>{{3}, {3, 16}}));
  EXPECT_EQ(plan[1].parameters, (std::vector<std::string>{"2.bias", "2.weight"}));
  EXPECT_EQ(plan[2].parameters, (std::vector<std::string>{"0.bias", "0.weight"}));
  EXPECT_EQ(plan[2].bytes, (16 + 128) * 4);
  for (const auto& b : plan) EXPECT_EQ(b.shard_elements, 0);
  // The defaults (25 MiB, first 1 MiB): one bucket for so small a model.
  EXPECT_EQ(dist::plan_buckets(kMlpBackward, {}).size(), 1u);
}

TEST(BucketPlanTest, EveryParameterStartsOnA64ByteBoundaryAndIsNeverSplit) {
  const std::vector<dist::BucketPlanEntry> params = {{"a", {5}}, {"b", {17}}, {"c", {3}}};
  const auto one = dist::plan_buckets(params, {});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].offsets, (std::vector<int64_t>{0, 16, 48}));
  EXPECT_EQ(one[0].elements, 64);
  // A parameter larger than a bucket gets a bucket of its own, whole.
  const std::vector<dist::BucketPlanEntry> big = {{"small", {4}}, {"huge", {1000}}, {"tail", {4}}};
  const auto plan = dist::plan_buckets(big, {.bucket_bytes = 64, .first_bucket_bytes = 4});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[1].parameters, (std::vector<std::string>{"huge"}));
  EXPECT_EQ(plan[1].elements, 1008);
}

TEST(BucketPlanTest, BucketMultiplePadsEveryBucketForEqualSlices) {
  // ZeRO-1 over 3 ranks: buckets are multiples of 3 x 16 elements.
  const auto plan = dist::plan_buckets(
      kMlpBackward, {.bucket_bytes = 1000, .first_bucket_bytes = 200, .bucket_multiple = 48});
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].elements, 96);   // 64 rounded up
  EXPECT_EQ(plan[1].elements, 288);  // 272 rounded up
  EXPECT_EQ(plan[2].elements, 144);  // already a multiple
  for (const auto& b : plan) {
    EXPECT_EQ(b.elements % 48, 0);
    EXPECT_EQ(b.bytes, b.elements * 4);
  }
  // The padding is at the end: the parameters keep their offsets.
  EXPECT_EQ(plan[0].offsets, (std::vector<int64_t>{0, 16}));
}

TEST(BucketPlanTest, RejectsBadOptions) {
  std::string e = error_of([] { dist::plan_buckets(kMlpBackward, {.bucket_bytes = 0}); });
  EXPECT_NE(e.find("bucket_bytes (0)"), std::string::npos) << e;
  EXPECT_NE(e.find("must be positive"), std::string::npos) << e;
  e = error_of([] { dist::plan_buckets(kMlpBackward, {.bucket_multiple = 24}); });
  EXPECT_NE(e.find("bucket_multiple 24 must be a positive multiple of 16"), std::string::npos) << e;
  e = error_of([] { dist::plan_buckets({}, {}); });
  EXPECT_NE(e.find("no parameters"), std::string::npos) << e;
}
