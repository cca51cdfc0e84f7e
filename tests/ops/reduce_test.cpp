// sum / max_abs / l2_norm on the CPU backend (ops/reduce.h), single and multi-tensor, against
// double loops; NaN propagation; determinism; the errors bad input gets.
#include "stoker/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

struct Expected {
  double sum = 0, max_abs = 0, sum_sq = 0, sum_abs = 0;
};

Expected expected_over(const std::vector<Tensor>& xs) {
  Expected e;
  for (const Tensor& x : xs) {
    for (float v : x.to_floats()) {
      const double d = v;
      e.sum += d;
      e.sum_sq += d * d;
      e.sum_abs += std::fabs(d);
      e.max_abs = std::max(e.max_abs, std::fabs(d));
    }
  }
  return e;
}

// Result of a CPU reduce: fp64 accumulation rounded to f32 once (plus reassociation noise).
void expect_reductions(const std::vector<Tensor>& xs, const std::string& what) {
  const Expected e = expected_over(xs);
  const std::span<const Tensor> span(xs);
  const Tensor s = sum(span), m = max_abs(span), l = l2_norm(span);
  for (const Tensor& r : {s, m, l}) {
    EXPECT_EQ(r.dtype(), DType::f32) << what;
    EXPECT_EQ(r.rank(), 0) << what;
    EXPECT_EQ(r.device(), Device::cpu()) << what;
  }
  EXPECT_NEAR(s.item(), e.sum, 1e-7 * e.sum_abs + 1e-30) << what;
  EXPECT_EQ(m.item(), static_cast<double>(static_cast<float>(e.max_abs))) << what;
  EXPECT_NEAR(l.item(), std::sqrt(e.sum_sq), 1e-7 * std::sqrt(e.sum_sq) + 1e-30) << what;
}

TEST(ReduceTest, SingleTensorEveryDtypeAndSize) {
  uint32_t seed = 1;
  for (DType d : kFloatTypes) {
    for (int64_t n : {1, 7, 1000, 100003, 300001}) {
      const Tensor x = test::random_tensor({n}, d, seed++, -3.0f, 5.0f);
      expect_reductions({x}, std::string(dtype_name(d)) + " n=" + std::to_string(n));
      EXPECT_EQ(sum(x).item(), reduce(x, Reduction::sum).item());
    }
  }
}

TEST(ReduceTest, MaxAbsOfNegativeValuesIsTheirMagnitude) {
  const Tensor x = Tensor::from_floats({-7.5f, 3.0f, -0.25f, 7.0f}, {2, 2});
  EXPECT_EQ(max_abs(x).item(), 7.5);
  EXPECT_EQ(sum(x).item(), 2.25);
  EXPECT_EQ(l2_norm(Tensor::from_floats({3.0f, -4.0f}, {2})).item(), 5.0);
}

TEST(ReduceTest, SumIsAccumulatedInDouble) {
  // 2^24 followed by many ones: fp32 accumulation would stall at 2^24.
  std::vector<float> v(100001, 1.0f);
  v[0] = 16777216.0f;
  EXPECT_EQ(sum(Tensor::from_floats(v, {100001})).item(), 16777216.0 + 100000.0);
}

TEST(ReduceTest, MultiTensorMixedDtypesWithEmptyTensors) {
  std::vector<Tensor> xs;
  xs.push_back(Tensor::empty({0}, DType::f16));  // empty first
  uint32_t seed = 50;
  for (int i = 0; i < 12; ++i) {
    const DType d = kFloatTypes[i % 3];
    const int64_t n = (i * 7919) % 50000 + 1;
    xs.push_back(test::random_tensor({n}, d, seed++, -2.0f, 2.0f));
    if (i == 5) xs.push_back(Tensor::empty({0, 5}, DType::bf16));  // empty in the middle
  }
  xs.push_back(Tensor::empty({3, 0}, DType::f32));  // empty last
  expect_reductions(xs, "mixed list");
  // As if concatenated: the list equals the sum of its parts.
  double parts = 0;
  for (const Tensor& x : xs) parts += x.numel() ? sum(x).item() : 0.0;
  EXPECT_NEAR(sum(std::span<const Tensor>(xs)).item(), parts, 1e-4);
}

