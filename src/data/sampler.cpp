// Sampler: Fisher-Yates with Philox draws keyed by (seed, stream = epoch + 1, block = i), the
// same construction as TensorBatches, then DistributedSampler's pad/drop and strided sharding.
#include "stoker/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "stoker/core/error.h"
#include "stoker/core/rng.h"

namespace stoker::data {

Sampler::Sampler(int64_t dataset_size, SamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  STOKER_CHECK(dataset_size_ > 0, "Sampler: the dataset is empty (", dataset_size_, " samples)");
  STOKER_CHECK(
      options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size,
      "Sampler: rank ", options_.rank, " is not in [0, world_size = ", options_.world_size, ")");
  STOKER_CHECK(options_.batch_size >= 1, "Sampler: batch_size ", options_.batch_size,
               " must be positive");
  const int64_t world = options_.world_size;
  if (options_.tail == ShardTail::drop) {
    num_samples_ = dataset_size_ / world;
    STOKER_CHECK_HINT(num_samples_ > 0, "use ShardTail::pad or fewer ranks",
                      "Sampler: ", dataset_size_, " samples leave nothing for each of ", world,
                      " ranks with ShardTail::drop");
  } else {
    num_samples_ = (dataset_size_ + world - 1) / world;
  }
  STOKER_CHECK_HINT(!options_.drop_last || num_samples_ >= options_.batch_size,
                    "lower batch_size or turn drop_last off", "Sampler: ", num_samples_,
                    " samples per rank make no full batch of ", options_.batch_size,
                    " with drop_last");
  set_epoch(0);
}

std::vector<int64_t> Sampler::permutation(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), 0);
  if (!options_.shuffle) return order;
  for (int64_t i = dataset_size_ - 1; i > 0; --i) {
    const core::Philox4 r = core::philox_block(options_.seed, static_cast<uint64_t>(epoch) + 1,
                                               static_cast<uint64_t>(i));
    const uint64_t x = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    const auto j = static_cast<int64_t>(x % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

void Sampler::set_epoch(int64_t epoch) {
  STOKER_CHECK(epoch >= 0, "Sampler::set_epoch: epoch ", epoch, " must be >= 0");
  epoch_ = epoch;
  std::vector<int64_t> order = permutation(epoch);
  const auto total = static_cast<size_t>(total_size());
  // Pad by repeating from the start (several times over when world_size > N).
  for (size_t k = 0; order.size() < total; ++k) order.push_back(order[k]);
  order.resize(total);
  indices_.clear();
  indices_.reserve(static_cast<size_t>(num_samples_));
  for (size_t k = static_cast<size_t>(options_.rank); k < total;
       k += static_cast<size_t>(options_.world_size)) {
    indices_.push_back(order[k]);
  }
}

int64_t Sampler::num_batches() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? num_samples_ / b : (num_samples_ + b - 1) / b;
}

std::span<const int64_t> Sampler::batch(int64_t b) const {
  STOKER_CHECK(b >= 0 && b < num_batches(), "Sampler::batch: batch ", b, " is not in [0, ",
               num_batches(), ")");
  const int64_t begin = b * options_.batch_size;
  const int64_t end = std::min(begin + options_.batch_size, num_samples_);
  return std::span<const int64_t>(indices_).subspan(static_cast<size_t>(begin),
                                                    static_cast<size_t>(end - begin));
}

}  // namespace stoker::data
