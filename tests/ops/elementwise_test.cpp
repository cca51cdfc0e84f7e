// add, mul, axpy and scale on the CPU backend (ops/elementwise.h): fp32 math, one rounding to
// the output dtype; axpy is fmaf(alpha, x, y). Expected values come from plain scalar loops.
#include "stoker/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "test_util.h"

namespace stoker::ops {
namespace {

using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr int64_t kSizes[] = {1, 7, 1000, 100003};

using BinaryOp = void (*)(const Tensor&, const Tensor&, const Tensor&);

void check_binary(BinaryOp op, const std::function<float(float, float)>& ref, const char* name) {
  uint32_t seed = 1;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Tensor a = test::random_tensor({n}, d, seed++, -8.0f, 8.0f);
      const Tensor b = test::random_tensor({n}, d, seed++, -8.0f, 8.0f);
      const Tensor out = test::poisoned({n}, d);
      op(out, a, b);
      const std::vector<float> fa = a.to_floats(), fb = b.to_floats();
      std::vector<float> want(static_cast<size_t>(n));
      for (size_t i = 0; i < want.size(); ++i) want[i] = ref(fa[i], fb[i]);
      EXPECT_TRUE(test::matches_rounded(out, want)) << name << " " << dtype_name(d) << " n=" << n;
    }
  }
}

TEST(ElementwiseTest, Add) {
  check_binary(
      add, [](float x, float y) { return x + y; }, "add");
}

TEST(ElementwiseTest, Mul) {
  check_binary(
      mul, [](float x, float y) { return x * y; }, "mul");
}

TEST(ElementwiseTest, HalfResultsAreRoundedOnceFromFp32) {
  // 1 + 2^-11 is a tie in f16: fp32 math gives it exactly and RNE rounds it to 1.0, while
  // 1 + 3 * 2^-11 rounds up to 1 + 2^-9. Any extra intermediate rounding would show here.
  const Tensor a = Tensor::from_floats({1.0f, 1.0f, 2048.0f}, {3}, DType::f16);
  const Tensor b =
      Tensor::from_floats({std::ldexp(1.0f, -11), std::ldexp(3.0f, -11), 1.0f}, {3}, DType::f16);
  const Tensor out = test::poisoned({3}, DType::f16);
  add(out, a, b);
  const std::vector<float> v = out.to_floats();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(v[2], 2048.0f);  // 2049 is a tie between 2048 and 2050: even mantissa wins
  // Overflow rounds to Inf.
  const Tensor big = Tensor::from_floats({60000.0f}, {1}, DType::f16);
  mul(out.slice(0, 1), big, big);
  EXPECT_EQ(out.to_floats()[0], test::kInf);
}

TEST(ElementwiseTest, SpecialValuesPropagate) {
  const Tensor a = Tensor::from_floats({test::kNaN, test::kInf, 1.0f, -0.0f}, {4});
  const Tensor b = Tensor::from_floats({1.0f, -test::kInf, test::kInf, -0.0f}, {4});
  const Tensor out = test::poisoned({4}, DType::f32);
  add(out, a, b);
  EXPECT_TRUE(test::matches_rounded(out, {test::kNaN, test::kNaN, test::kInf, -0.0f}));
  mul(out, a, b);
  EXPECT_TRUE(test::matches_rounded(out, {test::kNaN, -test::kInf, test::kInf, 0.0f}));
}

