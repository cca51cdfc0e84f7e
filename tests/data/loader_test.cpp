#include "stoker/data/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "data/data_test_util.h"
#include "data/lmdb_pages.h"
#include "stoker/data/pack.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/pool.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace stoker;
using data::Loader;
using data::LoaderOptions;

namespace {

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("stoker_loader_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const data::SynthOptions synth{.samples = 96, .classes = 4, .size = 40, .seed = 3};
    data::pack_synth(synth, dir_ / "synth", {.threads = 2, .progress = false});
    // The same set with sample 5 replaced by bytes that are not a JPEG.
    data::pack_generated(96,
                         [&](int64_t i, int32_t& label) {
                           std::vector<uint8_t> jpeg = data::synth_jpeg(synth, i, label);
                           if (i == 5) jpeg.assign(100, 0x42);
                           return jpeg;
                         },
                         data::synth_class_names(4), dir_ / "corrupt",
                         {.threads = 1, .progress = false});
    // 40 samples whose labels are their ids (class i is sample i).
    std::vector<std::string> names;
    for (int i = 0; i < 40; ++i) names.push_back("id" + std::to_string(i));
    data::pack_generated(40,
                         [&](int64_t i, int32_t& label) {
                           std::vector<uint8_t> jpeg = data::synth_jpeg(synth, i, label);
                           label = static_cast<int32_t>(i);
                           return jpeg;
                         },
                         names, dir_ / "ids", {.threads = 1, .progress = false});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static LoaderOptions options(int threads) {
    return {.batch_size = 16,
            .threads = threads,
            .prefetch = 2,
            .transform = {.output_size = 24},
            .seed = 11};
  }

  static std::vector<uint8_t> bytes_of(const data::Batch& b) {
    std::vector<uint8_t> v(b.input.nbytes() + b.target.nbytes());
    std::memcpy(v.data(), b.input.data(), b.input.nbytes());
    std::memcpy(v.data() + b.input.nbytes(), b.target.data(), b.target.nbytes());
    return v;
  }

  // The rest of the current epoch.
  static std::vector<std::vector<uint8_t>> drain(Loader& l) {
    std::vector<std::vector<uint8_t>> out;
    data::Batch b;
    while (l.next(b)) out.push_back(bytes_of(b));
    return out;
  }

  static std::vector<std::vector<uint8_t>> epoch_bytes(Loader& l, int64_t epoch) {
    l.start_epoch(epoch);
    return drain(l);
  }

  // Waits (at most 20 s) until the loader holds `n` finished batches.
  static bool wait_ready(const Loader& l, int64_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    while (l.ready_batches() < n) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  static fs::path dir_;
};
fs::path LoaderTest::dir_;

TEST_F(LoaderTest, DeliversFullNormalizedBatches) {
  data::LmdbImageDataset ds(dir_ / "synth");
  Loader l(ds, options(2));
  EXPECT_EQ(l.batches_per_epoch(), 6);
  l.start_epoch(0);
  data::Batch b;
  int batches = 0;
  while (l.next(b)) {
    ++batches;
    ASSERT_EQ(b.input.shape(), Shape({16, 3, 24, 24}));
    ASSERT_EQ(b.input.dtype(), DType::f32);
    ASSERT_EQ(b.size, 16);
    for (int64_t y : b.target.to_vector<int64_t>()) ASSERT_TRUE(y >= 0 && y < 4);
    for (float v : b.input.to_floats()) {
      // (u8 / 255 - mean) / std lies within these bounds for ImageNet's mean/std.
      ASSERT_TRUE(std::isfinite(v) && v >= -2.2f && v <= 2.7f) << v;
    }
  }
  EXPECT_EQ(batches, 6);
  EXPECT_FALSE(l.next(b));
  EXPECT_EQ(l.counters().samples, 96);
  EXPECT_EQ(l.counters().skipped, 0);
}

TEST_F(LoaderTest, SameSeedSameBytesWhateverTheThreadCountAndEpochsDiffer) {
  data::LmdbImageDataset ds(dir_ / "synth");
  Loader one(ds, options(1)), two(ds, options(2));
  const auto a = epoch_bytes(one, 0), b = epoch_bytes(two, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "batch " << i;
  EXPECT_NE(epoch_bytes(one, 1), a);
  EXPECT_EQ(epoch_bytes(two, 0), a);  // restarting an epoch replays it
}

TEST_F(LoaderTest, MatchesTheTransformAndNormalizationDoneByHand) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(2);
  o.shuffle = false;
  o.layout = ops::Layout::nhwc;
  Loader l(ds, o);
  l.start_epoch(2);
  data::Batch b;
  ASSERT_TRUE(l.next(b));
  auto reader = ds.reader();
  data::JpegDecoder dec;
  std::vector<uint8_t> px(24 * 24 * 3);
  const auto got = b.input.to_floats();
  for (int64_t i = 0; i < 16; ++i) {
    const auto s = reader.read(i);
    data::augment_into(dec, s.payload, "k", 2, static_cast<uint64_t>(i), o.transform, px.data());
    for (size_t p = 0; p < px.size(); ++p) {
      const int c = static_cast<int>(p % 3);
      const float want =
          std::fmaf(static_cast<float>(px[p]), 1.0f / (255.0f * o.std[c]), -o.mean[c] / o.std[c]);
      ASSERT_EQ(got[i * px.size() + p], want) << "sample " << i << " value " << p;
    }
    EXPECT_EQ(b.target.to_vector<int64_t>()[i], s.label);
  }
}

// Bad case: a damaged byte in the header of a live leaf page of data.mdb ended training, also
// under the skip policy, with a signal inside mdb_get (here the leaf's node count: SIGSEGV).
// Now the samples on that page are bad samples: policy fail names the key and "damaged page",
// policy skip finishes the epoch without them.
TEST_F(LoaderTest, DamagedLmdbPageFailsOrIsSkippedNeverASignal) {
  const fs::path db = dir_ / "damaged_page";
  fs::create_directories(db);
  auto bytes = test::read_bytes(dir_ / "synth" / "data.mdb");
  const test::LmdbPages live = test::live_lmdb_pages(bytes);
  // A leaf of sample keys, not the first one (the metadata sort after the samples).
  const test::LmdbPage* leaf = nullptr;
  for (const test::LmdbPage& page : live.pages) {
    if (page.kind == test::LmdbPage::leaf && page.keys.size() > 1 &&
        page.keys.front() > data::sample_key(20) && page.keys.back() < data::sample_key(90)) {
      leaf = &page;
      break;
    }
  }
  ASSERT_NE(leaf, nullptr);
  bytes[leaf->offset + 12] = 0;  // lower = 0: LMDB computes a node count of 32760
  bytes[leaf->offset + 13] = 0;
  test::write_bytes(db / "data.mdb", bytes);
  data::LmdbImageDataset ds(db);
  LoaderOptions o = options(2);
  o.shuffle = false;
  {
    Loader l(ds, o);
    l.start_epoch(0);
    data::Batch b;
    try {
      while (l.next(b)) {
      }
      FAIL() << "a sample on a damaged page was not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("damaged page"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(db.string()), std::string::npos) << e.what();
    }
  }
  o.on_corrupt = data::CorruptPolicy::skip;
  Loader l(ds, o);
  l.start_epoch(0);
  data::Batch b;
  int64_t samples = 0;
  while (l.next(b)) samples += b.size;
  EXPECT_EQ(samples, 96);  // batches stay full
  EXPECT_EQ(l.counters().skipped, static_cast<int64_t>(leaf->keys.size()));
}

TEST_F(LoaderTest, CorruptSampleFailsNamingTheKeyOrIsSkipped) {
  data::LmdbImageDataset ds(dir_ / "corrupt");
  LoaderOptions o = options(2);
  o.shuffle = false;
  {
    Loader l(ds, o);
    l.start_epoch(0);
    data::Batch b;
    try {
      l.next(b);
      FAIL() << "a corrupt sample was not reported";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("0000000005"), std::string::npos) << msg;
      EXPECT_NE(msg.find("CorruptPolicy::skip"), std::string::npos) << msg;
    }
    EXPECT_TRUE(l.next(b));  // the loader keeps working after an error
  }
  o.on_corrupt = data::CorruptPolicy::skip;
  Loader l(ds, o);
  l.start_epoch(0);
  data::Batch b;
  int64_t samples = 0;
  while (l.next(b)) {
    ASSERT_EQ(b.size, 16);  // batches stay full
    samples += b.size;
  }
  EXPECT_EQ(samples, 96);
  EXPECT_EQ(l.counters().skipped, 1);
}

// A hand-written database of `n` synthetic JPEGs in which the records at `bad` are damaged in
// turn: a flipped payload bit (checksum), a payload that is not a JPEG (with a valid checksum),
// a missing record, a value cut short. Returns the damaged indices.
std::set<int64_t> pack_with_bad_records(const fs::path& db, int64_t n,
                                        const std::vector<int64_t>& bad) {
  const data::SynthOptions synth{.samples = n, .classes = 4, .size = 40, .seed = 3};
  std::map<std::string, std::string> entries = {
      {data::kMetaFormatKey, data::kImageFormatTag},
      {data::kMetaClassesKey, "circle\nsquare\ntriangle\ncross"},
      {data::kMetaSamplesKey, std::to_string(n)}};
  for (int64_t i = 0; i < n; ++i) {
    int32_t label = 0;
    const std::vector<uint8_t> jpeg = data::synth_jpeg(synth, i, label);
    entries[data::sample_key(i)] = data::encode_record(label, data::PayloadKind::jpeg, jpeg);
  }
  for (size_t k = 0; k < bad.size(); ++k) {
    std::string& value = entries[data::sample_key(bad[k])];
    switch (k % 4) {
      case 0:  // one bit of the JPEG flipped
        value[data::kRecordHeaderBytes + (value.size() - data::kRecordHeaderBytes) / 2] ^= 0x04;
        break;
      case 1: {  // stored intact, but not a JPEG
        const std::vector<uint8_t> junk(64, 0x42);
        value = data::encode_record(0, data::PayloadKind::jpeg, junk);
        break;
      }
      case 2:
        entries.erase(data::sample_key(bad[k]));
        break;
      case 3:
        value.resize(value.size() - 10);
        break;
    }
  }
  test::lmdb_put(db, entries);
  return {bad.begin(), bad.end()};
}

// The bad samples a loader meets in one epoch of `order`: each sampled bad index and, walking
// forward from it to the replacement, every bad one the walk passes.
std::set<int64_t> bad_met(const std::set<int64_t>& bad, std::span<const int64_t> order, int64_t n) {
  std::set<int64_t> met;
  for (const int64_t first : order) {
    for (int64_t idx = first; bad.count(idx) != 0; idx = (idx + 1) % n) met.insert(idx);
  }
  return met;
}

// The stderr lines of `log` that contain `what`.
std::vector<std::string> lines_with(const std::string& log, const std::string& what) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < log.size()) {
    const size_t end = std::min(log.find('\n', start), log.size());
    const std::string line = log.substr(start, end - start);
    if (line.find(what) != std::string::npos) out.push_back(line);
    start = end + 1;
  }
  return out;
}

