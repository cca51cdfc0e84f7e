// fill, copy and cast on the CPU backend (ops/copy.h): every dtype, the parallel path, views,
// special values, and the errors bad input gets.
#include "stoker/ops/layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
// 1 and 7 run inline; 100003 crosses the CPU backend's parallel grain.
constexpr int64_t kSizes[] = {1, 7, 100003};

// Random values plus the specials a conversion must keep: NaN, +-Inf, -0, values that overflow
// f16, and f16/bf16 subnormals.
std::vector<float> values_with_specials(size_t n, uint32_t seed) {
  std::vector<float> v = test::random_floats(n, seed, -4.0f, 4.0f);
  const float specials[] = {test::kNaN, test::kInf, -test::kInf, -0.0f,  1e5f,  -70000.0f,
                            65519.0f,   3e-6f,      -1e-7f,      1e-39f, 3e38f, -1.0f / 3};
  for (size_t i = 0; i < std::size(specials) && i * 5 < n; ++i) v[i * 5] = specials[i];
  return v;
}

TEST(FillTest, FloatDtypesGetTheRoundedValue) {
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor t = test::poisoned({n}, d);
      fill(t, 0.1);
      EXPECT_TRUE(test::matches_rounded(t, std::vector<float>(n, 0.1f))) << dtype_name(d);
      fill(t, -65519.5);
      EXPECT_TRUE(test::matches_rounded(t, std::vector<float>(n, -65519.5f))) << dtype_name(d);
    }
  }
  // Special values.
  const Tensor t = Tensor::empty({5}, DType::f16);
  fill(t, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(test::matches_rounded(t, std::vector<float>(5, test::kInf)));
  fill(t, std::nan(""));
  EXPECT_TRUE(test::matches_rounded(t, std::vector<float>(5, test::kNaN)));
  fill(t, 1e6);  // overflows f16
  EXPECT_TRUE(test::matches_rounded(t, std::vector<float>(5, test::kInf)));
}

TEST(FillTest, IntegerDtypes) {
  const Tensor i32 = Tensor::empty({100003}, DType::i32);
  std::memset(i32.data(), 0xab, i32.nbytes());
  fill(i32, -123456789.0);
  for (int32_t v : i32.to_vector<int32_t>()) ASSERT_EQ(v, -123456789);

  const Tensor i64 = Tensor::empty({9}, DType::i64);
  std::memset(i64.data(), 0xab, i64.nbytes());
  fill(i64, 1099511627776.0);  // 2^40: beyond i32
  for (int64_t v : i64.to_vector<int64_t>()) ASSERT_EQ(v, int64_t{1} << 40);

  const Tensor u8 = Tensor::empty({70000}, DType::u8);
  std::memset(u8.data(), 0xab, u8.nbytes());
  fill(u8, 200.0);
  for (uint8_t v : u8.to_vector<uint8_t>()) ASSERT_EQ(v, 200);
}

TEST(FillTest, SliceWritesOnlyItsRows) {
  const Tensor t = test::poisoned({5, 3}, DType::bf16);
  fill(t.slice(1, 3), 2.5);
  const std::vector<float> v = t.to_floats();
  for (size_t i = 0; i < v.size(); ++i) {
    if (i >= 3 && i < 9) {
      EXPECT_EQ(v[i], 2.5f) << i;
    } else {
      EXPECT_TRUE(std::isnan(v[i])) << i;
    }
  }
  fill(t.slice(3, 3), 7.0);  // empty: nothing happens
  EXPECT_TRUE(std::isnan(t.to_floats()[9]));
  EXPECT_EQ(t.to_floats()[8], 2.5f);
}

TEST(FillTest, UndefinedTensorThrows) {
  EXPECT_TRUE(
      throws_error_with([] { fill(Tensor(), 1.0); }, {"ops::fill", "out is an undefined tensor"}));
}

TEST(CopyTest, CopiesEveryDtypeBitForBit) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    const Tensor src = Tensor::empty({1001}, d);
    std::vector<uint8_t> bytes(src.nbytes());
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37 + 11);
    std::memcpy(src.data(), bytes.data(), bytes.size());
    const Tensor dst = Tensor::empty({7, 143}, d);  // other shape, same element count
    std::memset(dst.data(), 0xee, dst.nbytes());
    copy(dst, src);
    EXPECT_EQ(test::raw_bytes(dst), bytes) << dtype_name(d);
  }
}

