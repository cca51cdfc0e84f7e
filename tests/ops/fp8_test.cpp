// FP8 ops on the CPU (ops/fp8.h): scaled quantization is core/fp8.h's conversion of x * scale
// element by element, for f32/f16/bf16 inputs; dequantization inverts it up to the format's
// rounding; the delayed-scaling step shifts its history, takes the maximum, keeps the old scale
// for zero or non-finite maxima, and honours the margin; bad arguments are named.
#include "stoker/ops/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

TEST(Fp8OpsTest, QuantizeIsTheScaledConversionAndDequantizeInvertsIt) {
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(dt) << (f == Fp8Format::e4m3 ? " e4m3" : " e5m2"));
      const Tensor x = test::random_tensor({1001}, dt, 3, -5.0f, 5.0f);
      const float amax = max_abs(x).item();
      const float s = core::fp8_max(f) / amax;  // what delayed scaling aims at
      const Tensor scale = Tensor::from_floats({s}, {});
      Tensor codes = Tensor::empty({1001}, DType::u8);
      fp8_quantize(codes, x, scale, f);
      const std::vector<float> xv = x.to_floats();
      const std::vector<uint8_t> cv = codes.to_vector<uint8_t>();
      for (size_t i = 0; i < xv.size(); ++i) {
        const uint8_t want = f == Fp8Format::e4m3
                                 ? core::float_to_fp8_bits<Fp8Format::e4m3>(xv[i] * s)
                                 : core::float_to_fp8_bits<Fp8Format::e5m2>(xv[i] * s);
        ASSERT_EQ(cv[i], want) << i;
      }
      Tensor back = Tensor::empty({1001}, DType::f32);
      fp8_dequantize(back, codes, scale, f);
      const std::vector<float> bv = back.to_floats();
      // Relative error of one FP8 rounding: 2^-4 (E4M3) or 2^-3 (E5M2) of the value, at most.
      const float rel = f == Fp8Format::e4m3 ? 0.0625f : 0.125f;
      for (size_t i = 0; i < xv.size(); ++i)
        ASSERT_LE(std::fabs(bv[i] - xv[i]), rel * std::fabs(xv[i]) + 1e-3f) << i;
    }
  }
}

TEST(Fp8OpsTest, DelayedScalingFollowsTheHistorysMaximum) {
  Tensor history = Tensor::zeros({4}, DType::f32), scale = Tensor::from_floats({1.0f}, {});
  auto step = [&](float amax, int margin = 0) {
    fp8_update_scale(scale, history, Tensor::from_floats({amax}, {}), Fp8Format::e4m3, margin);
    return scale.item();
  };
  EXPECT_EQ(step(0.0f), 1.0f);           // all zeros: the scale stays
  EXPECT_EQ(step(2.0f), 448.0f / 2.0f);  // history 2 0 0 0
  EXPECT_EQ(step(8.0f), 448.0f / 8.0f);  // 8 2 0 0
  EXPECT_EQ(step(1.0f), 448.0f / 8.0f);  // 1 8 2 0: the maximum of the window
  EXPECT_EQ(history.to_floats(), (std::vector<float>{1.0f, 8.0f, 2.0f, 0.0f}));
  EXPECT_EQ(step(1.0f), 448.0f / 8.0f);     // 1 1 8 2
  EXPECT_EQ(step(1.0f), 448.0f / 8.0f);     // 1 1 1 8
  EXPECT_EQ(step(1.0f), 448.0f);            // 1 1 1 1: the 8 left the window
  EXPECT_EQ(step(1.0f, 2), 448.0f / 4.0f);  // margin 2: a quarter
  EXPECT_EQ(step(NAN), 448.0f / 4.0f);      // an overflowed step keeps the scale
  EXPECT_EQ(step(INFINITY), 448.0f / 4.0f);
  Tensor h5 = Tensor::zeros({1}, DType::f32), s5 = Tensor::from_floats({1.0f}, {});
  fp8_update_scale(s5, h5, Tensor::from_floats({4.0f}, {}), Fp8Format::e5m2);
  EXPECT_EQ(s5.item(), 57344.0f / 4.0f);
}

