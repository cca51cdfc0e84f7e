// random_uniform / random_normal on the CPU backend (ops/random.h): element i is a pure function
// of (seed, offset, i), offsets address blocks of 4, Generator draws never overlap, half outputs
// are the fp32 values rounded once, and the errors bad input gets.
#include "stoker/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor uniform(int64_t n, DType d, float lo, float hi, uint64_t seed, uint64_t offset) {
  const Tensor t = test::poisoned({n}, d);
  random_uniform(t, lo, hi, seed, offset);
  return t;
}

Tensor normal(int64_t n, DType d, float mean, float std, uint64_t seed, uint64_t offset) {
  const Tensor t = test::poisoned({n}, d);
  random_normal(t, mean, std, seed, offset);
  return t;
}

TEST(RandomTest, ElementIIsPhiloxOfSeedOffsetI) {
  for (int64_t n : {1, 7, 100003}) {
    const Tensor u = uniform(n, DType::f32, -2.0f, 3.0f, 42, 7);
    const Tensor z = normal(n, DType::f32, 1.0f, 0.5f, 42, 7);
    std::vector<float> wu(static_cast<size_t>(n)), wz(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      wu[static_cast<size_t>(i)] =
          core::philox_uniform(42, 7, static_cast<uint64_t>(i), -2.0f, 3.0f);
      wz[static_cast<size_t>(i)] = core::philox_normal(42, 7, static_cast<uint64_t>(i), 1.0f, 0.5f);
    }
    EXPECT_TRUE(test::matches_rounded(u, wu)) << n;
    EXPECT_TRUE(test::matches_rounded(z, wz)) << n;
  }
}

TEST(RandomTest, SameSeedAndOffsetGiveSameBits) {
  for (DType d : kFloatTypes) {
    EXPECT_TRUE(test::bit_identical(uniform(5003, d, 0, 1, 1, 0), uniform(5003, d, 0, 1, 1, 0)));
    EXPECT_TRUE(test::bit_identical(normal(5003, d, 0, 1, 9, 3), normal(5003, d, 0, 1, 9, 3)));
  }
}

int64_t count_equal(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  int64_t same = 0;
  for (size_t i = 0; i < x.size(); ++i) same += x[i] == y[i];
  return same;
}

TEST(RandomTest, OtherOffsetOrSeedGivesOtherValues) {
  const Tensor base = uniform(10000, DType::f32, 0, 1, 5, 0);
  EXPECT_LT(count_equal(base, uniform(10000, DType::f32, 0, 1, 5, 1)), 10);
  EXPECT_LT(count_equal(base, uniform(10000, DType::f32, 0, 1, 6, 0)), 10);
  EXPECT_LT(count_equal(base, uniform(10000, DType::f32, 0, 1, 5ull | (1ull << 32), 0)), 10);
  const Tensor zbase = normal(10000, DType::f32, 0, 1, 5, 0);
  EXPECT_LT(count_equal(zbase, normal(10000, DType::f32, 0, 1, 5, 2500)), 10);
}

TEST(RandomTest, OffsetKContinuesAtElement4K) {
  for (uint64_t k : {1ull, 5ull, 25000ull}) {
    const int64_t n = 1001;
    const int64_t total = static_cast<int64_t>(4 * k) + n;
    const std::vector<float> whole_u = uniform(total, DType::f32, -1, 1, 77, 0).to_floats();
    const std::vector<float> whole_z = normal(total, DType::f32, 0, 1, 77, 0).to_floats();
    const Tensor part_u = uniform(n, DType::f32, -1, 1, 77, k);
    const Tensor part_z = normal(n, DType::f32, 0, 1, 77, k);
    EXPECT_TRUE(
        test::matches_rounded(part_u, std::vector<float>(whole_u.begin() + 4 * k, whole_u.end())))
        << "k = " << k;
    EXPECT_TRUE(
        test::matches_rounded(part_z, std::vector<float>(whole_z.begin() + 4 * k, whole_z.end())))
        << "k = " << k;
  }
}

TEST(RandomTest, HalfOutputsAreTheF32ValuesRoundedOnce) {
  for (DType d : {DType::f16, DType::bf16}) {
    EXPECT_TRUE(test::matches_rounded(uniform(70001, d, -3, 3, 11, 2),
                                      uniform(70001, DType::f32, -3, 3, 11, 2).to_floats()));
    EXPECT_TRUE(test::matches_rounded(normal(70001, d, 2, 3, 11, 2),
                                      normal(70001, DType::f32, 2, 3, 11, 2).to_floats()));
  }
}

