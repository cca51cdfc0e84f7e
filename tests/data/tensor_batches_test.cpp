// TensorBatches' elastic resume, with a dataset whose labels are the sample ids: the exact
// multiset of samples of an epoch continued at another world size.
#include "stoker/data/tensor_batches.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "stoker/core/error.h"

namespace stoker::data {
namespace {

constexpr int64_t kSamples = 37;

struct Data {
  Tensor x, y;  // x [N, 2] (row i = {i, -i}), y [N] = i: the sample ids
};

Data ids(int64_t n) {
  Data d{Tensor::empty({n, 2}, DType::f32), Tensor::empty({n}, DType::i64)};
  for (int64_t i = 0; i < n; ++i) {
    d.x.data<float>()[2 * i] = static_cast<float>(i);
    d.x.data<float>()[2 * i + 1] = -static_cast<float>(i);
    d.y.data<int64_t>()[i] = i;
  }
  return d;
}

TensorBatchesOptions opts(int rank, int world) {
  return {.batch_size = 4, .seed = 8, .rank = rank, .world_size = world};
}

using Counts = std::map<int64_t, int64_t>;

// Adds the ids of the source's batches up to `until` batch index (-1: the epoch's end); checks
// that inputs travel with their targets.
void take(TensorBatches& src, int64_t until, Counts& counts, std::vector<int64_t>* sizes) {
  Batch b;
  while ((until < 0 || src.batch_index() < until) && src.next(b)) {
    const std::vector<int64_t> y = b.target.to_vector<int64_t>();
    const std::vector<float> x = b.input.to_vector<float>();
    for (size_t j = 0; j < y.size(); ++j) {
      EXPECT_EQ(x[2 * j], static_cast<float>(y[j]));
      counts[y[j]] += 1;
    }
    if (sizes) sizes->push_back(b.size);
  }
}

// A W-rank job delivers `b` batches of epoch 2 and reports its progress; a W'-rank job continues
// the epoch there. Together they deliver every sample once, plus the continuation's padding: the
// first (pad) samples of the epoch's permutation once more.
void check(int w, int w2, int64_t b, int64_t pad) {
  SCOPED_TRACE("W " + std::to_string(w) + " -> " + std::to_string(w2) + " at batch " +
               std::to_string(b));
  const Data d = ids(kSamples);
  const int64_t epoch = 2;
  Counts got;
  int64_t progress = -1;
  for (int r = 0; r < w; ++r) {
    TensorBatches src(d.x, d.y, opts(r, w));
    src.start_epoch(epoch);
    EXPECT_EQ(src.epoch_progress(), 0);
    take(src, b, got, nullptr);
    if (r == 0) progress = src.epoch_progress();
    EXPECT_EQ(src.epoch_progress(), progress);
  }
  EXPECT_EQ(progress, b * 4 * w);
  std::vector<int64_t> sizes0;
  for (int r = 0; r < w2; ++r) {
    TensorBatches src(d.x, d.y, opts(r, w2));
    ASSERT_TRUE(src.continue_epoch(epoch, progress));
    EXPECT_EQ(src.epoch(), epoch);
    EXPECT_EQ(src.epoch_progress(), progress);
    const int64_t nb = src.batches_per_epoch();
    EXPECT_EQ(nb, (kSamples + w2 - 1) / w2 / 4 + ((kSamples + w2 - 1) / w2 % 4 != 0));
    const int64_t first = src.batch_index();
    std::vector<int64_t> sizes;
    take(src, -1, got, &sizes);
    EXPECT_EQ(static_cast<int64_t>(sizes.size()), nb - first);
    if (r == 0) sizes0 = sizes;
    EXPECT_EQ(sizes, sizes0) << "rank " << r;
    EXPECT_EQ(src.batch_index(), nb);
    EXPECT_EQ(src.epoch_progress(), kSamples);
    // The next epoch is a plain W'-rank one.
    TensorBatches fresh(d.x, d.y, opts(r, w2));
    src.start_epoch(epoch + 1);
    fresh.start_epoch(epoch + 1);
    Batch a, f;
    while (fresh.next(f)) {
      ASSERT_TRUE(src.next(a));
      EXPECT_EQ(a.target.to_vector<int64_t>(), f.target.to_vector<int64_t>());
    }
    EXPECT_FALSE(src.next(a));
  }
  const std::vector<int64_t> perm = Sampler(kSamples, {.seed = 8}).permutation(epoch);
  Counts want;
  for (int64_t i = 0; i < kSamples; ++i) want[i] = 1;
  for (int64_t j = 0; j < pad; ++j) want[perm[static_cast<size_t>(j)]] += 1;
  EXPECT_EQ(got, want);
}

TEST(TensorBatchesContinuation, TwoRanksToOneAndOneToThree) {
  check(2, 1, 2, 0);  // 16 seen, 21 left on 1 rank
  check(2, 1, 0, 0);
  check(1, 3, 3, 2);  // 12 seen, 25 left on 3 ranks: 9 each, 2 padded
  check(1, 3, 9, 2);  // 36 seen, 1 left on 3 ranks: 1 each, 2 padded
}

TEST(TensorBatchesContinuation, FourRanksToTwo) {
  check(4, 2, 1, 1);  // 16 seen, 21 left on 2 ranks: 11 each, 1 padded
  check(4, 2, 2, 1);  // 32 seen, 5 left: 3 each, 1 padded
}

// Continuing at the progress a run reported, at its own world size, is the exact resume: the
// same batches as restore() of a plain epoch, and as the uninterrupted continued epoch.
TEST(TensorBatchesContinuation, SameWorldSizeIsTheExactResume) {
  const Data d = ids(kSamples);
  for (int r = 0; r < 3; ++r) {
    TensorBatches run(d.x, d.y, opts(r, 3)), resumed(d.x, d.y, opts(r, 3));
    run.start_epoch(1);
    Batch a, b;
    ASSERT_TRUE(run.next(a));
    ASSERT_TRUE(resumed.continue_epoch(1, run.epoch_progress()));
    EXPECT_EQ(resumed.batch_index(), 1);
    while (run.next(a)) {
      ASSERT_TRUE(resumed.next(b));
      EXPECT_EQ(a.target.to_vector<int64_t>(), b.target.to_vector<int64_t>());
      EXPECT_EQ(run.epoch_progress(), resumed.epoch_progress());
    }
    EXPECT_FALSE(resumed.next(b));
    // A continued epoch (from 5) checkpointed after one batch.
    TensorBatches cont(d.x, d.y, opts(r, 3)), again(d.x, d.y, opts(r, 3));
    cont.continue_epoch(1, 5);
    ASSERT_TRUE(cont.next(a));
    again.continue_epoch(1, cont.epoch_progress());
    EXPECT_EQ(again.batch_index(), cont.batch_index());
    while (cont.next(a)) {
      ASSERT_TRUE(again.next(b));
      EXPECT_EQ(a.target.to_vector<int64_t>(), b.target.to_vector<int64_t>());
    }
    EXPECT_FALSE(again.next(b));
  }
}

TEST(TensorBatchesContinuation, ProgressOutOfRangeIsAnErrorNamingIt) {
  const Data d = ids(kSamples);
  TensorBatches src(d.x, d.y, opts(0, 2));
  src.start_epoch(0);
  try {
    src.continue_epoch(0, 38);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("progress 38"), std::string::npos) << what;
    EXPECT_NE(what.find("[0, 37]"), std::string::npos) << what;
  }
  EXPECT_THROW(src.continue_epoch(0, -3), Error);
  EXPECT_THROW(src.continue_epoch(-1, 0), Error);
  // The position is unchanged.
  EXPECT_EQ(src.epoch(), 0);
  EXPECT_EQ(src.batch_index(), 0);
  // The end of the epoch: nothing left.
  ASSERT_TRUE(src.continue_epoch(0, 37));
  Batch b;
  EXPECT_FALSE(src.next(b));
  EXPECT_EQ(src.batch_index(), src.batches_per_epoch());
}

}  // namespace
}  // namespace stoker::data
