// Sampler: Fisher-Yates with Philox draws keyed by (seed, stream = epoch + 1, block = i), the
// same construction as TensorBatches, then DistributedSampler's pad/drop and strided sharding; a
// continued epoch shards what is left of the permutation the same way.
#include "stoker/data/sampler.h"

#include <fmt/format.h>
#include <algorithm>
#include <numeric>
#include <string>

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

// Continuations. With k = progress and m = N - k entries left (m = N for a plain epoch):
// continued_batches(k) = batches_of(share(m)) <= batches_of(share(N)) = num_batches(), because
// m <= N, share() (ceil or floor of m / world) is non-decreasing in m, and batches_of() (ceil or
// floor of s / batch_size) is non-decreasing in s. So first_batch_at(k) >= 0 always holds: the
// continuation's batches fit in the last batch indices of an epoch.

void Sampler::check_progress(int64_t progress) const {
  STOKER_CHECK(progress >= 0 && progress <= dataset_size_, "Sampler: epoch progress ", progress,
               " is not in [0, ", dataset_size_,
               "] (entries of an epoch's order the job consumed, at most the dataset's ",
               dataset_size_, " samples)");
}

int64_t Sampler::share(int64_t remaining) const {
  const int64_t world = options_.world_size;
  return options_.tail == ShardTail::drop ? remaining / world : (remaining + world - 1) / world;
}

int64_t Sampler::batches_of(int64_t samples) const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples / b : (samples + b - 1) / b;
}

int64_t Sampler::continued_batches(int64_t progress) const {
  check_progress(progress);
  return batches_of(share(dataset_size_ - progress));
}

int64_t Sampler::first_batch_at(int64_t progress) const {
  return num_batches() - continued_batches(progress);
}

int64_t Sampler::progress_after(int64_t start, int64_t batch_index) const {
  const int64_t first = first_batch_at(start);
  STOKER_CHECK(batch_index >= 0 && batch_index <= num_batches(), "Sampler::progress_after: batch ",
               batch_index, " is not in [0, ", num_batches(), "]");
  const int64_t delivered = std::max<int64_t>(0, batch_index - first);
  const int64_t per_rank = std::min(delivered * options_.batch_size, share(dataset_size_ - start));
  return std::min(start + per_rank * options_.world_size, dataset_size_);
}

int64_t Sampler::start_progress(int64_t epoch) const {
  return epoch == continued_epoch_ ? continued_progress_ : 0;
}

void Sampler::set_continuation(int64_t epoch, int64_t progress) {
  STOKER_CHECK(epoch >= 0, "Sampler::set_continuation: epoch ", epoch, " must be >= 0");
  check_progress(progress);
  const bool affected = epoch_ >= 0 && (epoch_ == epoch || epoch_ == continued_epoch_);
  continued_epoch_ = epoch;
  continued_progress_ = progress;
  if (affected) set_epoch(epoch_);
}

void Sampler::clear_continuation() {
  const bool affected = epoch_ >= 0 && epoch_ == continued_epoch_;
  continued_epoch_ = -1;
  continued_progress_ = 0;
  if (affected) set_epoch(epoch_);
}

void Sampler::set_epoch(int64_t epoch) {
  STOKER_CHECK(epoch >= 0, "Sampler::set_epoch: epoch ", epoch, " must be >= 0");
  epoch_ = epoch;
  const int64_t start = start_progress(epoch);
  first_ = first_batch_at(start);
  const std::vector<int64_t> perm = permutation(epoch);
  // The order left from `start` (all of it for a plain epoch), made divisible by world_size:
  // drop cuts its tail, pad repeats from the start of the permutation (several times over when
  // world_size > N), as DistributedSampler pads a plain epoch.
  const int64_t world = options_.world_size;
  const auto total = static_cast<size_t>(share(dataset_size_ - start) * world);
  std::vector<int64_t> order(perm.begin() + start, perm.end());
  for (size_t k = 0; order.size() < total; ++k) order.push_back(perm[k % perm.size()]);
  order.resize(total);
  indices_.clear();
  indices_.reserve(total / static_cast<size_t>(world));
  for (size_t k = static_cast<size_t>(options_.rank); k < total; k += static_cast<size_t>(world)) {
    indices_.push_back(order[k]);
  }
}

int64_t Sampler::num_batches() const { return batches_of(num_samples_); }

std::span<const int64_t> Sampler::batch(int64_t b) const {
  const int64_t nb = num_batches();
  if (b < first_ || b >= nb) {
    const std::string why =
        first_ == 0
            ? std::string()
            : fmt::format(" (epoch {} is continued: its batches are the last ones)", epoch_);
    STOKER_THROW("Sampler::batch: batch ", b, " is not in [", first_, ", ", nb, ")", why);
  }
  const int64_t begin = (b - first_) * options_.batch_size;
  const auto have = static_cast<int64_t>(indices_.size());
  const int64_t end = std::min(begin + options_.batch_size, have);
  return std::span<const int64_t>(indices_).subspan(static_cast<size_t>(begin),
                                                    static_cast<size_t>(end - begin));
}

}  // namespace stoker::data
