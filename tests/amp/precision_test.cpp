#include "stoker/amp/precision.h"

#include <gtest/gtest.h>

#include <string>

#include "stoker/core/error.h"

using stoker::amp::parse_precision;
using stoker::amp::Precision;
using stoker::amp::precision_name;

TEST(Precision, ParseReadsEveryName) {
  for (const Precision p : {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
}

TEST(Precision, ParseRefusesOtherWordsNamingTheFlag) {
  try {
    parse_precision("fp4", "--eval-precision");
    FAIL() << "fp4 was accepted";
  } catch (const stoker::Error& e) {
    EXPECT_EQ(e.message(), "--eval-precision: 'fp4' is not fp32, bf16, fp16 or fp8");
  }
  EXPECT_THROW(parse_precision("FP32"), stoker::Error);
  EXPECT_THROW(parse_precision(""), stoker::Error);
}
