#include "stoker/data/lmdb_dataset.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <thread>

#include "data/jpeg_restart.h"
#include "data_test_util.h"
#include "lmdb_pages.h"
#include "stoker/core/error.h"
#include "stoker/data/decode.h"
#include "stoker/data/pack.h"

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
  bad_version[4] = 3;
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
                                                              {1, "unknown record version 3"},
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

// A packed database copied with its data file cut short: opening it must throw, naming the file
// and what is missing, before anything reads a page past the end (which would be a SIGBUS).
TEST(LmdbImageDataset, TruncatedDataFileIsAnErrorNotASignal) {
  test::TempDir dir;
  const auto db = dir / "db";
  pack_synth({.samples = 200, .classes = 3, .size = 32, .seed = 1}, db, kQuiet);
  const auto bytes = test::read_bytes(db / "data.mdb");
  ASSERT_GT(bytes.size(), 16384u);
  const size_t half = bytes.size() / 2, most = bytes.size() * 9 / 10;
  for (const size_t keep : {half, most, bytes.size() - 1, size_t{8192}, size_t{4096}, size_t{0}}) {
    SCOPED_TRACE(keep);
    const auto copy = dir / ("cut" + std::to_string(keep));
    std::filesystem::create_directories(copy);
    test::write_bytes(copy / "data.mdb", bytes.data(), keep);
    try {
      LmdbImageDataset ds(copy);
      ADD_FAILURE() << "opened a data.mdb cut to " << keep << " of " << bytes.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find((copy / "data.mdb").string()), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("truncated"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(std::to_string(keep) + " bytes"), std::string::npos)
          << e.message();
      EXPECT_NE(e.hint().find("copy it again or re-pack it"), std::string::npos) << e.hint();
    }
  }
  // A cut past the meta pages says how much is missing.
  const auto copy = dir / ("cut" + std::to_string(most));
  try {
    LmdbImageDataset ds(copy);
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(std::to_string(bytes.size() - most) + " bytes are missing"),
              std::string::npos)
        << e.message();
  }
  // Bytes past the pages in use are harmless (a copy padded by a tool): it opens and reads.
  auto padded = bytes;
  padded.resize(bytes.size() + 12345, 0);
  test::write_bytes(dir / "padded" / "data.mdb", padded);
  LmdbImageDataset ds(dir / "padded");
  EXPECT_EQ(ds.size(), 200);
  EXPECT_EQ(ds.file_bytes(), padded.size());
  EXPECT_TRUE(ds.reader().try_read(199).has_value());
}

// Finds `needle` in `haystack` (once).
size_t find_bytes(const std::vector<uint8_t>& haystack, std::span<const uint8_t> needle) {
  const auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end());
  return it == haystack.end() ? std::string::npos : static_cast<size_t>(it - haystack.begin());
}

// A byte flipped inside a stored JPEG (in the data file, as a disk or a copy would): the record's
// checksum catches it and the read names the key; the other records read.
TEST(LmdbImageDataset, DamagedPayloadInTheFileIsABadRecord) {
  test::TempDir dir;
  const auto db = dir / "db";
  pack_synth({.samples = 40, .classes = 2, .size = 32, .seed = 5}, db, kQuiet);
  std::vector<uint8_t> payload;
  {
    LmdbImageDataset ds(db);
    const SampleView v = ds.reader().read(17);
    EXPECT_EQ(v.version, kRecordVersion);
    payload.assign(v.payload.begin(), v.payload.end());
  }
  auto bytes = test::read_bytes(db / "data.mdb");
  const size_t at = find_bytes(bytes, payload);
  ASSERT_NE(at, std::string::npos);
  bytes[at + payload.size() / 2] ^= 0x10;
  test::write_bytes(db / "data.mdb", bytes);

  LmdbImageDataset ds(db);
  auto reader = ds.reader();
  for (int64_t i = 0; i < ds.size(); ++i) {
    std::string error;
    const bool ok = reader.try_read(i, &error).has_value();
    if (i != 17) {
      EXPECT_TRUE(ok) << error;
      continue;
    }
    EXPECT_FALSE(ok);
    EXPECT_NE(error.find("key 0000000017: record checksum mismatch"), std::string::npos) << error;
  }
  expect_error([&] { reader.read(17); }, "0000000017");
}