// Policy skip: a bad sample counts once per epoch however many replacement walks pass it (runs
// of adjacent bad records, one at the end that wraps around), the first few are named on stderr
// with their reasons, then one line counts the rest.
TEST_F(LoaderTest, SkipCountsEachBadSampleOncePerEpochAndNamesThem) {
  const std::vector<int64_t> damaged = {5, 6, 7, 20, 40, 63};
  const auto bad = pack_with_bad_records(dir_ / "six_bad", 64, damaged);
  data::LmdbImageDataset ds(dir_ / "six_bad");
  LoaderOptions o = options(2);  // 4 batches of 16: every sample each epoch
  o.on_corrupt = data::CorruptPolicy::skip;
  Loader l(ds, o);
  const int64_t k = static_cast<int64_t>(bad.size());
  for (int64_t e = 0; e < 2; ++e) {
    ::testing::internal::CaptureStderr();
    l.start_epoch(e);
    data::Batch b;
    int64_t samples = 0;
    while (l.next(b)) {
      ASSERT_EQ(b.size, 16);
      samples += b.size;
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(samples, 64);
    EXPECT_EQ(l.counters().skipped, (e + 1) * k) << "epoch " << e;
    const std::string epoch = "stoker loader: epoch " + std::to_string(e) + ": ";
    const auto named = lines_with(log, epoch + "skipped ");
    ASSERT_EQ(named.size(), static_cast<size_t>(Loader::kLoggedSkipsPerEpoch)) << log;
    std::set<std::string> keys;
    for (const std::string& line : named) {
      // "<db> key <key>: <reason>"
      const size_t at = line.find(" key ");
      ASSERT_NE(at, std::string::npos) << line;
      const std::string key = line.substr(at + 5, data::kSampleKeyDigits);
      EXPECT_EQ(bad.count(std::stoll(key)), 1u) << line;
      EXPECT_NE(line.find((dir_ / "six_bad").string()), std::string::npos) << line;
      EXPECT_GT(line.size(), at + 5 + data::kSampleKeyDigits + 2) << "no reason: " << line;
      keys.insert(key);
    }
    EXPECT_EQ(keys.size(), named.size()) << log;  // each named once
    EXPECT_EQ(lines_with(log, epoch + std::to_string(k - Loader::kLoggedSkipsPerEpoch) +
                                  " more skipped this epoch (" + std::to_string(k) + " in all)")
                  .size(),
              1u)
        << log;
  }
  // The reasons name what is wrong with each kind of damage.
  ::testing::internal::CaptureStderr();
  LoaderOptions in_order = o;
  in_order.shuffle = false;
  Loader sequential(ds, in_order);
  sequential.start_epoch(0);
  data::Batch b;
  while (sequential.next(b)) {
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(sequential.counters().skipped, k);
  EXPECT_NE(log.find("key 0000000005: record checksum mismatch"), std::string::npos) << log;
  EXPECT_NE(log.find("key 0000000006: JPEG decode failed"), std::string::npos) << log;
  EXPECT_NE(log.find("key 0000000007: record missing"), std::string::npos) << log;
  EXPECT_NE(log.find("key 0000000020: truncated payload"), std::string::npos) << log;
  EXPECT_NE(log.find("key 0000000040: record checksum mismatch"), std::string::npos) << log;
}

// With a shard per rank, the count is the bad samples this rank met (its own and those its
// replacement walks passed), and the log lines say which rank.
TEST_F(LoaderTest, SkipCountIsPerRankAndTheLogNamesTheRank) {
  const auto bad = pack_with_bad_records(dir_ / "ranked", 64, {2, 3, 30, 31, 32, 50, 51});
  data::LmdbImageDataset ds(dir_ / "ranked");
  LoaderOptions o = options(2);
  o.on_corrupt = data::CorruptPolicy::skip;
  o.world_size = 2;
  o.rank = 1;
  o.batch_size = 8;  // 32 samples per rank: 4 batches
  Loader l(ds, o);
  data::Sampler order(64, {.shuffle = true,
                           .seed = o.seed,
                           .rank = 1,
                           .world_size = 2,
                           .batch_size = 8,
                           .drop_last = true});
  int64_t want = 0;
  for (int64_t e = 0; e < 3; ++e) {
    order.set_epoch(e);
    const auto met = bad_met(bad, order.indices(), 64);
    want += static_cast<int64_t>(met.size());
    ::testing::internal::CaptureStderr();
    l.start_epoch(e);
    data::Batch b;
    while (l.next(b)) {
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(l.counters().skipped, want) << "epoch " << e;
    const auto named = lines_with(log, "stoker loader [rank 1]: epoch " + std::to_string(e));
    EXPECT_EQ(named.size(), std::min<size_t>(met.size(), Loader::kLoggedSkipsPerEpoch) +
                                (met.size() > Loader::kLoggedSkipsPerEpoch ? 1 : 0))
        << log;
  }
  EXPECT_GT(want, 0);
}

// Policy fail: a flipped payload bit stops the epoch with an error that names the key and the
// checksum, and whose hint names both ways to skip instead.
TEST_F(LoaderTest, FlippedPayloadBitFailsNamingTheKeyOrIsSkipped) {
  const auto bad = pack_with_bad_records(dir_ / "one_flip", 32, {9});
  data::LmdbImageDataset ds(dir_ / "one_flip");
  LoaderOptions o = options(2);
  o.shuffle = false;
  {
    Loader l(ds, o);
    l.start_epoch(0);
    data::Batch b;
    try {
      l.next(b);
      FAIL() << "a damaged sample was not reported";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("key 0000000009: record checksum mismatch"), std::string::npos)
          << e.message();
      EXPECT_NE(e.hint().find("--on-corrupt skip"), std::string::npos) << e.hint();
      EXPECT_NE(e.hint().find("LoaderOptions::on_corrupt"), std::string::npos) << e.hint();
    }
  }
  o.on_corrupt = data::CorruptPolicy::skip;
  Loader l(ds, o);
  l.start_epoch(0);
  data::Batch b;
  int64_t samples = 0;
  while (l.next(b)) samples += b.size;
  EXPECT_EQ(samples, 32);
  EXPECT_EQ(l.counters().skipped, 1);
}

// Options are checked when the Loader is made, each error naming its LoaderOptions field: more
// decode threads than the dataset's reader slots would fail later from a worker thread.
TEST_F(LoaderTest, OptionsAreCheckedAtConstruction) {
  data::LmdbImageDataset ds(dir_ / "synth");
  const int slots = ds.reader_slots();
  ASSERT_GT(slots, 0);
  auto error_of = [&](const LoaderOptions& o) -> std::string {
    try {
      Loader l(ds, o);
    } catch (const Error& e) {
      return e.message() + "\n" + e.hint();
    }
    return "(no error)";
  };
  LoaderOptions o = options(slots + 1);
  std::string e = error_of(o);
  EXPECT_NE(e.find("LoaderOptions::threads (`--threads`) is " + std::to_string(slots + 1)),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("[0, " + std::to_string(slots) + "]"), std::string::npos) << e;
  EXPECT_NE(e.find("LmdbOptions::max_readers"), std::string::npos) << e;
  o = options(0);
  o.max_threads = slots + 1;
  e = error_of(o);
  EXPECT_NE(e.find("LoaderOptions::max_threads is " + std::to_string(slots + 1)), std::string::npos)
      << e;
  o = options(-1);
  EXPECT_NE(error_of(o).find("LoaderOptions::threads (`--threads`) is -1"), std::string::npos);
  o = options(1);
  o.batch_size = -4;
  EXPECT_NE(error_of(o).find("LoaderOptions::batch_size is -4"), std::string::npos);
  o = options(1);
  o.prefetch = -1;
  EXPECT_NE(error_of(o).find("LoaderOptions::prefetch is -1"), std::string::npos);
}

// A dataset with fewer reader slots than hardware threads bounds the autotuner's default thread
// count (instead of workers failing with MDB_READERS_FULL).
TEST_F(LoaderTest, FewReaderSlotsBoundTheDefaultThreadCount) {
  // A copy without lock.mdb: the open creates a lock file with exactly the slots asked for.
  const fs::path copy = dir_ / "one_slot";
  fs::create_directories(copy);
  fs::copy_file(dir_ / "synth" / "data.mdb", copy / "data.mdb",
                fs::copy_options::overwrite_existing);
  fs::remove(copy / "lock.mdb");
  data::LmdbImageDataset ds(copy, {.max_readers = 1});
  ASSERT_EQ(ds.reader_slots(), 1);
  Loader l(ds, options(0));
  EXPECT_EQ(l.max_threads(), 1);
  EXPECT_EQ(epoch_bytes(l, 0).size(), 6u);
}

TEST_F(LoaderTest, DestructorReturnsPromptlyWhileThreadsAreBusy) {
  data::LmdbImageDataset ds(dir_ / "synth");
  const auto t0 = std::chrono::steady_clock::now();
  {
    LoaderOptions o = options(2);
    o.prefetch = 4;
    Loader l(ds, o);
    l.start_epoch(0);  // the producer starts filling 5 slots; destroy at once
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST_F(LoaderTest, BadOptionsAndUseBeforeStart) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(1);
  o.batch_size = 0;
  EXPECT_THROW(Loader(ds, o), Error);
  Loader l(ds, options(1));
  data::Batch b;
  EXPECT_THROW(l.next(b), Error);
}

// The next epoch's first batches are made while the consumer is still in the current one (the
// Sampler knows epoch e+1's order in advance) and start_epoch(e+1) delivers them: same bytes as
// a loader that never overlapped.
TEST_F(LoaderTest, NextEpochIsPreparedAheadWithTheSameBytes) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions plain = options(1);
  plain.prefetch_next_epoch = false;
  Loader reference(ds, plain);
  std::vector<std::vector<std::vector<uint8_t>>> want;
  for (int64_t e = 0; e < 3; ++e) want.push_back(epoch_bytes(reference, e));
  EXPECT_EQ(reference.counters().early_batches, 0);

  LoaderOptions o = options(2);
  o.prefetch = 3;
  Loader l(ds, o);
  EXPECT_EQ(epoch_bytes(l, 0), want[0]);
  for (int64_t e = 1; e < 3; ++e) {
    // The epoch is over; the threads go on with the next one.
    ASSERT_TRUE(wait_ready(l, 3)) << "no batch of epoch " << e << " was prepared ahead";
    const int64_t early_before = l.counters().early_batches;
    EXPECT_EQ(epoch_bytes(l, e), want[static_cast<size_t>(e)]) << "epoch " << e;
    EXPECT_GE(l.counters().early_batches - early_before, 3);
  }
  EXPECT_EQ(l.counters().discarded_batches, 0);
  EXPECT_EQ(l.counters().samples, 3 * 96);
}

// Bytes are a function of (seed, epoch, batch) only: every thread count, depth, autotuning and
// whether the epoch boundary overlapped give the same epochs.
TEST_F(LoaderTest, SameBytesWhateverThreadsDepthAutotuningAndOverlap) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions plain = options(1);
  plain.prefetch = 1;
  plain.prefetch_next_epoch = false;
  Loader reference(ds, plain);
  std::vector<std::vector<std::vector<uint8_t>>> want;
  for (int64_t e = 0; e < 3; ++e) want.push_back(epoch_bytes(reference, e));
  struct Config {
    int threads, prefetch;
    bool overlap;
  };
  for (const Config c : {Config{2, 4, true}, Config{3, 2, true}, Config{0, 0, true},
                         Config{4, 1, true}, Config{2, 2, false}}) {
    LoaderOptions o = options(c.threads);
    o.prefetch = c.prefetch;
    o.prefetch_next_epoch = c.overlap;
    o.max_threads = 4;
    Loader l(ds, o);
    for (int64_t e = 0; e < 3; ++e) {
      EXPECT_EQ(epoch_bytes(l, e), want[static_cast<size_t>(e)])
          << "threads " << c.threads << " prefetch " << c.prefetch << " overlap " << c.overlap
          << " epoch " << e;
    }
  }
}

// restore() and out-of-order start_epoch() drop what was prepared for other positions and keep
// what fits; every batch still equals the reference.
TEST_F(LoaderTest, RestoreAndJumpsKeepOnlyMatchingBatches) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions plain = options(1);
  plain.prefetch_next_epoch = false;
  Loader reference(ds, plain);
  const auto e0 = epoch_bytes(reference, 0), e3 = epoch_bytes(reference, 3);

  LoaderOptions o = options(2);
  o.prefetch = 4;
  Loader l(ds, o);
  l.start_epoch(0);
  data::Batch b;
  ASSERT_TRUE(l.next(b));
  EXPECT_EQ(bytes_of(b), e0[0]);
  ASSERT_TRUE(wait_ready(l, 4));
  l.restore(0, 3);  // batches 1 and 2 are dropped, 3 and 4 kept
  EXPECT_EQ(l.batch_index(), 3);
  EXPECT_EQ(drain(l), std::vector<std::vector<uint8_t>>(e0.begin() + 3, e0.end()));
  EXPECT_GE(l.counters().discarded_batches, 2);
  l.restore(3, 1);  // a jump: nothing prepared fits
  EXPECT_EQ(l.epoch(), 3);
  EXPECT_EQ(drain(l), std::vector<std::vector<uint8_t>>(e3.begin() + 1, e3.end()));
  EXPECT_EQ(epoch_bytes(l, 0), e0);     // back to the start: replayed
  l.restore(1, l.batches_per_epoch());  // the end of an epoch: nothing left
  EXPECT_FALSE(l.next(b));
}

