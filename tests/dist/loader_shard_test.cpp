// The data loader shards each epoch by rank: with world size 2 the ranks' batch j are disjoint
// and together hold exactly the samples of the single-process batch j of twice the size (the
// same augmented pixels: augmentation depends on the sample and epoch, not on the rank), which
// is what makes data-parallel training equal to training on the union batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/loader.h"
#include "stoker/data/pack.h"

namespace data = stoker::data;
namespace fs = std::filesystem;

namespace {

// Each sample of a batch as its bytes (pixels, then label), sorted: the batch as a set.
std::vector<std::string> rows_of(const data::Batch& b) {
  std::vector<std::string> rows;
  const size_t in_row = b.input.nbytes() / static_cast<size_t>(b.size);
  const size_t t_row = b.target.nbytes() / static_cast<size_t>(b.size);
  for (int64_t i = 0; i < b.size; ++i) {
    std::string r(in_row + t_row, '\0');
    std::memcpy(r.data(), static_cast<const uint8_t*>(b.input.data()) + i * in_row, in_row);
    std::memcpy(r.data() + in_row, static_cast<const uint8_t*>(b.target.data()) + i * t_row, t_row);
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace

TEST(LoaderShardTest, RanksSplitEachBatchOfTheUnion) {
  const fs::path dir = fs::temp_directory_path() / ("stoker_shard_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  data::pack_synth({.samples = 64, .classes = 4, .size = 32, .seed = 5}, dir,
                   {.threads = 1, .progress = false});
  const data::LmdbImageDataset ds(dir);
  auto options = [](int64_t batch, int rank, int world) {
    return data::LoaderOptions{.batch_size = batch,
                               .threads = 1,
                               .prefetch = 2,
                               .transform = {.output_size = 16},
                               .seed = 7,
                               .rank = rank,
                               .world_size = world};
  };
  data::Loader one(ds, options(16, 0, 1)), r0(ds, options(8, 0, 2)), r1(ds, options(8, 1, 2));
  for (int64_t epoch : {0, 1}) {
    one.start_epoch(epoch);
    r0.start_epoch(epoch);
    r1.start_epoch(epoch);
    EXPECT_EQ(r0.batches_per_epoch(), one.batches_per_epoch());
    data::Batch b, b0, b1;
    int batches = 0;
    while (one.next(b)) {
      ASSERT_TRUE(r0.next(b0) && r1.next(b1));
      auto a = rows_of(b0), c = rows_of(b1), u = rows_of(b);
      std::vector<std::string> both;
      std::set_intersection(a.begin(), a.end(), c.begin(), c.end(), std::back_inserter(both));
      EXPECT_TRUE(both.empty()) << "ranks share samples in batch " << batches;
      a.insert(a.end(), c.begin(), c.end());
      std::sort(a.begin(), a.end());
      EXPECT_EQ(a, u) << "epoch " << epoch << " batch " << batches;
      ++batches;
    }
    EXPECT_FALSE(r0.next(b0));
    EXPECT_EQ(batches, 4);
  }
  fs::remove_all(dir);
}