TEST(CopyTest, IntoAndFromSlices) {
  const Tensor src = test::random_tensor({2, 4}, DType::f32, 3);
  const Tensor dst = test::poisoned({5, 4}, DType::f32);
  copy(dst.slice(2, 4), src);
  const std::vector<float> s = src.to_floats(), d = dst.to_floats();
  for (size_t i = 0; i < d.size(); ++i) {
    if (i >= 8 && i < 16) {
      EXPECT_EQ(d[i], s[i - 8]);
    } else {
      EXPECT_TRUE(std::isnan(d[i])) << i;
    }
  }
  const Tensor back = test::poisoned({4}, DType::f32);
  copy(back, dst.slice(3, 4));
  EXPECT_TRUE(test::matches_rounded(back, std::vector<float>(s.begin() + 4, s.end())));
}

TEST(CopyTest, BadInputThrows) {
  const Tensor f32 = Tensor::empty({4}, DType::f32);
  const Tensor f16 = Tensor::empty({4}, DType::f16);
  const Tensor f32_5 = Tensor::empty({5}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { copy(f16, f32); },
                                {"ops::copy", "dst is f16[4] on cpu", "src is f32[4] on cpu",
                                 "expected equal dtypes", "hint:", "ops::cast"}));
  EXPECT_TRUE(throws_error_with([&] { copy(f32_5, f32); },
                                {"ops::copy", "dst is f32[5] on cpu", "src is f32[4] on cpu",
                                 "expected equal element counts"}));
  EXPECT_TRUE(
      throws_error_with([&] { copy(f32, Tensor()); }, {"ops::copy", "src is an undefined tensor"}));
  EXPECT_TRUE(
      throws_error_with([&] { copy(Tensor(), f32); }, {"ops::copy", "dst is an undefined tensor"}));
}

TEST(CastTest, EveryFloatPairRoundsOnce) {
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (int64_t n : kSizes) {
        // Source values as stored in `from` (so the expected value is one rounding away).
        const Tensor src = Tensor::from_floats(values_with_specials(n, 17 + n), {n}, from);
        const Tensor dst = test::poisoned({n}, to);
        cast(dst, src);
        EXPECT_TRUE(test::matches_rounded(dst, src.to_floats()))
            << dtype_name(from) << " -> " << dtype_name(to) << ", n = " << n;
      }
    }
  }
}

TEST(CastTest, SameDtypeIsABitCopy) {
  // Including NaN payloads, which a float round trip could change.
  const std::vector<uint16_t> bits = {0x7e01, 0xfe55, 0x3c00, 0x8000, 0x7c00, 0x0001};
  std::vector<Half> h(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) h[i] = Half::from_bits(bits[i]);
  const Tensor src = Tensor::from_vector(h, {6});
  const Tensor dst = test::poisoned({6}, DType::f16);
  cast(dst, src);
  EXPECT_EQ(test::raw_bytes(dst), test::raw_bytes(src));
}

TEST(CastTest, F32ToF16ToF32MatchesHalfH) {
  const std::vector<float> v = values_with_specials(4099, 5);
  const Tensor f32 = Tensor::from_floats(v, {4099});
  const Tensor f16 = test::poisoned({4099}, DType::f16);
  const Tensor back = test::poisoned({4099}, DType::f32);
  cast(f16, f32);
  cast(back, f16);
  const std::vector<Half> h = f16.to_vector<Half>();
  const std::vector<float> b = back.to_floats();
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(b[i]));
      continue;
    }
    EXPECT_EQ(h[i].bits, core::float_to_half_bits(v[i])) << i;
    EXPECT_EQ(core::float_bits(b[i]), core::float_bits(core::half_bits_to_float(h[i].bits))) << i;
  }
}

TEST(CastTest, BadInputThrows) {
  const Tensor f32 = Tensor::empty({4}, DType::f32);
  const Tensor i32 = Tensor::empty({4}, DType::i32);
  const Tensor f16_3 = Tensor::empty({3}, DType::f16);
  EXPECT_TRUE(throws_error_with(
      [&] { cast(i32, f32); },
      {"ops::cast", "dst is i32[4] on cpu", "expected a float dtype (f32, f16 or bf16)"}));
  EXPECT_TRUE(throws_error_with([&] { cast(f32, Tensor::empty({4}, DType::u8)); },
                                {"ops::cast", "src is u8[4] on cpu", "expected a float dtype"}));
  EXPECT_TRUE(throws_error_with([&] { cast(f16_3, f32); },
                                {"ops::cast", "dst is f16[3] on cpu", "src is f32[4] on cpu",
                                 "expected equal element counts"}));
  EXPECT_TRUE(
      throws_error_with([&] { cast(f32, Tensor()); }, {"ops::cast", "src is an undefined tensor"}));
}

}  // namespace
}  // namespace stoker::ops