// An evaluation loader (no shuffle, eval transform) makes the same batches every epoch, so what
// it prepared after one pass serves the next pass whatever epoch number it is given.
TEST_F(LoaderTest, EvaluationLoaderStartsWarmEveryPass) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(2);
  o.shuffle = false;
  o.transform.train = false;
  o.transform.eval_resize = 28;
  o.prefetch = 2;
  Loader l(ds, o);
  const auto first = epoch_bytes(l, 0);
  ASSERT_TRUE(wait_ready(l, 2));
  EXPECT_EQ(epoch_bytes(l, 0), first);
  EXPECT_GE(l.counters().early_batches, 2);
  ASSERT_TRUE(wait_ready(l, 2));
  EXPECT_EQ(epoch_bytes(l, 7), first);
  EXPECT_EQ(l.counters().discarded_batches, 0);
}

TEST_F(LoaderTest, PerStageCountersAddUp) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(2);
  o.prefetch_next_epoch = false;
  Loader l(ds, o);
  epoch_bytes(l, 0);
  const data::LoaderCounters c = l.counters();
  EXPECT_EQ(c.batches, 6);
  EXPECT_EQ(c.samples, 96);
  EXPECT_EQ(c.samples_decoded, 96);
  EXPECT_GT(c.read_s, 0.0);
  EXPECT_GT(c.header_s, 0.0);
  EXPECT_GT(c.decode_s, 0.0);
  EXPECT_GT(c.resize_s, 0.0);
  EXPECT_GT(c.normalize_s, 0.0);
  EXPECT_GE(c.consumer_wait_s, 0.0);
  EXPECT_GE(c.worker_s, c.read_s + c.header_s + c.decode_s + c.resize_s);
  EXPECT_EQ(c.copy_s, 0.0);  // CPU loader: no host-to-device copy
  EXPECT_EQ(c.copy_device_s, 0.0);
  EXPECT_EQ(c.early_batches, 0);
}