// LMDB page header: flags (u16) at byte 10 of each page; P_LEAF = 0x02, P_META = 0x08. A leaf's
// node offsets (u16) start at byte 16, up to mp_lower (u16 at byte 12); a node is data size
// (u32), flags (u16), key size (u16), then the key.
std::vector<std::string> leaf_keys(const uint8_t* page) {
  auto u16 = [&](size_t at) { return static_cast<size_t>(page[at] | (page[at + 1] << 8)); };
  std::vector<std::string> keys;
  for (size_t p = 16; p < u16(12); p += 2) {
    const size_t node = u16(p);
    keys.emplace_back(reinterpret_cast<const char*>(page + node + 8), u16(node + 6));
  }
  return keys;
}

// Whether `key` is a sample key ("0000000042"), not a metadata key or a free-list entry.
bool is_sample_key(const std::string& key) {
  return key.size() == static_cast<size_t>(kSampleKeyDigits) &&
         std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A damaged LMDB page (here: a leaf's flags) makes LMDB fail the lookups that meet it
// (MDB_CORRUPTED): each is a bad record naming its key, and the Reader keeps reading the records
// on intact pages afterwards.
TEST(LmdbImageDataset, DamagedLmdbPageIsABadRecordAndTheReaderRecovers) {
  test::TempDir dir;
  const auto db = dir / "db";
  pack_synth({.samples = 120, .classes = 2, .size = 32, .seed = 6}, db, kQuiet);
  const auto clean = test::read_bytes(db / "data.mdb");
  const size_t psize = 4096;  // LMDB's page size is the OS's (x86-64, aarch64 with 4 KiB pages)
  ASSERT_EQ(static_cast<size_t>(sysconf(_SC_PAGESIZE)), psize);
  // Leaf pages of sample keys only. The file also holds stale copies of pages that the last
  // transaction no longer uses (copy-on-write): damaging one of those changes nothing, so try
  // the candidates until one is in use.
  int64_t tried = 0, bad = 0;
  for (size_t page = 2; page * psize < clean.size() && bad == 0; ++page) {
    const uint8_t* p = clean.data() + page * psize;
    if ((p[10] & 0x02) == 0 || (p[10] & 0x08) != 0) continue;
    const auto keys = leaf_keys(p);
    if (keys.empty() || !std::all_of(keys.begin(), keys.end(), is_sample_key)) continue;
    ASSERT_LT(keys.size(), 120u);
    ++tried;
    auto bytes = clean;
    bytes[page * psize + 10] = 0;  // neither branch nor leaf
    test::write_bytes(db / "data.mdb", bytes);

    LmdbImageDataset ds(db);
    auto reader = ds.reader();
    int64_t good_after_bad = 0;
    for (int64_t i = 0; i < ds.size(); ++i) {
      std::string error;
      const bool ok = reader.try_read(i, &error).has_value();
      if (!ok) {
        ++bad;
        EXPECT_NE(error.find("key " + sample_key(i) + ": damaged page"), std::string::npos)
            << error;
        EXPECT_NE(std::find(keys.begin(), keys.end(), sample_key(i)), keys.end())
            << sample_key(i) << " is not on the damaged page: " << error;
      } else if (bad > 0) {
        ++good_after_bad;
      }
    }
    if (bad == 0) continue;  // a stale page
    EXPECT_EQ(bad, static_cast<int64_t>(keys.size())) << "page " << page;
    // Unless the damaged leaf is the last one, the reads after the failures worked.
    if (keys.back() != sample_key(119)) EXPECT_GT(good_after_bad, 0);
  }
  EXPECT_GT(tried, 0) << "no leaf page of sample keys";
  EXPECT_GT(bad, 0) << "no damaged page made a lookup fail (" << tried << " tried)";
}

// One damage to a copy of a database: `bytes` written at `offset` of data.mdb.
struct PageDamage {
  std::string what;
  size_t offset = 0;
  std::vector<uint8_t> bytes;
};

// The damages of the header fields of `page` that LMDB trusts: the flags, `lower` (the end of
// the node offsets: its count of nodes) and `upper`, each cleared and set high. On today's LMDB,
// a `lower` of 0 makes the node count huge (SIGSEGV) and a high one makes LMDB read node
// offsets past the page, past the end of the file for the last pages (SIGBUS).
std::vector<PageDamage> header_damages(const test::LmdbPage& page, const std::string& name) {
  std::vector<PageDamage> out;
  const std::vector<std::pair<size_t, uint8_t>> fields = {
      {10, 0x00}, {10, 0xff}, {12, 0x00}, {12, 0xff}, {13, 0xff},
      {13, 0x80}, {14, 0x00}, {15, 0xff}, {16, 0xff}, {17, 0xff}};
  for (const auto& [at, value] : fields) {
    out.push_back({fmt::format("{} page {}: byte {} = {}", name, page.pgno, at, int{value}),
                   page.offset + at,
                   {value}});
  }
  return out;
}

// Opens the database and reads every record, as `stoker info --verify` and the loader do.
// Nothing may raise a signal: the open either works or throws an Error saying "damaged page";
// every record either reads or fails saying "damaged page" (or, for a value that LMDB returned
// intact but at the wrong place, its record checks). Returns the indices that failed, or -1
// in `open_error` when the open failed.
std::set<int64_t> read_everything(const std::filesystem::path& db, std::string& open_error) {
  std::set<int64_t> failed;
  open_error.clear();
  std::optional<LmdbImageDataset> ds;
  try {
    ds.emplace(db);
  } catch (const Error& e) {
    open_error = e.message();
    EXPECT_NE(e.message().find("damaged page"), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find("copy it again or re-pack it"), std::string::npos) << e.hint();
    return failed;
  }
  auto reader = ds->reader();
  for (int64_t i = 0; i < ds->size(); ++i) {
    std::string error;
    if (reader.try_read(i, &error)) continue;
    failed.insert(i);
    EXPECT_NE(error.find(db.string() + " key " + sample_key(i) + ": "), std::string::npos) << error;
    EXPECT_TRUE(error.find("damaged page") != std::string::npos ||
                error.find("record checksum mismatch") != std::string::npos)
        << error;
  }
  return failed;
}

// Bad case: one damaged byte in the header of a live page (a leaf of samples, the leaf of the
// metadata, the root branch) ended every reader with SIGBUS or SIGSEGV inside mdb_get. Now no
// damage raises a signal: each affected key is named with "damaged page", the keys on other
// pages still read, and a damaged root or metadata page fails the open with "damaged page"
// (not "not written by `stoker pack`").
TEST(LmdbImageDataset, DamagedPageHeadersNeverRaiseASignal) {
  test::TempDir dir;
  const auto clean_db = dir / "clean";
  pack_synth({.samples = 120, .classes = 2, .size = 32, .seed = 6}, clean_db, kQuiet);
  const auto clean = test::read_bytes(clean_db / "data.mdb");
  const test::LmdbPages live = test::live_lmdb_pages(clean);
  ASSERT_FALSE(live.pages.empty());
  ASSERT_TRUE(live.pages.front().root);
  ASSERT_EQ(live.pages.front().kind, test::LmdbPage::branch) << "expected a tree of depth 2";
  const auto db = dir / "db";
  int64_t variants = 0, failed_reads = 0, failed_opens = 0;
  for (const test::LmdbPage& page : live.pages) {
    const bool meta_leaf = page.kind == test::LmdbPage::leaf &&
                           !std::all_of(page.keys.begin(), page.keys.end(), is_sample_key);
    const std::string name = page.root ? "root" : meta_leaf ? "metadata leaf" : "leaf";
    for (const PageDamage& damage : header_damages(page, name)) {
      SCOPED_TRACE(damage.what);
      auto bytes = clean;
      std::copy(damage.bytes.begin(), damage.bytes.end(), bytes.begin() + damage.offset);
      test::write_bytes(db / "data.mdb", bytes);
      ++variants;
      std::string open_error;
      const std::set<int64_t> failed = read_everything(db, open_error);
      failed_opens += open_error.empty() ? 0 : 1;
      failed_reads += static_cast<int64_t>(failed.size());
      if (page.kind != test::LmdbPage::leaf || meta_leaf) continue;
      EXPECT_TRUE(open_error.empty()) << open_error;
      // The keys on other pages still read.
      for (const int64_t i : failed) {
        EXPECT_NE(std::find(page.keys.begin(), page.keys.end(), sample_key(i)), page.keys.end())
            << sample_key(i) << " failed, but is not on the damaged page";
      }
    }
  }
  EXPECT_GT(variants, 100);
  EXPECT_GT(failed_reads, 0);
  EXPECT_GT(failed_opens, 0);

  // The root's node count cleared: the metadata cannot be read, and the error says why.
  auto bytes = clean;
  bytes[live.pages.front().offset + 12] = 0;
  bytes[live.pages.front().offset + 13] = 0;
  test::write_bytes(db / "data.mdb", bytes);
  expect_error([&] { LmdbImageDataset ds(db); }, "damaged page");
  try {
    LmdbImageDataset ds(db);
  } catch (const Error& e) {
    EXPECT_EQ(e.message().find("not written by"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(db.string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(kMetaFormatKey), std::string::npos) << e.message();
  }
}

// A leaf node's value size or overflow page number damaged: LMDB returns a value that runs past
// the end of the file (reading it, outside LMDB, was a SIGBUS) or names a page that does not
// exist. Each is the record's "damaged page", found before anyone reads the value.
TEST(LmdbImageDataset, ValuesOutsideTheFileAreDamagedPages) {
  test::TempDir dir;
  const auto clean_db = dir / "clean";
  // 256-pixel images: each record is larger than a page, so LMDB stores it in overflow pages
  // and the leaf holds their first page number.
  pack_synth({.samples = 24, .classes = 2, .size = 256, .seed = 7}, clean_db, kQuiet);
  const auto clean = test::read_bytes(clean_db / "data.mdb");
  const test::LmdbPages live = test::live_lmdb_pages(clean);
  const size_t pages_in_file = clean.size() / live.page_size;
  std::vector<std::pair<std::string, std::pair<size_t, std::vector<uint8_t>>>> damages;
  std::vector<std::string> keys;
  for (const test::LmdbPage& page : live.pages) {
    if (page.kind != test::LmdbPage::leaf) continue;
    for (size_t n = 0; n < page.nodes.size(); ++n) {
      if (!is_sample_key(page.keys[n])) continue;
      const size_t node = page.nodes[n];
      // The value's size (lo, hi u16 at the node's start): 2 GiB.
      damages.push_back({page.keys[n] + " size", {node + 2, {0x00, 0x80}}});
      keys.push_back(page.keys[n]);
    }
    for (size_t r = 0; r < page.overflow_refs.size(); ++r) {
      const uint64_t last = pages_in_file - 1;
      std::vector<uint8_t> last_page(8), far_away(8, 0);
      for (int b = 0; b < 8; ++b) last_page[b] = static_cast<uint8_t>(last >> (8 * b));
      far_away[4] = 0x10;  // page 2^36: past every page in use
      // overflow_refs and nodes run in the same order over the sample keys' nodes.
      damages.push_back({"overflow of node " + std::to_string(r) + " -> last page",
                         {page.overflow_refs[r], last_page}});
      damages.push_back(
          {"overflow of node " + std::to_string(r) + " -> far", {page.overflow_refs[r], far_away}});
    }
  }
  ASSERT_GT(keys.size(), 10u);
  ASSERT_GT(damages.size(), 30u) << "expected overflow pages (records over half a page)";
  const auto db = dir / "db";
  int64_t outside = 0;
  for (const auto& [what, damage] : damages) {
    SCOPED_TRACE(what);
    auto bytes = clean;
    std::copy(damage.second.begin(), damage.second.end(), bytes.begin() + damage.first);
    test::write_bytes(db / "data.mdb", bytes);
    std::string open_error;
    const std::set<int64_t> failed = read_everything(db, open_error);
    EXPECT_TRUE(open_error.empty()) << open_error;
    EXPECT_EQ(failed.size(), 1u);  // exactly the damaged record; all others read
    LmdbImageDataset ds(db);
    auto reader = ds.reader();
    for (const int64_t i : failed) {
      std::string error;
      EXPECT_FALSE(reader.try_value(i, &error).has_value());
      if (error.find("past the end of the file") != std::string::npos) ++outside;
    }
  }
  EXPECT_GT(outside, 10);
}

TEST(LmdbImageDataset, ReportsItsReaderSlots) {
  test::TempDir dir;
  const auto path = handmade(dir, {}, 3);
  LmdbImageDataset ds(path, {.max_readers = 40});
  EXPECT_GE(ds.reader_slots(), 40);  // LMDB may round the lock table up to whole pages
  std::vector<LmdbImageDataset::Reader> readers;
  for (int i = 0; i < ds.reader_slots(); ++i) readers.push_back(ds.reader());
  EXPECT_THROW(ds.reader(), Error);  // one more: MDB_READERS_FULL
}

TEST(LmdbImageDataset, MissingRecord) {
  test::TempDir dir;
  const auto path = handmade(dir, {{kMetaSamplesKey, "5"}}, 3);
  LmdbImageDataset ds(path);
  auto reader = ds.reader();
  expect_error([&] { reader.read(4); }, "record missing");
}

// A database on a read-only folder (a shared dataset mount; another user's files) has no room for
// LMDB's lock file: it opens without one (a packed database is never written again) instead of
// failing with a hint to set a C++ option. Checked in a child that cannot write the folder: an
// unprivileged user when the test runs as root.
TEST(LmdbImageDataset, AReadOnlyFolderOpensWithoutALockFile) {
  test::TempDir dir;
  const auto db = dir / "db";
  pack_synth({.samples = 24, .classes = 2, .size = 32, .seed = 3}, db, kQuiet);
  std::filesystem::remove(db / "lock.mdb");
  namespace fs = std::filesystem;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(db / "data.mdb",
                  fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(db, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                          fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    auto report = [&](const std::string& text, int code) {
      [[maybe_unused]] const ssize_t n = ::write(pipe_fds[1], text.data(), text.size());
      ::_exit(code);
    };
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0))
      report("cannot drop to an unprivileged user", 77);
    if (::access(db.c_str(), W_OK) == 0) report("the folder is still writable", 77);
    try {
      LmdbImageDataset ds(db);
      LmdbImageDataset::Reader reader(ds);
      const SampleView v = reader.read(5);
      report(fmt::format("opened: {} samples, label {}", ds.size(), v.label),
             ds.size() == 24 ? 0 : 2);
    } catch (const Error& e) {
      report(fmt::format("{} | hint: {}", e.message(), e.hint()), 1);
    }
    report("unexpected exception", 3);
  }
  ::close(pipe_fds[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) said.append(buf, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  fs::permissions(db, fs::perms::owner_all);
  ASSERT_TRUE(WIFEXITED(status)) << said;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << said;
  EXPECT_EQ(WEXITSTATUS(status), 0) << said;
  EXPECT_FALSE(fs::exists(db / "lock.mdb"));
}

}  // namespace
}  // namespace stoker::data