TEST(Fp8OpsTest, CastTransposeWritesTheQuantizedCodesBothWaysWithScaleInvAndAmax) {
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (const DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(dt) << (f == Fp8Format::e4m3 ? " e4m3" : " e5m2"));
      const int64_t r = 37, c = 70;
      const Tensor x = test::random_tensor({r, c}, dt, 11, -6.0f, 4.0f);
      const Tensor scale = Tensor::from_floats({37.5f}, {});
      Tensor want = Tensor::empty({r, c}, DType::u8);
      fp8_quantize(want, x, scale, f);
      Tensor codes = Tensor::empty({r, c}, DType::u8), codes_t = Tensor::empty({c, r}, DType::u8);
      Tensor scale_inv = Tensor::empty({}, DType::f32), amax = Tensor::empty({}, DType::f32);
      fp8_cast_transpose({&codes, &codes_t, &scale_inv, &amax}, x, scale, f);
      const std::vector<uint8_t> w = want.to_vector<uint8_t>(), q = codes.to_vector<uint8_t>(),
                                 qt = codes_t.to_vector<uint8_t>();
      ASSERT_EQ(q, w);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) ASSERT_EQ(qt[j * r + i], w[i * c + j]) << i << "," << j;
      EXPECT_EQ(scale_inv.item(), 1.0f / 37.5f);
      EXPECT_EQ(amax.item(), max_abs(x).item());
    }
  }
  // amax: NaN wins over everything, and an empty x gives 0 (scale_inv is still written).
  Tensor x = Tensor::from_floats({1.0f, -INFINITY, NAN, 2.0f}, {2, 2});
  Tensor scale_inv = Tensor::empty({}, DType::f32), amax = Tensor::empty({}, DType::f32);
  fp8_cast_transpose({.scale_inv = &scale_inv, .amax = &amax}, x, Tensor::from_floats({4.0f}, {}),
                     Fp8Format::e4m3);
  EXPECT_TRUE(std::isnan(amax.item()));
  x = Tensor::from_floats({1.0f, -INFINITY, 3.0f, 2.0f}, {2, 2});
  fp8_cast_transpose({.scale_inv = &scale_inv, .amax = &amax}, x, Tensor::from_floats({4.0f}, {}),
                     Fp8Format::e4m3);
  EXPECT_EQ(amax.item(), INFINITY);
  fp8_cast_transpose({.scale_inv = &scale_inv, .amax = &amax}, Tensor::empty({0, 5}, DType::f32),
                     Tensor::from_floats({8.0f}, {}), Fp8Format::e4m3);
  EXPECT_EQ(amax.item(), 0.0f);
  EXPECT_EQ(scale_inv.item(), 0.125f);
}

TEST(Fp8OpsTest, DequantizeWithScaleInvMultiplies) {
  const Tensor codes = Tensor::from_vector<uint8_t>({0x38, 0x40, 0xb8, 0x00}, {4});  // 1 2 -1 0
  const Tensor scale_inv = Tensor::from_floats({0.25f}, {});
  Tensor y = Tensor::empty({4}, DType::f32);
  fp8_dequantize(y, Fp8Tensor{codes, scale_inv, Fp8Format::e4m3});
  EXPECT_EQ(y.to_floats(), (std::vector<float>{0.25f, 0.5f, -0.25f, 0.0f}));
}

TEST(Fp8OpsTest, BadArgumentsAreNamed) {
  const Tensor x = Tensor::zeros({8}, DType::f32), s = Tensor::from_floats({1.0f}, {});
  EXPECT_TRUE(test::throws_error_with(
      [&] { fp8_quantize(Tensor::empty({8}, DType::f32), x, s, Fp8Format::e4m3); },
      {"codes", "expected u8"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { fp8_quantize(Tensor::empty({7}, DType::u8), x, s, Fp8Format::e4m3); }, {"codes"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        fp8_quantize(Tensor::empty({8}, DType::u8), x, Tensor::zeros({2}, DType::f32),
                     Fp8Format::e4m3);
      },
      {"scale", "rank-0 f32"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        fp8_update_scale(s, Tensor::zeros({2, 2}, DType::f32), s, Fp8Format::e4m3);
      },
      {"history", "f32[L]"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { fp8_update_scale(s, Tensor::zeros({2}, DType::f32), s, Fp8Format::e4m3, -1); },
      {"margin -1"}));
  const Tensor x2 = Tensor::zeros({4, 6}, DType::f32);
  Tensor si = Tensor::empty({}, DType::f32), wrong = Tensor::empty({4, 6}, DType::u8);
  EXPECT_TRUE(test::throws_error_with(
      [&] { fp8_cast_transpose({.codes_t = &wrong, .scale_inv = &si}, x2, s, Fp8Format::e4m3); },
      {"out.codes_t", "expected u8[6, 4]"}));
  EXPECT_TRUE(test::throws_error_with([&] { fp8_cast_transpose({}, x2, s, Fp8Format::e4m3); },
                                      {"out.scale_inv is null"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { fp8_cast_transpose({.scale_inv = &si}, x, s, Fp8Format::e4m3); }, {"2-D"}));
}

}  // namespace
}  // namespace stoker::ops