TEST_F(LoaderTest, ExplicitThreadsAndDepthAreKept) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(3);
  o.prefetch = 2;
  Loader l(ds, o);
  EXPECT_EQ(l.max_threads(), 3);
  for (int64_t e = 0; e < 3; ++e) {
    l.start_epoch(e);
    data::Batch b;
    while (l.next(b)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(15));  // a slow consumer
      EXPECT_LE(l.ready_batches(), 2);
    }
  }
  EXPECT_EQ(l.tuning().threads, 3);
  EXPECT_EQ(l.tuning().prefetch, 2);
  EXPECT_NE(l.summary().find("3 threads (fixed"), std::string::npos) << l.summary();
  EXPECT_NE(l.summary().find("prefetch 2 batches (fixed"), std::string::npos) << l.summary();
}

// With a consumer far slower than the decoding, the autotuner hands threads back, one step per
// measurement window, and says so in summary().
TEST_F(LoaderTest, AutotunerShrinksThreadsForASlowConsumer) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(0);
  o.batch_size = 4;  // 24 batches per epoch
  o.prefetch = 0;
  o.max_threads = 4;
  Loader l(ds, o);
  EXPECT_EQ(l.tuning().threads, 4);
  EXPECT_EQ(l.tuning().prefetch, Loader::kAutoPrefetchStart);
  for (int64_t e = 0; e < 4 && l.tuning().threads == 4; ++e) {
    l.start_epoch(e);
    data::Batch b;
    while (l.next(b)) std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  EXPECT_LT(l.tuning().threads, 4) << l.summary();
  const std::string s = l.summary();
  EXPECT_NE(s.find("(auto, at most 4)"), std::string::npos) << s;
  EXPECT_NE(s.find("fewer threads"), std::string::npos) << s;
}

