#include "stoker/data/record.h"

#include <gtest/gtest.h>

#include <vector>

namespace stoker::data {
namespace {

std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Record, KeysAreZeroPaddedAndSortLikeIndices) {
  EXPECT_EQ(sample_key(0), "0000000000");
  EXPECT_EQ(sample_key(42), "0000000042");
  EXPECT_LT(sample_key(9), sample_key(10));
  EXPECT_LT(sample_key(9999999999), std::string(kMetaFormatKey));
}

TEST(Record, RoundTrip) {
  const std::vector<uint8_t> payload = {0xFF, 0xD8, 0xFF, 1, 2, 3};
  const std::string value = encode_record(7, PayloadKind::jpeg, payload);
  ASSERT_EQ(value.size(), kRecordHeaderBytes + payload.size());
  EXPECT_EQ(value.substr(0, 4), "STKR");
  SampleView view;
  EXPECT_EQ(parse_record(bytes(value), 8, view), "");
  EXPECT_EQ(view.label, 7);
  EXPECT_EQ(view.kind, PayloadKind::jpeg);
  ASSERT_EQ(view.payload.size(), payload.size());
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), view.payload.begin()));
}

TEST(Record, HeaderIsLittleEndian) {
  const std::vector<uint8_t> payload(258, 9);
  const std::string v = encode_record(0x01020304, PayloadKind::jpeg, payload);
  EXPECT_EQ(static_cast<uint8_t>(v[4]), 1);  // version
  EXPECT_EQ(static_cast<uint8_t>(v[5]), 0);
  EXPECT_EQ(static_cast<uint8_t>(v[6]), 1);  // jpeg
  EXPECT_EQ(static_cast<uint8_t>(v[8]), 4);  // label LSB first
  EXPECT_EQ(static_cast<uint8_t>(v[11]), 1);
  EXPECT_EQ(static_cast<uint8_t>(v[12]), 2);  // 258 = 0x0102
  EXPECT_EQ(static_cast<uint8_t>(v[13]), 1);
}

TEST(Record, RejectsEveryMalformation) {
  const std::vector<uint8_t> payload = {1, 2, 3, 4};
  const std::string good = encode_record(1, PayloadKind::jpeg, payload);
  SampleView view;
  auto why = [&](const std::string& v, int classes = 3) {
    return parse_record(bytes(v), classes, view);
  };
  EXPECT_NE(why("").find("zero-length"), std::string::npos);
  EXPECT_NE(why(good.substr(0, 10)).find("shorter than"), std::string::npos);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(why(bad_magic).find("bad magic"), std::string::npos);
  std::string version = good;
  version[4] = 9;
  EXPECT_NE(why(version).find("unknown record version 9"), std::string::npos);
  std::string kind = good;
  kind[6] = 77;
  EXPECT_NE(why(kind).find("payload kind 77"), std::string::npos);
  EXPECT_NE(why(good.substr(0, good.size() - 1)).find("truncated payload"), std::string::npos);
  EXPECT_NE(why(good + "xx").find("stray bytes"), std::string::npos);
  EXPECT_NE(why(good, 1).find("label 1 out of range [0, 1)"), std::string::npos);
  const std::string negative = encode_record(-3, PayloadKind::jpeg, payload);
  EXPECT_NE(why(negative).find("label -3"), std::string::npos);
  const std::string empty = encode_record(0, PayloadKind::jpeg, {});
  EXPECT_NE(why(empty).find("empty payload"), std::string::npos);
  EXPECT_EQ(why(good), "");
}

}  // namespace
}  // namespace stoker::data
