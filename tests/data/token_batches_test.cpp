#include "stoker/data/token_batches.h"

#include <gtest/gtest.h>

#include <set>

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

}  // namespace
}  // namespace stoker::data