// The Trainer consumes the loader: a small CNN learns the synthetic shapes.
TEST_F(LoaderTest, TrainerLearnsFromTheLoader) {
  data::LmdbImageDataset ds(dir_ / "synth");
  Loader l(ds, options(2));
  nn::manual_seed(5);
  nn::Sequential model(nn::make<nn::Conv2d>(3, 8, 3, 1, 1), nn::make<nn::ReLU>(),
                       nn::make<nn::MaxPool2d>(2), nn::make<nn::Conv2d>(8, 16, 3, 1, 1),
                       nn::make<nn::ReLU>(), nn::make<nn::GlobalAvgPool>(),
                       nn::make<nn::Linear>(16, 4));
  optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f});
  nn::CrossEntropyLoss loss;
  train::Trainer t(model, loss, opt, {.log_interval = 6, .progress_bar = false, .quiet = true});
  const auto r = t.fit(l, 6);
  ASSERT_GE(r.log.size(), 2u);
  EXPECT_LT(r.log.back().loss, r.log.front().loss);
}

// Elastic resume on the "ids" database (labels are the sample ids): 2 ranks deliver 2 batches of
// 4 each, then 1 rank continues the epoch. The 1-rank loader first prepared batches of the
// plain epoch, which the continuation drops; together the ranks deliver every sample once, the
// bytes are those of a loader that continued from the start, and the next epoch (prepared ahead
// while the continued one ended) is a plain 1-rank epoch.
TEST_F(LoaderTest, ContinuedEpochDeliversTheRestOnceAtAnotherWorldSize) {
  data::LmdbImageDataset ds(dir_ / "ids");
  const auto opts = [](int rank, int world) {
    LoaderOptions o = options(2);
    o.batch_size = 4;
    o.rank = rank;
    o.world_size = world;
    return o;
  };
  const int64_t epoch = 1;
  std::map<int64_t, int64_t> seen;
  const auto add = [&](const data::Batch& b) {
    for (int64_t y : b.target.to_vector<int64_t>()) seen[y] += 1;
  };
  int64_t progress = -1;
  data::Batch b;
  for (int rank = 0; rank < 2; ++rank) {
    Loader l(ds, opts(rank, 2));
    l.start_epoch(epoch);
    EXPECT_EQ(l.epoch_progress(), 0);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(l.next(b));
      add(b);
    }
    progress = l.epoch_progress();
    EXPECT_EQ(progress, 16);
  }

  Loader reference(ds, opts(0, 1));
  ASSERT_TRUE(reference.continue_epoch(epoch, progress));
  const auto want = drain(reference);
  ASSERT_EQ(want.size(), 6u);  // 24 samples left, batches 4..9 of 10

  Loader one(ds, opts(0, 1));
  one.start_epoch(epoch);
  ASSERT_TRUE(one.next(b));
  ASSERT_TRUE(wait_ready(one, 2));
  ASSERT_TRUE(one.continue_epoch(epoch, progress));
  EXPECT_EQ(one.epoch(), epoch);
  EXPECT_EQ(one.batch_index(), 4);
  EXPECT_EQ(one.batches_per_epoch(), 10);
  EXPECT_EQ(one.epoch_progress(), 16);
  std::vector<std::vector<uint8_t>> got;
  while (one.next(b)) {
    got.push_back(bytes_of(b));
    add(b);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(one.batch_index(), 10);
  EXPECT_EQ(one.epoch_progress(), 40);
  ASSERT_EQ(seen.size(), 40u);
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << "sample " << id;

  // The next epoch: plain, partly prepared while the continued one ended.
  Loader plain(ds, opts(0, 1));
  const auto next_epoch = epoch_bytes(plain, epoch + 1);
  ASSERT_TRUE(wait_ready(one, 2));
  const int64_t early = one.counters().early_batches;
  EXPECT_EQ(epoch_bytes(one, epoch + 1), next_epoch);
  EXPECT_GE(one.counters().early_batches - early, 2);
  EXPECT_EQ(one.epoch_progress(), 40);
}