TEST(RandomTest, UniformRangeAndMoments) {
  const int64_t n = 300001;
  const std::vector<float> v = uniform(n, DType::f32, -2.0f, 6.0f, 3, 0).to_floats();
  double sum = 0, sum_sq = 0;
  for (float x : v) {
    ASSERT_GE(x, -2.0f);
    ASSERT_LT(x, 6.0f);
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 2.0, 6.0 * 8.0 / std::sqrt(12.0 * n));
  EXPECT_NEAR(var, 64.0 / 12.0, 0.05);
  // lo == hi gives lo.
  EXPECT_TRUE(
      test::matches_rounded(uniform(9, DType::f32, 1.5f, 1.5f, 3, 0), std::vector<float>(9, 1.5f)));
}

TEST(RandomTest, NormalMoments) {
  const int64_t n = 300001;
  const std::vector<float> v = normal(n, DType::f32, -1.0f, 3.0f, 4, 0).to_floats();
  double sum = 0, sum_sq = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double mean = sum / n, sd = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, -1.0, 5.0 * 3.0 / std::sqrt(n));
  EXPECT_NEAR(sd, 3.0, 5.0 * 3.0 / std::sqrt(2.0 * n));
  // std = 0 gives the mean exactly.
  EXPECT_TRUE(test::matches_rounded(normal(9, DType::f32, 0.25f, 0.0f, 3, 0),
                                    std::vector<float>(9, 0.25f)));
}

TEST(RandomTest, GeneratorDrawsDoNotOverlap) {
  // Draws of 10 then 7 elements take blocks [0, 3) and [3, 5): elements [0, 10) and [12, 19) of
  // one fill from offset 0.
  const std::vector<float> whole = uniform(40, DType::f32, 0, 1, 123, 0).to_floats();
  Generator gen(123);
  const Tensor a = test::poisoned({10}, DType::f32);
  const Tensor b = test::poisoned({7}, DType::f32);
  random_uniform(a, 0, 1, gen);
  EXPECT_EQ(gen.offset(), 3u);
  random_uniform(b, 0, 1, gen);
  EXPECT_EQ(gen.offset(), 5u);
  EXPECT_TRUE(test::matches_rounded(a, std::vector<float>(whole.begin(), whole.begin() + 10)));
  EXPECT_TRUE(test::matches_rounded(b, std::vector<float>(whole.begin() + 12, whole.begin() + 19)));
  // Normal draws advance the same way, and restoring the offset replays them.
  const Tensor z1 = test::poisoned({9}, DType::bf16);
  random_normal(z1, 0, 1, gen);
  EXPECT_EQ(gen.offset(), 8u);
  gen.set_offset(5);
  const Tensor z2 = test::poisoned({9}, DType::bf16);
  random_normal(z2, 0, 1, gen);
  EXPECT_TRUE(test::bit_identical(z1, z2));
  // An empty draw reserves nothing.
  random_uniform(Tensor::empty({0}, DType::f32), 0, 1, gen);
  EXPECT_EQ(gen.offset(), 8u);
}

TEST(RandomTest, FillsOnlyTheSlice) {
  const Tensor t = test::poisoned({6, 4}, DType::f32);
  random_normal(t.slice(2, 4), 0, 1, 1, 0);
  const std::vector<float> v = t.to_floats();
  for (size_t i = 0; i < v.size(); ++i) {
    if (i >= 8 && i < 16) {
      EXPECT_TRUE(std::isfinite(v[i])) << i;
    } else {
      EXPECT_TRUE(std::isnan(v[i])) << i;
    }
  }
}

TEST(RandomTest, BadInputThrows) {
  const Tensor f = Tensor::empty({4}, DType::f32);
  EXPECT_TRUE(
      throws_error_with([] { random_uniform(Tensor::empty({4}, DType::i32), 0, 1, 1, 0); },
                        {"ops::random_uniform", "out is i32[4] on cpu", "expected a float dtype"}));
  EXPECT_TRUE(
      throws_error_with([] { random_normal(Tensor::empty({4}, DType::u8), 0, 1, 1, 0); },
                        {"ops::random_normal", "out is u8[4] on cpu", "expected a float dtype"}));
  EXPECT_TRUE(throws_error_with([&] { random_uniform(f, 2.0f, 1.0f, 1, 0); },
                                {"ops::random_uniform", "lo 2 > hi 1"}));
  EXPECT_TRUE(throws_error_with([&] { random_normal(f, 0.0f, -1.0f, 1, 0); },
                                {"ops::random_normal", "std -1 is negative"}));
  Generator gen(1);
  EXPECT_TRUE(throws_error_with([&] { random_uniform(Tensor(), 0, 1, gen); },
                                {"ops::random_uniform", "out is an undefined tensor"}));
}

}  // namespace
}  // namespace stoker::ops
