#include "data/dataset_scan.h"

#include <gtest/gtest.h>

#include "data_test_util.h"
#include "stoker/data/pack.h"

namespace stoker::data {
namespace {

// A version-1 record (16-byte header, no checksum), as packs before checksums wrote it.
std::string v1_record(int32_t label, const std::vector<uint8_t>& payload) {
  std::string s = "STKR";
  auto le = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  le(1, 2);
  le(1, 1);
  le(0, 1);
  le(static_cast<uint32_t>(label), 4);
  le(payload.size(), 4);
  s.append(payload.begin(), payload.end());
  return s;
}

struct Fixture {
  std::filesystem::path path;
  uint64_t payload_bytes = 0;  // of the records whose header is intact
};

// 40 samples: 0..9 version 1, the rest version 2. Damaged: 12 (payload bit), 13 (not a JPEG,
// intact checksum), 14 (missing), 15 (value cut short), 20..39 (payload bit).
Fixture make(const test::TempDir& dir) {
  const SynthOptions synth{.samples = 40, .classes = 2, .size = 24, .seed = 8};
  std::map<std::string, std::string> entries = {{kMetaFormatKey, kImageFormatTag},
                                                {kMetaClassesKey, "circle\nsquare"},
                                                {kMetaSamplesKey, "40"}};
  Fixture f;
  for (int64_t i = 0; i < 40; ++i) {
    int32_t label = 0;
    std::vector<uint8_t> jpeg = synth_jpeg(synth, i, label);
    if (i == 13) jpeg.assign(50, 0x42);
    std::string value =
        i < 10 ? v1_record(label, jpeg) : encode_record(label, PayloadKind::jpeg, jpeg);
    if (i == 12 || i >= 20) value[value.size() / 2 + 12] ^= 0x01;
    if (i == 14) continue;
    if (i == 15) {
      value.resize(value.size() - 3);
    } else {
      f.payload_bytes += jpeg.size();
    }
    entries[sample_key(i)] = value;
  }
  f.path = dir / "db";
  test::lmdb_put(f.path, entries);
  return f;
}

TEST(DatasetScan, HeaderScanSeesHeadersAndLengths) {
  test::TempDir dir;
  const Fixture f = make(dir);
  LmdbImageDataset ds(f.path);
  const DatasetScan scan = scan_dataset(ds);
  EXPECT_FALSE(scan.verified);
  EXPECT_EQ(scan.records, 40);
  EXPECT_EQ(scan.bad, 2);  // 14 missing, 15 cut; the payloads are not read
  ASSERT_EQ(scan.listed.size(), 2u);
  EXPECT_EQ(scan.listed[0].key, "0000000014");
  EXPECT_EQ(scan.listed[0].reason,
            "record missing (a damaged page, or a database not written by `stoker pack`)");
  EXPECT_EQ(scan.listed[1].index, 15);
  EXPECT_NE(scan.listed[1].reason.find("truncated payload"), std::string::npos);
  EXPECT_EQ(scan.versions, (std::map<uint16_t, int64_t>{{1, 10}, {2, 28}}));
  EXPECT_EQ(scan.payload_bytes, f.payload_bytes);
}

TEST(DatasetScan, VerifyReadsEveryPayloadAndListsTheFirstBadOnes) {
  test::TempDir dir;
  const Fixture f = make(dir);
  LmdbImageDataset ds(f.path);
  const DatasetScan scan = scan_dataset(ds, {.verify = true});
  EXPECT_TRUE(scan.verified);
  EXPECT_EQ(scan.bad, 4 + 20);
  ASSERT_EQ(scan.listed.size(), 20u);  // ScanOptions::max_listed
  EXPECT_EQ(scan.listed[0].key, "0000000012");
  EXPECT_NE(scan.listed[0].reason.find("record checksum mismatch"), std::string::npos);
  EXPECT_EQ(scan.listed[1].key, "0000000013");
  EXPECT_NE(scan.listed[1].reason.find("not a JPEG"), std::string::npos) << scan.listed[1].reason;
  EXPECT_EQ(scan.listed[2].reason,
            "record missing (a damaged page, or a database not written by `stoker pack`)");
  EXPECT_NE(scan.listed[3].reason.find("truncated payload"), std::string::npos);
  for (size_t k = 4; k < 20; ++k) {
    EXPECT_EQ(scan.listed[k].index, static_cast<int64_t>(16 + k));
    EXPECT_NE(scan.listed[k].reason.find("record checksum mismatch"), std::string::npos);
  }
  // Version 1 has no checksum: its records pass on their JPEG headers.
  EXPECT_EQ(scan.versions, (std::map<uint16_t, int64_t>{{1, 10}, {2, 28}}));
  EXPECT_EQ(scan_dataset(ds, {.verify = true, .max_listed = 3}).listed.size(), 3u);
}

TEST(DatasetScan, AGoodDatabaseHasNothingToList) {
  test::TempDir dir;
  pack_synth({.samples = 30, .classes = 3, .size = 32, .seed = 2}, dir / "db",
             {.threads = 1, .progress = false});
  LmdbImageDataset ds(dir / "db");
  for (const bool verify : {false, true}) {
    const DatasetScan scan = scan_dataset(ds, {.verify = verify});
    EXPECT_EQ(scan.records, 30);
    EXPECT_EQ(scan.bad, 0);
    EXPECT_TRUE(scan.listed.empty());
    EXPECT_EQ(scan.versions, (std::map<uint16_t, int64_t>{{kRecordVersion, 30}}));
    EXPECT_GT(scan.payload_bytes, 30u * 100);
    EXPECT_LT(scan.payload_bytes, ds.file_bytes());
  }
}

}  // namespace
}  // namespace stoker::data