// Prepared batches of a continued epoch never serve the plain epoch of the same number (nor the
// other way round), and a continued epoch can be continued again.
TEST_F(LoaderTest, ContinuationAndPlainEpochsNeverShareBatches) {
  data::LmdbImageDataset ds(dir_ / "ids");
  LoaderOptions o = options(2);
  o.batch_size = 4;
  o.prefetch = 4;
  Loader plain(ds, o);
  const auto e0 = epoch_bytes(plain, 0);
  Loader cont_ref(ds, o);
  ASSERT_TRUE(cont_ref.continue_epoch(0, 9));  // 31 left: 7 batches, from batch 3
  const auto c0 = drain(cont_ref);
  ASSERT_EQ(c0.size(), 7u);

  Loader l(ds, o);
  ASSERT_TRUE(l.continue_epoch(0, 9));
  ASSERT_TRUE(wait_ready(l, 4));
  l.restore(0, 5);  // the same positions, another plan: nothing kept
  EXPECT_EQ(drain(l), std::vector<std::vector<uint8_t>>(e0.begin() + 5, e0.end()));
  l.restore(0, 2);
  data::Batch b;
  ASSERT_TRUE(l.next(b));
  ASSERT_TRUE(wait_ready(l, 3));
  ASSERT_TRUE(l.continue_epoch(0, 9));
  EXPECT_EQ(drain(l), c0);
  // Continued, checkpointed after two batches, continued again at the same world size.
  ASSERT_TRUE(l.continue_epoch(0, 9));
  ASSERT_TRUE(l.next(b));
  ASSERT_TRUE(l.next(b));
  const int64_t p = l.epoch_progress();
  EXPECT_EQ(p, 17);
  ASSERT_TRUE(l.continue_epoch(0, p));
  EXPECT_EQ(l.batch_index(), 5);
  EXPECT_EQ(drain(l), std::vector<std::vector<uint8_t>>(c0.begin() + 2, c0.end()));
}

TEST_F(LoaderTest, ContinuationProgressOutOfRangeIsAnErrorNamingIt) {
  data::LmdbImageDataset ds(dir_ / "ids");
  LoaderOptions o = options(1);
  o.batch_size = 4;
  Loader l(ds, o);
  try {
    l.continue_epoch(0, 41);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("progress 41"), std::string::npos) << what;
    EXPECT_NE(what.find("[0, 40]"), std::string::npos) << what;
  }
  EXPECT_THROW(l.continue_epoch(0, -1), Error);
  EXPECT_THROW(l.continue_epoch(-1, 0), Error);
  data::Batch b;
  EXPECT_THROW(l.next(b), Error);  // still not started
}

}  // namespace
