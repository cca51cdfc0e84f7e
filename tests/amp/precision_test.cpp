#include "stoker/amp/precision.h"

#include <gtest/gtest.h>

#include <string>

#include "stoker/core/error.h"

using stoker::amp::parse_precision;
using stoker::amp::Precision;
using stoker::amp::precision_name;

TEST(Precision, ParseReadsEveryName) {
  for (const Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
}

TEST(Precision, ParseRefusesOtherWordsNamingTheFlag) {
  try {
    parse_precision("fp8", "--eval-precision");
    FAIL() << "fp8 was accepted";
  } catch (const stoker::Error& e) {
    EXPECT_EQ(e.message(), "--eval-precision: 'fp8' is not fp32, bf16 or fp16");
  }
  EXPECT_THROW(parse_precision("FP32"), stoker::Error);
  EXPECT_THROW(parse_precision(""), stoker::Error);
}
