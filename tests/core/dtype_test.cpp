// DType sizes, names, float classification and parsing (core/dtype.h).
#include "stoker/core/dtype.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "test_util.h"

namespace stoker::core {
namespace {

TEST(DTypeTest, SizesMatchTheCTypes) {
  EXPECT_EQ(dtype_size(DType::f32), sizeof(float));
  EXPECT_EQ(dtype_size(DType::f16), sizeof(Half));
  EXPECT_EQ(dtype_size(DType::bf16), sizeof(BFloat16));
  EXPECT_EQ(dtype_size(DType::i32), sizeof(int32_t));
  EXPECT_EQ(dtype_size(DType::i64), sizeof(int64_t));
  EXPECT_EQ(dtype_size(DType::u8), sizeof(uint8_t));
  EXPECT_EQ(sizeof(Half), 2u);
  EXPECT_EQ(sizeof(BFloat16), 2u);
}

TEST(DTypeTest, NamesAndStreaming) {
  EXPECT_EQ(dtype_name(DType::f32), "f32");
  EXPECT_EQ(dtype_name(DType::f16), "f16");
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_name(DType::i32), "i32");
  EXPECT_EQ(dtype_name(DType::i64), "i64");
  EXPECT_EQ(dtype_name(DType::u8), "u8");
  std::ostringstream os;
  os << DType::bf16 << "," << DType::u8;
  EXPECT_EQ(os.str(), "bf16,u8");
}

TEST(DTypeTest, IsFloat) {
  EXPECT_TRUE(is_float(DType::f32));
  EXPECT_TRUE(is_float(DType::f16));
  EXPECT_TRUE(is_float(DType::bf16));
  EXPECT_FALSE(is_float(DType::i32));
  EXPECT_FALSE(is_float(DType::i64));
  EXPECT_FALSE(is_float(DType::u8));
}

TEST(DTypeTest, DtypeOfMapsCTypes) {
  static_assert(dtype_of<float>() == DType::f32);
  static_assert(dtype_of<Half>() == DType::f16);
  static_assert(dtype_of<BFloat16>() == DType::bf16);
  static_assert(dtype_of<int32_t>() == DType::i32);
  static_assert(dtype_of<int64_t>() == DType::i64);
  static_assert(dtype_of<uint8_t>() == DType::u8);
  SUCCEED();
}

TEST(DTypeTest, ParseAcceptsNamesAndAliases) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("int32"), DType::i32);
  EXPECT_EQ(parse_dtype("int64"), DType::i64);
  EXPECT_EQ(parse_dtype("uint8"), DType::u8);
}

TEST(DTypeTest, ParseRejectsUnknownNamesWithTheChoices) {
  for (const std::string bad : {"f64", "", "F32", "float", "bf32", "f32 "}) {
    EXPECT_TRUE(test::throws_error_with(
        [&] { parse_dtype(bad); },
        {"unknown dtype '" + bad + "'", "f32", "f16", "bf16", "i32", "i64", "u8", "dtype.cpp:"}))
        << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace stoker::core
