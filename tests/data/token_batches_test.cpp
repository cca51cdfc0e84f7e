#include "stoker/data/token_batches.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "data_test_util.h"

namespace stoker::data {
namespace {

// Token k of the file is (k * 7) % vocab, so each row's content follows from its first token.
std::filesystem::path write_tokens(const test::TempDir& dir, int64_t n, uint32_t vocab) {
  std::vector<uint8_t> bytes;
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t v = static_cast<uint32_t>((k * 7) % vocab);
    bytes.push_back(static_cast<uint8_t>(v));
    bytes.push_back(static_cast<uint8_t>(v >> 8));
  }
  const auto path = dir / "tokens.u16";
  test::write_bytes(path, bytes);
  return path;
}

TEST(TokenBatches, ShapesAndShiftedTargetsMatchTheDatasetWindows) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 2000, 60000);
  TokenDataset ds(path, {.context = 16, .seed = 5});
  TokenBatches src(ds, {.batch_size = 4});
  EXPECT_EQ(src.batches_per_epoch(), 2000 / 17 / 4);
  EXPECT_EQ(src.samples_per_epoch(), src.batches_per_epoch() * 4);
  src.start_epoch(1);
  Batch b;
  ASSERT_TRUE(src.next(b));
  ASSERT_TRUE(src.next(b));  // the second batch: windows 4..7 of epoch 1
  EXPECT_EQ(b.size, 4);
  ASSERT_EQ(b.input.shape(), Shape({4, 16}));
  ASSERT_EQ(b.target.shape(), Shape({64}));
  ASSERT_EQ(b.input.dtype(), DType::i64);
  const auto* in = b.input.data<int64_t>();
  const auto* tg = b.target.data<int64_t>();
  for (int64_t j = 0; j < 4; ++j) {
    const int64_t off = ds.offset(1, 4 + j);
    for (int64_t k = 0; k < 16; ++k) {
      EXPECT_EQ(in[j * 16 + k], ((off + k) * 7) % 60000);
      EXPECT_EQ(tg[j * 16 + k], ((off + k + 1) * 7) % 60000);
    }
  }
  EXPECT_EQ(src.batch_index(), 2);
}

TEST(TokenBatches, EpochEndsAfterItsBatchesAndRestoreContinuesExactly) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 1000, 50000);
  TokenDataset ds(path, {.context = 8, .seed = 2, .dtype = DType::i32});
  TokenBatches src(ds, {.batch_size = 3, .batches_per_epoch = 5});
  src.start_epoch(0);
  std::vector<Batch> seen;
  Batch b;
  while (src.next(b)) seen.push_back(b);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_FALSE(src.next(b));

  TokenBatches resumed(ds, {.batch_size = 3, .batches_per_epoch = 5});
  resumed.restore(0, 3);
  ASSERT_TRUE(resumed.next(b));
  EXPECT_EQ(b.input.to_vector<int32_t>(), seen[3].input.to_vector<int32_t>());
  EXPECT_EQ(b.target.to_vector<int32_t>(), seen[3].target.to_vector<int32_t>());
  EXPECT_THROW(resumed.restore(0, 6), Error);
}

TEST(TokenBatches, RanksSeeDisjointWindowsThatTogetherFormTheSingleRankOrder) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 5000, 65000);
  TokenDataset ds(path, {.context = 10, .seed = 9});
  TokenBatches one(ds, {.batch_size = 2});
  TokenBatches r0(ds, {.batch_size = 2, .rank = 0, .world_size = 2});
  TokenBatches r1(ds, {.batch_size = 2, .rank = 1, .world_size = 2});
  EXPECT_EQ(r0.batches_per_epoch(), 5000 / 11 / 4);
  // Step b of a 2-rank job covers single-rank batches 2b (rank 0) and 2b + 1 (rank 1).
  for (int64_t step = 0; step < 3; ++step) {
    EXPECT_EQ(r0.batch_at(0, step).input.to_vector<int64_t>(),
              one.batch_at(0, 2 * step).input.to_vector<int64_t>());
    EXPECT_EQ(r1.batch_at(0, step).input.to_vector<int64_t>(),
              one.batch_at(0, 2 * step + 1).input.to_vector<int64_t>());
  }
  EXPECT_THROW(TokenBatches(ds, {.rank = 2, .world_size = 2}), Error);
}

