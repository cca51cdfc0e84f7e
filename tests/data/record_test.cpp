#include "stoker/data/lmdb_dataset.h"

#include <gtest/gtest.h>

#include <vector>

#include "util/checksum.h"

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

// A version-1 record as `stoker pack` wrote it before checksums: the 16-byte header, no
// checksum, then the payload (docs/formats.md), built byte by byte here.
std::string v1_record(int32_t label, const std::vector<uint8_t>& payload) {
  std::string s = "STKR";
  auto le = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  le(1, 2);  // version
  le(1, 1);  // jpeg
  le(0, 1);
  le(static_cast<uint32_t>(label), 4);
  le(payload.size(), 4);
  s.append(payload.begin(), payload.end());
  return s;
}

TEST(Record, RoundTrip) {
  const std::vector<uint8_t> payload = {0xFF, 0xD8, 0xFF, 1, 2, 3};
  const std::string value = encode_record(7, PayloadKind::jpeg, payload);
  ASSERT_EQ(value.size(), kRecordHeaderBytes + payload.size());
  ASSERT_EQ(kRecordHeaderBytes, 24u);
  EXPECT_EQ(value.substr(0, 4), "STKR");
  SampleView view;
  EXPECT_EQ(parse_record(bytes(value), 8, view), "");
  EXPECT_EQ(view.label, 7);
  EXPECT_EQ(view.kind, PayloadKind::jpeg);
  EXPECT_EQ(view.version, 2);
  ASSERT_EQ(view.payload.size(), payload.size());
  EXPECT_EQ(view.payload.data(), bytes(value).data() + 24);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), view.payload.begin()));
  RecordHeader header;
  EXPECT_EQ(parse_record_header(bytes(value), 8, header), "");
  EXPECT_EQ(header.version, 2);
  EXPECT_EQ(header.header_bytes, 24u);
  EXPECT_EQ(header.payload_bytes, payload.size());
  EXPECT_TRUE(header.has_checksum);
}

// The stored checksum is XXH3-64 of the payload seeded with XXH3-64 of bytes 0-15,
// little-endian at offset 16 (docs/formats.md).
TEST(Record, Version2StoresThePayloadChecksum) {
  const std::vector<uint8_t> payload = {0xFF, 0xD8, 0xFF, 0xE0, 42, 43, 44};
  const std::string v = encode_record(3, PayloadKind::jpeg, payload);
  uint64_t stored = 0;
  for (int i = 0; i < 8; ++i)
    stored |= static_cast<uint64_t>(static_cast<uint8_t>(v[16 + i])) << (8 * i);
  const uint64_t seed = util::checksum64(v.data(), 16);
  EXPECT_EQ(stored, util::checksum64(payload.data(), payload.size(), seed));
  EXPECT_EQ(stored, record_checksum(bytes(v).first(16), payload));
  RecordHeader header;
  ASSERT_EQ(parse_record_header(bytes(v), 4, header), "");
  EXPECT_EQ(header.checksum, stored);
}

TEST(Record, EveryFlippedPayloadBitIsCaught) {
  std::vector<uint8_t> payload(300);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::string good = encode_record(2, PayloadKind::jpeg, payload);
  SampleView view;
  for (size_t byte = kRecordHeaderBytes; byte < good.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      const std::string why = parse_record(bytes(bad), 3, view);
      ASSERT_NE(why.find("record checksum mismatch (stored "), std::string::npos)
          << "byte " << byte << " bit " << bit << ": " << why;
      ASSERT_NE(why.find("the record is damaged"), std::string::npos) << why;
      // The header alone (no payload read) does not see it.
      RecordHeader header;
      ASSERT_EQ(parse_record_header(bytes(bad), 3, header), "");
    }
  }
  EXPECT_EQ(parse_record(bytes(good), 3, view), "");
}