TEST(ElementwiseTest, OutMayAliasAnInput) {
  for (DType d : kFloatTypes) {
    const Tensor a = test::random_tensor({5000}, d, 21);
    const Tensor b = test::random_tensor({5000}, d, 22);
    const std::vector<float> fa = a.to_floats(), fb = b.to_floats();
    std::vector<float> want(fa.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = fa[i] * fb[i];
    mul(a, a, b);
    EXPECT_TRUE(test::matches_rounded(a, want)) << dtype_name(d);
    std::vector<float> twice(fb.size());
    for (size_t i = 0; i < twice.size(); ++i) twice[i] = fb[i] + fb[i];
    add(b, b, b);
    EXPECT_TRUE(test::matches_rounded(b, twice)) << dtype_name(d);
  }
}

TEST(ElementwiseTest, WorksOnSlicesAndReshapes) {
  const Tensor a = test::random_tensor({4, 6}, DType::f32, 31);
  const Tensor b = test::random_tensor({12}, DType::f32, 32);
  const Tensor out = test::poisoned({4, 6}, DType::f32);
  add(out.slice(2, 4), a.slice(0, 2), b.reshape({2, 6}));
  const std::vector<float> fa = a.to_floats(), fb = b.to_floats(), fo = out.to_floats();
  for (size_t i = 0; i < 24; ++i) {
    if (i < 12) {
      EXPECT_TRUE(std::isnan(fo[i])) << i;
    } else {
      EXPECT_EQ(fo[i], fa[i - 12] + fb[i - 12]) << i;
    }
  }
}

TEST(ElementwiseTest, AxpyIsFmaForEveryDtypePair) {
  uint32_t seed = 100;
  for (DType yd : kFloatTypes) {
    for (DType xd : kFloatTypes) {
      for (int64_t n : kSizes) {
        for (float alpha : {0.3f, -1.75f, 0.0f}) {
          const Tensor x = test::random_tensor({n}, xd, seed++, -4.0f, 4.0f);
          const Tensor y = test::random_tensor({n}, yd, seed++, -4.0f, 4.0f);
          const std::vector<float> fx = x.to_floats(), fy = y.to_floats();
          axpy(y, alpha, x);
          std::vector<float> want(fx.size());
          for (size_t i = 0; i < want.size(); ++i) want[i] = std::fmaf(alpha, fx[i], fy[i]);
          EXPECT_TRUE(test::matches_rounded(y, want))
              << "y " << dtype_name(yd) << " x " << dtype_name(xd) << " n=" << n
              << " alpha=" << alpha;
        }
      }
    }
  }
}

TEST(ElementwiseTest, AxpyUsesOneRoundingNotTwo) {
  // alpha * x = 1 + 2^-11 + 2^-24 exactly; y = -1. fmaf gives 2^-11 + 2^-24, while rounding the
  // product to fp32 first (a tie, to even) loses the 2^-24 term.
  const float x = 1.0f + std::ldexp(1.0f, -12);
  const Tensor tx = Tensor::from_floats({x}, {1});
  const Tensor ty = Tensor::from_floats({-1.0f}, {1});
  axpy(ty, x, tx);
  const volatile float product = x * x;
  EXPECT_EQ(ty.to_floats()[0], std::ldexp(1.0f, -11) + std::ldexp(1.0f, -24));
  EXPECT_NE(ty.to_floats()[0], product - 1.0f);
}

TEST(ElementwiseTest, Scale) {
  uint32_t seed = 200;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (float alpha : {3.0f, -0.1f, 0.0f}) {
        const Tensor x = test::random_tensor({n}, d, seed++, -100.0f, 100.0f);
        const std::vector<float> fx = x.to_floats();
        scale(x, alpha);
        std::vector<float> want(fx.size());
        for (size_t i = 0; i < want.size(); ++i) want[i] = fx[i] * alpha;
        EXPECT_TRUE(test::matches_rounded(x, want)) << dtype_name(d) << " alpha=" << alpha;
      }
    }
  }
  // Scaling an empty tensor is fine; scaling NaN by 0 stays NaN.
  scale(Tensor::empty({0}, DType::f32), 2.0f);
  const Tensor nan = Tensor::from_floats({test::kNaN}, {1});
  scale(nan, 0.0f);
  EXPECT_TRUE(std::isnan(nan.to_floats()[0]));
}

TEST(ElementwiseTest, BadInputThrows) {
  const Tensor a3 = Tensor::empty({3}, DType::f32);
  const Tensor a4 = Tensor::empty({4}, DType::f32);
  const Tensor h4 = Tensor::empty({4}, DType::f16);
  const Tensor i4 = Tensor::empty({4}, DType::i32);
  EXPECT_TRUE(throws_error_with(
      [&] { add(a4, a4, a3); },
      {"ops::add", "a is f32[4] on cpu", "b is f32[3] on cpu", "expected equal element counts"}));
  EXPECT_TRUE(throws_error_with(
      [&] { add(a3, a4, a4); },
      {"ops::add", "out is f32[3] on cpu", "a is f32[4] on cpu", "expected equal element counts"}));
  EXPECT_TRUE(throws_error_with([&] { mul(a4, a4, h4); },
                                {"ops::mul", "a is f32[4] on cpu", "b is f16[4] on cpu",
                                 "expected equal dtypes", "ops::cast"}));
  EXPECT_TRUE(throws_error_with(
      [&] { mul(h4, a4, a4); },
      {"ops::mul", "out is f16[4] on cpu", "a is f32[4] on cpu", "expected equal dtypes"}));
  EXPECT_TRUE(throws_error_with(
      [&] { add(a4, i4, a4); },
      {"ops::add", "a is i32[4] on cpu", "expected a float dtype (f32, f16 or bf16)"}));
  EXPECT_TRUE(
      throws_error_with([&] { add(a4, a4, Tensor()); }, {"ops::add", "b is an undefined tensor"}));
  EXPECT_TRUE(throws_error_with(
      [&] { axpy(a4, 1.0f, a3); },
      {"ops::axpy", "y is f32[4] on cpu", "x is f32[3] on cpu", "expected equal element counts"}));
  EXPECT_TRUE(throws_error_with([&] { axpy(i4, 1.0f, a4); },
                                {"ops::axpy", "y is i32[4] on cpu", "expected a float dtype"}));
  EXPECT_TRUE(throws_error_with([&] { axpy(a4, 1.0f, Tensor::empty({4}, DType::u8)); },
                                {"ops::axpy", "x is u8[4] on cpu", "expected a float dtype"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        scale(Tensor::empty({2, 2}, DType::i64), 2.0f);
      },
      {"ops::scale", "x is i64[2, 2] on cpu", "expected a float dtype"}));
}

}  // namespace
}  // namespace stoker::ops