TEST(TokenBatches, TooSmallAFileNamesTheFix) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 40, 100);
  TokenDataset ds(path, {.context = 8});
  try {
    TokenBatches src(ds, {.batch_size = 8});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one batch"), std::string::npos) << e.what();
  }
}

// A token file whose window 0 of epoch 0 holds one token past the vocabulary (4242 of 1000), at
// `*bad_pos`; every other token is (k * 7) % 1000.
std::filesystem::path write_tokens_with_a_bad_one(const test::TempDir& dir, int64_t* bad_pos) {
  const auto path = write_tokens(dir, 3000, 1000);
  int64_t off = 0;
  {
    const TokenDataset clean(path, {.context = 16, .seed = 5, .vocab_size = 1000});
    off = clean.offset(0, 0);
  }
  *bad_pos = off + 3;
  std::vector<uint8_t> bytes = test::read_bytes(path);
  bytes[static_cast<size_t>(*bad_pos) * 2] = static_cast<uint8_t>(4242 & 0xff);
  bytes[static_cast<size_t>(*bad_pos) * 2 + 1] = static_cast<uint8_t>(4242 >> 8);
  test::write_bytes(path, bytes);
  return path;
}

// Every token of the batch is below `vocab`, and each row is a real window of the file (its
// tokens step by 7 modulo 1000, the target is the input shifted by one).
void expect_clean_windows(const Batch& b, int64_t context) {
  const std::vector<int64_t> in = b.input.to_vector<int64_t>();
  const std::vector<int64_t> tg = b.target.to_vector<int64_t>();
  ASSERT_EQ(in.size(), tg.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_LT(in[i], 1000) << i;
    ASSERT_LT(tg[i], 1000) << i;
    ASSERT_EQ(tg[i], (in[i] + 7) % 1000) << i;
    if (i % static_cast<size_t>(context) != 0) ASSERT_EQ(in[i], (in[i - 1] + 7) % 1000) << i;
  }
}

TEST(TokenBatches, ACorruptTokenFailsWithAHintToSkip) {
  test::TempDir dir;
  int64_t bad = 0;
  const auto path = write_tokens_with_a_bad_one(dir, &bad);
  TokenDataset ds(path, {.context = 16, .seed = 5, .vocab_size = 1000});
  TokenBatches src(ds, {.batch_size = 4});  // fail is the default
  src.start_epoch(0);
  Batch b;
  try {
    src.next(b);
    FAIL() << "a window with token 4242 of vocab_size 1000 was delivered";
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("--on-corrupt skip"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(path.string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("token 4242 at position " + std::to_string(bad)), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("vocab_size 1000"), std::string::npos) << e.message();
  }
  EXPECT_EQ(src.skipped(), 0);
  EXPECT_THROW(src.batch_at(0, 0), Error);
}

TEST(TokenBatches, SkipReplacesACorruptWindowDeterministicallyAndCountsIt) {
  test::TempDir dir;
  int64_t bad = 0;
  const auto path = write_tokens_with_a_bad_one(dir, &bad);
  TokenDataset ds(path, {.context = 16, .seed = 5, .vocab_size = 1000});
  TokenDataset ds2(path, {.context = 16, .seed = 5, .vocab_size = 1000});
  const TokenBatchesOptions o{.batch_size = 4, .on_corrupt = CorruptPolicy::skip};
  TokenBatches src(ds, o), again(ds2, o);
  ASSERT_GT(src.batches_per_epoch(), 10);
  std::vector<Batch> first;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    src.start_epoch(epoch);
    again.start_epoch(epoch);
    Batch b, c;
    int64_t n = 0;
    while (src.next(b)) {
      SCOPED_TRACE(testing::Message() << "epoch " << epoch << " batch " << n);
      ASSERT_TRUE(again.next(c));
      expect_clean_windows(b, 16);
      EXPECT_EQ(b.input.to_vector<int64_t>(), c.input.to_vector<int64_t>());
      EXPECT_EQ(b.target.to_vector<int64_t>(), c.target.to_vector<int64_t>());
      if (epoch == 0) first.push_back(b);
      ++n;
    }
    EXPECT_FALSE(again.next(c));
    EXPECT_EQ(n, src.batches_per_epoch());
  }
  EXPECT_GE(src.skipped(), 1);
  EXPECT_EQ(src.skipped(), again.skipped());
  EXPECT_NE(src.first_skipped().find("token 4242 at position " + std::to_string(bad)),
            std::string::npos)
      << src.first_skipped();
  // Window 0 was replaced; windows 1..3 that do not cover the bad token are the dataset's own.
  EXPECT_THROW(ds.window(0, 0), Error);
  int64_t bad_in_batch0 = 1;
  for (int64_t j = 1; j < 4; ++j) {
    const int64_t off = ds.offset(0, j);
    if (off <= bad && bad <= off + 16) {
      ++bad_in_batch0;
      continue;
    }
    const std::vector<int64_t> in = first[0].input.to_vector<int64_t>();
    EXPECT_EQ(std::vector<int64_t>(in.begin() + j * 16, in.begin() + (j + 1) * 16),
              ds.window(0, j).input.to_vector<int64_t>())
        << j;
  }
  // The same replacement after a restore, and from batch_at.
  TokenBatches resumed(ds, o);
  resumed.restore(0, 0);
  Batch r;
  ASSERT_TRUE(resumed.next(r));
  EXPECT_EQ(r.input.to_vector<int64_t>(), first[0].input.to_vector<int64_t>());
  EXPECT_EQ(resumed.skipped(), bad_in_batch0);
  EXPECT_EQ(resumed.batch_at(0, 0).input.to_vector<int64_t>(), first[0].input.to_vector<int64_t>());
  EXPECT_EQ(resumed.batch_at(0, 0).target.to_vector<int64_t>(),
            first[0].target.to_vector<int64_t>());
  // The identity (and so what a checkpoint records) does not depend on the policy.
  EXPECT_EQ(src.identity().fingerprint, TokenBatches(ds, {.batch_size = 4}).identity().fingerprint);
}

