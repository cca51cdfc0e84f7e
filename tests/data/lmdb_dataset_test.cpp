#include "stoker/data/lmdb_dataset.h"

#include <gtest/gtest.h>

#include <thread>

#include "data/jpeg_restart.h"
#include "data_test_util.h"
#include "stoker/core/error.h"
#include "stoker/data/decode.h"
#include "stoker/data/synth.h"

namespace stoker::data {
namespace {

const PackOptions kQuiet{.threads = 2, .progress = false, .report_skipped = false};

std::string record(int32_t label, const std::string& payload = "jpegbytes") {
  return encode_record(label, PayloadKind::jpeg,
                       {reinterpret_cast<const uint8_t*>(payload.data()), payload.size()});
}

// A hand-written database: `n` samples of 2 classes plus whatever `extra` overrides.
std::filesystem::path handmade(const test::TempDir& dir, std::map<std::string, std::string> extra,
                               int64_t n = 3) {
  std::map<std::string, std::string> entries = {{kMetaFormatKey, kImageFormatTag},
                                                {kMetaClassesKey, "cat\ndog"},
                                                {kMetaSamplesKey, std::to_string(n)}};
  for (int64_t i = 0; i < n; ++i) entries[sample_key(i)] = record(static_cast<int32_t>(i % 2));
  for (auto& [k, v] : extra) entries[k] = v;
  const auto path = dir / "db";
  test::lmdb_put(path, entries);
  return path;
}

// Expects `fn` to throw a stoker::Error whose message holds `what` and that carries a hint.
template <typename F>
void expect_error(F&& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    EXPECT_FALSE(e.hint().empty()) << e.message();
  }
}

// Stored bytes: the generated JPEG as is with restart_markers off; by default its lossless
// rewrite with restart markers (the same pixels).
TEST(LmdbImageDataset, ReadsAPackedSynthDataset) {
  test::TempDir dir;
  const SynthOptions synth{.samples = 60, .classes = 3, .size = 32, .seed = 4};
  for (bool restart : {false, true}) {
    PackOptions options = kQuiet;
    options.restart_markers = restart;
    const std::filesystem::path db = dir / (restart ? "synth-rst" : "synth");
    const auto summary = pack_synth(synth, db, options);
    EXPECT_EQ(summary.samples, 60);
    LmdbImageDataset ds(db);
    EXPECT_EQ(ds.size(), 60);
    EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"circle", "square", "triangle"}));
    auto reader = ds.reader();
    JpegDecoder dec;
    for (int64_t i = 0; i < ds.size(); ++i) {
      const SampleView v = reader.read(i);
      EXPECT_EQ(v.index, i);
      EXPECT_EQ(v.label, i % 3);
      int32_t label = -1;
      const auto generated = synth_jpeg(synth, i, label);
      if (!restart) {
        ASSERT_EQ(v.payload.size(), generated.size());
        EXPECT_TRUE(std::equal(generated.begin(), generated.end(), v.payload.begin()));
        continue;
      }
      std::vector<uint8_t> rewritten;
      ASSERT_EQ(detail::add_restart_markers(generated, rewritten), "");
      ASSERT_TRUE(std::equal(rewritten.begin(), rewritten.end(), v.payload.begin()) &&
                  rewritten.size() == v.payload.size());
      EXPECT_EQ(dec.decode_full(v.payload).pixels, dec.decode_full(generated).pixels);
    }
  }
}

TEST(LmdbImageDataset, ReadersOnManyThreads) {
  test::TempDir dir;
  const auto path = handmade(dir, {}, 200);
  LmdbImageDataset ds(path, {.max_readers = 8});
  std::vector<std::thread> threads;
  std::atomic<int64_t> ok{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      auto reader = ds.reader();
      for (int64_t i = 0; i < ds.size(); ++i) ok += reader.read(i).label == i % 2 ? 1 : 0;
      reader.reset();
      reader.renew();
      ok += reader.read(0).label == 0 ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6 * 201);
}

TEST(LmdbImageDataset, MissingDatabaseSaysRunPack) {
  test::TempDir dir;
  try {
    LmdbImageDataset ds(dir / "nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("nope"), std::string::npos);
    EXPECT_NE(e.hint().find("stoker pack"), std::string::npos);
  }
  std::filesystem::create_directories(dir / "empty");
  expect_error([&] { LmdbImageDataset ds(dir / "empty"); }, "no data.mdb");
}

TEST(LmdbImageDataset, RejectsDatabasesNotWrittenByPack) {
  test::TempDir a, b, c;
  test::lmdb_put(a / "db", {{"0000000000", record(0)}});
  expect_error([&] { LmdbImageDataset ds(a / "db"); }, "was not written by `stoker pack`");
  const auto unknown = handmade(b, {{kMetaFormatKey, "something-else/7"}});
  expect_error([&] { LmdbImageDataset ds(unknown); }, "unknown format 'something-else/7'");
  const auto no_count = handmade(c, {{kMetaSamplesKey, "many"}});
  expect_error([&] { LmdbImageDataset ds(no_count); }, "missing or malformed");
}

TEST(LmdbImageDataset, BadRecordsNameTheKey) {
  test::TempDir dir;
  std::string bad_magic = record(0);
  bad_magic[1] = '?';
  std::string bad_version = record(0);
  bad_version[4] = 2;
  const std::string truncated = record(1).substr(0, kRecordHeaderBytes + 3);
  const auto path = handmade(dir,
                             {{sample_key(0), bad_magic},
                              {sample_key(1), bad_version},
                              {sample_key(2), truncated},
                              {sample_key(3), ""},
                              {sample_key(4), record(2)},
                              {sample_key(5), record(1)}},
                             7);
  LmdbImageDataset ds(path);
  auto reader = ds.reader();
  const std::vector<std::pair<int64_t, std::string>> cases = {{0, "bad magic"},
                                                              {1, "unknown record version 2"},
                                                              {2, "truncated payload"},
                                                              {3, "zero-length value"},
                                                              {4, "label 2 out of range [0, 2)"},
                                                              {7, "index 7 is not in [0, 7)"}};
  for (const auto& [index, what] : cases) {
    expect_error([&, index = index] { reader.read(index); }, what);
    expect_error([&, index = index] { reader.read(index); }, sample_key(index));
    std::string error;
    EXPECT_FALSE(reader.try_read(index, &error).has_value());
    EXPECT_NE(error.find(what), std::string::npos) << error;
    EXPECT_NE(error.find(path.string()), std::string::npos) << error;
  }
  EXPECT_EQ(reader.read(5).label, 1);
  EXPECT_TRUE(reader.try_read(6).has_value());
}

TEST(LmdbImageDataset, MissingRecord) {
  test::TempDir dir;
  const auto path = handmade(dir, {{kMetaSamplesKey, "5"}}, 3);
  LmdbImageDataset ds(path);
  auto reader = ds.reader();
  expect_error([&] { reader.read(4); }, "record missing");
}

}  // namespace
}  // namespace stoker::data