// The checksum covers the header's first 16 bytes too: a label bit flipped into another valid
// label (2 -> 3 of 8 classes) would otherwise train the sample as the wrong class, silently.
TEST(Record, FlippedLabelOrCountBitIsCaughtEvenWhenTheValueStaysValid) {
  const std::vector<uint8_t> payload = {0xFF, 0xD8, 1, 2, 3, 4, 5, 6};
  const std::string good = encode_record(2, PayloadKind::jpeg, payload);
  SampleView view;
  std::string bad = good;
  bad[8] = static_cast<char>(bad[8] ^ 1);  // label 2 -> 3, in range for 8 classes
  RecordHeader header;
  ASSERT_EQ(parse_record_header(bytes(bad), 8, header), "");
  EXPECT_EQ(header.label, 3);
  const std::string why = parse_record(bytes(bad), 8, view);
  EXPECT_NE(why.find("record checksum mismatch"), std::string::npos) << why;
  for (size_t byte = 8; byte < 16; ++byte) {  // every bit of the label and of the byte count
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = good;
      b[byte] = static_cast<char>(b[byte] ^ (1 << bit));
      EXPECT_NE(parse_record(bytes(b), 0, view), "") << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(Record, DamagedStoredChecksumIsCaught) {
  const std::vector<uint8_t> payload = {9, 8, 7, 6, 5};
  const std::string good = encode_record(0, PayloadKind::jpeg, payload);
  const uint64_t sum = record_checksum(bytes(good).first(16), payload);
  SampleView view;
  for (size_t byte = 16; byte < 24; ++byte) {
    std::string bad = good;
    bad[byte] = static_cast<char>(bad[byte] ^ 0xFF);
    const std::string why = parse_record(bytes(bad), 1, view);
    EXPECT_NE(why.find("record checksum mismatch"), std::string::npos) << why;
    // Names both values: the computed one is the payload's.
    EXPECT_NE(why.find("computed " + util::checksum_hex(sum)), std::string::npos) << why;
    EXPECT_EQ(why.find("stored " + util::checksum_hex(sum)), std::string::npos) << why;
  }
}

TEST(Record, Version1RecordsStillParse) {
  const std::vector<uint8_t> payload = {0xFF, 0xD8, 0xFF, 1, 2, 3, 4};
  const std::string v1 = v1_record(5, payload);
  ASSERT_EQ(v1.size(), kRecordHeaderBytesV1 + payload.size());
  SampleView view;
  EXPECT_EQ(parse_record(bytes(v1), 6, view), "");
  EXPECT_EQ(view.version, 1);
  EXPECT_EQ(view.label, 5);
  ASSERT_EQ(view.payload.size(), payload.size());
  EXPECT_EQ(view.payload.data(), bytes(v1).data() + 16);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), view.payload.begin()));
  RecordHeader header;
  EXPECT_EQ(parse_record_header(bytes(v1), 6, header), "");
  EXPECT_EQ(header.header_bytes, 16u);
  EXPECT_FALSE(header.has_checksum);
  // v1 has no checksum: a flipped payload bit is not detectable from the record.
  std::string flipped = v1;
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  EXPECT_EQ(parse_record(bytes(flipped), 6, view), "");
  // The v1 length rules still hold.
  EXPECT_NE(parse_record(bytes(v1 + "x"), 6, view).find("stray bytes"), std::string::npos);
  EXPECT_NE(parse_record(bytes(v1.substr(0, v1.size() - 1)), 6, view).find("truncated payload"),
            std::string::npos);
}

TEST(Record, HeaderIsLittleEndian) {
  const std::vector<uint8_t> payload(258, 9);
  const std::string v = encode_record(0x01020304, PayloadKind::jpeg, payload);
  EXPECT_EQ(static_cast<uint8_t>(v[4]), 2);  // version
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
  // A v2 value cut inside its checksum is shorter than the v2 header.
  EXPECT_NE(why(good.substr(0, 20)).find("shorter than the 24-byte version 2 record header"),
            std::string::npos);
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