// ---------------------------------------------------------------------------------------------
// Elastic resume. Tokens are 7 * position (vocab 60000 > 7 * 1000), so a row's first token
// names its window's offset.

using Offsets = std::multiset<int64_t>;

// The offsets of the windows `src` delivers from its position up to batch index `until` (-1: the
// epoch's end).
void take_windows(TokenBatches& src, int64_t until, Offsets& out) {
  Batch b;
  while ((until < 0 || src.batch_index() < until) && src.next(b)) {
    const std::vector<int64_t> in = b.input.to_vector<int64_t>();
    for (int64_t j = 0; j < b.size; ++j) out.insert(in[static_cast<size_t>(j * src.context())] / 7);
  }
}

Offsets windows_of(const TokenDataset& ds, int64_t epoch, int64_t from, int64_t to) {
  Offsets o;
  for (int64_t i = from; i < to; ++i) o.insert(ds.offset(epoch, i));
  return o;
}

// A W-rank job consumes `b` batches; a W'-rank job continues the epoch: together they deliver
// the windows of the W'-run's epoch, [0, K'), each once, but for a final partial batch of the
// continuation (fewer than W' * B windows, dropped as in any epoch). Returns how many were
// dropped.
int64_t continue_windows(const TokenDataset& ds, int w, int w2, int64_t b) {
  SCOPED_TRACE("W " + std::to_string(w) + " -> " + std::to_string(w2) + " at batch " +
               std::to_string(b));
  const int64_t bs = 3, epoch = 4;
  Offsets got;
  int64_t k = -1;
  for (int r = 0; r < w; ++r) {
    TokenBatches src(ds, {.batch_size = bs, .rank = r, .world_size = w});
    src.start_epoch(epoch);
    take_windows(src, b, got);
    k = src.epoch_progress();
    EXPECT_EQ(k, b * w * bs);
  }
  int64_t end = -1, first = -1;
  for (int r = 0; r < w2; ++r) {
    TokenBatches src(ds, {.batch_size = bs, .rank = r, .world_size = w2});
    EXPECT_TRUE(src.continue_epoch(epoch, k));
    EXPECT_EQ(src.epoch_progress(), k);
    if (r == 0) first = src.batch_index();
    EXPECT_EQ(src.batch_index(), first) << "rank " << r;
    take_windows(src, -1, got);
    EXPECT_EQ(src.batch_index(), src.batches_per_epoch());
    if (r == 0) end = src.epoch_progress();
    EXPECT_EQ(src.epoch_progress(), end);
    EXPECT_EQ(end, k + (src.batches_per_epoch() - first) * w2 * bs);
    // The next epoch is a plain W'-rank one.
    TokenBatches fresh(ds, {.batch_size = bs, .rank = r, .world_size = w2});
    src.start_epoch(epoch + 1);
    EXPECT_EQ(src.epoch_progress(), 0);
    Offsets a, f;
    take_windows(src, -1, a);
    fresh.start_epoch(epoch + 1);
    take_windows(fresh, -1, f);
    EXPECT_EQ(a, f);
  }
  const int64_t total =
      TokenBatches(ds, {.batch_size = bs, .world_size = w2}).batches_per_epoch() * w2 * bs;  // K'
  EXPECT_LT(total - end, w2 * bs);
  EXPECT_EQ(got, windows_of(ds, epoch, 0, end));
  return total - end;
}

