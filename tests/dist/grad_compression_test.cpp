// The gradient compression strategies on the CPU: what travels, and that bf16/fp16 encode and
// decode round exactly as the reference scalar conversions (core/half.h) do.
#include "stoker/dist/grad_sync.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dist_test_util.h"
#include "stoker/core/half.h"

namespace dist = stoker::dist;
using stoker::BFloat16;
using stoker::DType;
using stoker::Half;
using stoker::Tensor;
using stoker::test::error_of;

namespace {

// Values that round differently in bf16 and f16: inexact fractions, large and tiny magnitudes,
// a tie, signs, zero.
const std::vector<float> kValues = {0.0f,
                                    1.0f,
                                    -2.5f,
                                    1.0f + 1.0f / 3.0f,
                                    3.14159265f,
                                    1e-3f,
                                    -7e-6f,
                                    1234.567f,
                                    65504.0f,
                                    -0.1f,
                                    1.00390625f /* 1 + 2^-8: a bf16 tie */,
                                    2e-8f};

}  // namespace

TEST(GradCompressionTest, NamesAndWireDtypes) {
  EXPECT_EQ(dist::compression::none()->name(), "none");
  EXPECT_EQ(dist::compression::bf16()->name(), "bf16");
  EXPECT_EQ(dist::compression::fp16()->name(), "fp16");
  EXPECT_EQ(dist::compression::none()->wire_dtype(), DType::f32);
  EXPECT_EQ(dist::compression::bf16()->wire_dtype(), DType::bf16);
  EXPECT_EQ(dist::compression::fp16()->wire_dtype(), DType::f16);
  // Shared, stateless objects.
  EXPECT_EQ(dist::compression::bf16(), dist::compression::bf16());
}

TEST(GradCompressionTest, NoneSendsTheBucketItself) {
  const auto none = dist::compression::none();
  const Tensor grads = Tensor::from_floats(kValues, {static_cast<int64_t>(kValues.size())});
  const Tensor wire = none->make_wire(grads);
  EXPECT_TRUE(wire.same_storage(grads));
  EXPECT_EQ(wire.dtype(), DType::f32);
  none->encode(grads, wire);
  none->decode(wire, grads);
  EXPECT_EQ(grads.to_floats(), kValues);
}

TEST(GradCompressionTest, Bf16RoundTripMatchesTheReferenceCast) {
  const auto bf16 = dist::compression::bf16();
  const Tensor grads = Tensor::from_floats(kValues, {static_cast<int64_t>(kValues.size())});
  const Tensor wire = bf16->make_wire(grads);
  ASSERT_FALSE(wire.same_storage(grads));
  ASSERT_EQ(wire.dtype(), DType::bf16);
  ASSERT_EQ(wire.numel(), grads.numel());
  bf16->encode(grads, wire);
  const std::vector<BFloat16> sent = wire.to_vector<BFloat16>();
  for (size_t i = 0; i < kValues.size(); ++i)
    EXPECT_EQ(sent[i].bits, BFloat16(kValues[i]).bits) << kValues[i];
  bf16->decode(wire, grads);
  const std::vector<float> back = grads.to_floats();
  for (size_t i = 0; i < kValues.size(); ++i)
    EXPECT_EQ(back[i], static_cast<float>(BFloat16(kValues[i]))) << kValues[i];
  EXPECT_EQ(back[3], 1.3359375f);  // 1 + 1/3 to 8 significant bits
  EXPECT_EQ(back[10], 1.0f);       // the tie rounds to even
}

TEST(GradCompressionTest, Fp16RoundTripMatchesTheReferenceCastAndOverflowsToInf) {
  const auto fp16 = dist::compression::fp16();
  std::vector<float> values = kValues;
  values.push_back(70000.0f);  // above f16's largest finite value
  const Tensor grads = Tensor::from_floats(values, {static_cast<int64_t>(values.size())});
  const Tensor wire = fp16->make_wire(grads);
  ASSERT_EQ(wire.dtype(), DType::f16);
  fp16->encode(grads, wire);
  const std::vector<Half> sent = wire.to_vector<Half>();
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(sent[i].bits, Half(values[i]).bits) << values[i];
  fp16->decode(wire, grads);
  const std::vector<float> back = grads.to_floats();
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(back[i], static_cast<float>(Half(values[i]))) << values[i];
  EXPECT_EQ(back[3], 1.3330078125f);  // 1 + 1/3 to 11 significant bits
  EXPECT_EQ(back[8], 65504.0f);
  EXPECT_TRUE(std::isinf(back.back()));
}

// ZeRO-1 decodes only its slice of a bucket: the rest of the f32 buffer is left alone.
TEST(GradCompressionTest, DecodeOfMatchingSlicesWritesOnlyThatSlice) {
  const auto bf16 = dist::compression::bf16();
  const Tensor grads = Tensor::from_floats(kValues, {static_cast<int64_t>(kValues.size())});
  const Tensor wire = bf16->make_wire(grads);
  bf16->encode(grads, wire);
  bf16->decode(wire.slice(4, 8), grads.slice(4, 8));
  const std::vector<float> back = grads.to_floats();
  for (size_t i = 0; i < kValues.size(); ++i) {
    const float want = i >= 4 && i < 8 ? static_cast<float>(BFloat16(kValues[i])) : kValues[i];
    EXPECT_EQ(back[i], want) << i;
  }
}

TEST(GradCompressionTest, ParseNamesEveryStrategyAndRejectsTheRest) {
  EXPECT_EQ(dist::parse_compression("none"), dist::compression::none());
  EXPECT_EQ(dist::parse_compression("bf16"), dist::compression::bf16());
  EXPECT_EQ(dist::parse_compression("fp16"), dist::compression::fp16());
  const std::string e = error_of([] { dist::parse_compression("int8"); });
  EXPECT_NE(e.find("'int8'"), std::string::npos) << e;
  EXPECT_NE(e.find("none, bf16 or fp16"), std::string::npos) << e;
}