TEST(ReduceTest, OnlyEmptyTensorsGiveZero) {
  const std::vector<Tensor> xs = {Tensor::empty({0}, DType::f32), Tensor::empty({0}, DType::f16)};
  EXPECT_EQ(sum(std::span<const Tensor>(xs)).item(), 0.0);
  EXPECT_EQ(max_abs(std::span<const Tensor>(xs)).item(), 0.0);
  EXPECT_EQ(l2_norm(std::span<const Tensor>(xs)).item(), 0.0);
}

TEST(ReduceTest, NanPropagatesFromAnyPosition) {
  for (DType d : kFloatTypes) {
    for (int64_t pos : {int64_t{0}, int64_t{4999}, int64_t{65536}, int64_t{100002}}) {
      std::vector<float> v = test::random_floats(100003, 7, -1.0f, 1.0f);
      v[static_cast<size_t>(pos)] = test::kNaN;
      const Tensor x = Tensor::from_floats(v, {100003}, d);
      EXPECT_TRUE(std::isnan(max_abs(x).item())) << dtype_name(d) << " pos " << pos;
      EXPECT_TRUE(std::isnan(l2_norm(x).item())) << dtype_name(d) << " pos " << pos;
      EXPECT_TRUE(std::isnan(sum(x).item())) << dtype_name(d) << " pos " << pos;
    }
  }
  // NaN in a later tensor of a list, after larger finite values.
  const std::vector<Tensor> xs = {test::random_tensor({1000}, DType::f32, 1, 10.0f, 20.0f),
                                  Tensor::from_floats({0.5f, test::kNaN, 0.25f}, {3}, DType::f16),
                                  test::random_tensor({10}, DType::bf16, 2)};
  EXPECT_TRUE(std::isnan(max_abs(std::span<const Tensor>(xs)).item()));
  EXPECT_TRUE(std::isnan(l2_norm(std::span<const Tensor>(xs)).item()));
  EXPECT_TRUE(std::isnan(sum(std::span<const Tensor>(xs)).item()));
}

TEST(ReduceTest, InfinityGivesInfinity) {
  const Tensor x = Tensor::from_floats({1.0f, -test::kInf, 2.0f}, {3});
  EXPECT_EQ(max_abs(x).item(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(l2_norm(x).item(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(sum(x).item(), -std::numeric_limits<double>::infinity());
  // l2 of finite values whose squares overflow fp32 is still finite (fp64 accumulation).
  const Tensor big = Tensor::from_floats({3e20f, 4e20f}, {2});
  EXPECT_NEAR(l2_norm(big).item(), 5e20, 5e20 * 1e-6);
}

TEST(ReduceTest, RepeatedReduceIsBitIdentical) {
  const Tensor x = test::random_tensor({1 << 20}, DType::f32, 9);
  const Tensor first = sum(x);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(test::bit_identical(sum(x), first));
  const Tensor l = l2_norm(x);
  EXPECT_TRUE(test::bit_identical(l2_norm(x), l));
}

TEST(ReduceTest, WorksOnViews) {
  const Tensor x = test::random_tensor({10, 100}, DType::f32, 4);
  const Tensor view = x.slice(3, 7).reshape({-1});
  const std::vector<float> all = x.to_floats();
  double want = 0;
  for (size_t i = 300; i < 700; ++i) want += all[i];
  EXPECT_NEAR(sum(view).item(), want, 1e-4);
}

TEST(ReduceTest, BadInputThrows) {
  EXPECT_TRUE(throws_error_with([] { sum(std::span<const Tensor>()); },
                                {"ops::reduce: empty tensor list"}));
  const std::vector<Tensor> xs = {Tensor::empty({2}, DType::f32), Tensor::empty({3}, DType::i32)};
  EXPECT_TRUE(throws_error_with(
      [&] { sum(std::span<const Tensor>(xs)); },
      {"ops::sum", "xs[1] is i32[3] on cpu", "expected a float dtype (f32, f16 or bf16)"}));
  EXPECT_TRUE(
      throws_error_with([] { max_abs(Tensor::empty({4}, DType::u8)); },
                        {"ops::max_abs", "xs[0] is u8[4] on cpu", "expected a float dtype"}));
  EXPECT_TRUE(throws_error_with([] { l2_norm(Tensor()); },
                                {"ops::l2_norm", "xs[0] is an undefined tensor"}));
}

}  // namespace
}  // namespace stoker::ops