TEST(TokenBatchesContinuation, TheNewWorldSizesEpochWindowsExactlyOnce) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 1000, 60000);
  TokenDataset ds(path, {.context = 8, .seed = 6});  // 111 windows
  // 2 ranks consume 5 batches (30 windows of their 108); 1 rank takes the 81 of its 111 left.
  EXPECT_EQ(continue_windows(ds, 2, 1, 5), 0);
  EXPECT_EQ(continue_windows(ds, 2, 1, 0), 0);
  // 1 rank consumes 6 batches (18 windows); 2 ranks take the 90 of their 108 left.
  EXPECT_EQ(continue_windows(ds, 1, 2, 6), 0);
  // After 5 batches (15 windows), 93 are left: 15 batches of 2 x 3, and 3 windows dropped.
  EXPECT_EQ(continue_windows(ds, 1, 2, 5), 3);
  // 3 ranks (108 windows: 12 batches) stopped at their last batch, 2 -> 1 and back.
  EXPECT_EQ(continue_windows(ds, 3, 1, 12), 0);
  EXPECT_EQ(continue_windows(ds, 1, 3, 36), 0);
}

// Continuing at a progress past this world size's epoch: the epoch is over. At the world size
// that reported it, continuing is the exact resume.
TEST(TokenBatchesContinuation, PastTheEpochIsOverAndTheSameWorldSizeIsExact) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 1000, 60000);
  TokenDataset ds(path, {.context = 8, .seed = 6});
  TokenBatches two(ds, {.batch_size = 3, .rank = 1, .world_size = 2});  // 108 windows
  ASSERT_TRUE(two.continue_epoch(0, 110));
  Batch b;
  EXPECT_FALSE(two.next(b));
  EXPECT_EQ(two.batch_index(), two.batches_per_epoch());
  EXPECT_EQ(two.epoch_progress(), 110);

  TokenBatches run(ds, {.batch_size = 3, .rank = 1, .world_size = 2});
  run.start_epoch(2);
  ASSERT_TRUE(run.next(b));
  ASSERT_TRUE(run.next(b));
  ASSERT_TRUE(two.continue_epoch(2, run.epoch_progress()));
  EXPECT_EQ(two.batch_index(), 2);
  Batch c;
  while (run.next(b)) {
    ASSERT_TRUE(two.next(c));
    EXPECT_EQ(b.input.to_vector<int64_t>(), c.input.to_vector<int64_t>());
    EXPECT_EQ(b.target.to_vector<int64_t>(), c.target.to_vector<int64_t>());
  }
  EXPECT_FALSE(two.next(c));
}

TEST(TokenBatchesContinuation, ProgressOutOfRangeIsAnErrorNamingIt) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 1000, 60000);
  TokenDataset ds(path, {.context = 8, .seed = 6});
  TokenBatches src(ds, {.batch_size = 3});
  for (const int64_t bad : {int64_t{-1}, int64_t{112}}) {
    try {
      src.continue_epoch(0, bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("progress " + std::to_string(bad)), std::string::npos) << what;
      EXPECT_NE(what.find("[0, 111]"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(src.epoch(), -1);  // nothing changed
  // With batches_per_epoch set, an epoch's windows grow with the world size: no upper bound.
  TokenBatches fixed(ds, {.batch_size = 3, .batches_per_epoch = 50});
  EXPECT_TRUE(fixed.continue_epoch(0, 1000));
  EXPECT_THROW(fixed.continue_epoch(0, -1), Error);
}

}  // namespace
}  // namespace stoker::data
