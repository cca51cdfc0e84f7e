// Sampler: the sample indices one rank visits in one epoch (DistributedSampler semantics).
//
// Epoch e's order is a Philox-seeded permutation of [0, N), a pure function of (seed, e), so
// every rank computes the same permutation without talking to the others. The permutation is
// then made divisible by world_size — `pad` repeats indices from its start (total_size =
// ceil(N / world) * world), `drop` cuts its tail (total_size = floor(N / world) * world) — and
// rank r takes positions r, r + world, r + 2 world, ... Batches are cut from the rank's
// indices; `drop_last` drops the final partial batch.
//
// Ownership: holds its index vector. Thread-safety: const methods are thread-safe;
// set_epoch() must not race with readers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace stoker::data {

enum class ShardTail {
  pad,   // repeat from the start of the permutation until every rank has ceil(N / world)
  drop,  // cut the tail so every rank has floor(N / world)
};

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  ShardTail tail = ShardTail::pad;
  int64_t batch_size = 1;
  bool drop_last = false;  // drop this rank's final partial batch
};

class Sampler {
 public:
  Sampler(int64_t dataset_size, SamplerOptions options);

  // Computes the indices of `epoch` (0-based) for this rank.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This rank's indices of the current epoch, in visiting order (num_samples() of them).
  std::span<const int64_t> indices() const { return indices_; }
  // Samples per rank per epoch, before batching.
  int64_t num_samples() const { return num_samples_; }
  // num_samples() * world_size.
  int64_t total_size() const { return num_samples_ * options_.world_size; }
  int64_t num_batches() const;
  // Indices of batch b of the current epoch (the last one may be partial unless drop_last).
  std::span<const int64_t> batch(int64_t b) const;

  // The full permutation of epoch `epoch` (before padding and sharding).
  std::vector<int64_t> permutation(int64_t epoch) const;

  const SamplerOptions& options() const { return options_; }

 private:
  int64_t dataset_size_;
  SamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = -1;
  std::vector<int64_t> indices_;
};

}  // namespace stoker::data
