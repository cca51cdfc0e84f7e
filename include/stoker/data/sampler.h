// Sampler: the sample indices one rank visits in one epoch (DistributedSampler semantics: a
// Philox permutation of (seed, epoch), padded or cut to the world size, rank r takes every
// world-th position), and the continuation of an epoch at another world size from its progress.
// Ownership: holds its index vector. Thread-safety: const methods are thread-safe; set_epoch()
// and the continuation setters must not race with readers (the pure arithmetic may).
// Details: docs/distributed.md#data-parallelism.
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

  // Computes the indices of `epoch` (0-based) for this rank: the continuation's when `epoch` is
  // the continued epoch (set_continuation), the plain epoch's otherwise.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This rank's indices of the current epoch, in visiting order (num_samples() of them; fewer
  // in a continued epoch: only its remaining share).
  std::span<const int64_t> indices() const { return indices_; }
  // Samples per rank per (plain) epoch, before batching.
  int64_t num_samples() const { return num_samples_; }
  // num_samples() * world_size.
  int64_t total_size() const { return num_samples_ * options_.world_size; }
  // Batches per epoch (a continued epoch keeps the count: its batches are the last ones).
  int64_t num_batches() const;
  // Indices of batch b of the current epoch (the last one may be partial unless drop_last); b in
  // [first_batch(epoch()), num_batches()).
  std::span<const int64_t> batch(int64_t b) const;

  // Elastic resume (docs/distributed.md#data-parallelism). Makes epoch `epoch` the continuation
  // at `progress` (an epoch progress of a run of any world size, in [0, N]; out of range: an
  // error naming it), replacing any earlier continuation; every other epoch stays plain. The
  // current epoch's indices are rebuilt when they are affected.
  void set_continuation(int64_t epoch, int64_t progress);
  // Back to plain epochs only.
  void clear_continuation();
  // The continued epoch (-1: none) and its progress.
  int64_t continued_epoch() const { return continued_epoch_; }
  int64_t continued_progress() const { return continued_progress_; }
  // The progress `epoch` starts at: the continuation's for the continued epoch, else 0.
  int64_t start_progress(int64_t epoch) const;
  // The first batch index of `epoch`: first_batch_at(start_progress(epoch)) (0 for a plain one).
  int64_t first_batch(int64_t epoch) const { return first_batch_at(start_progress(epoch)); }

  // Pure arithmetic of continuations (the constructor's values only; see thread-safety).
  // Batches per rank of an epoch continued at `progress` (num_batches() at 0; never more).
  int64_t continued_batches(int64_t progress) const;
  // num_batches() - continued_batches(progress): the batch index such an epoch starts at.
  int64_t first_batch_at(int64_t progress) const;
  // The epoch progress once batches [0, batch_index) of an epoch that started at progress
  // `start` were delivered on every rank (indices below first_batch_at(start) count as
  // delivered before the start): min(start + d * world, N), d = the samples per rank of its
  // delivered batches. batch_index in [0, num_batches()].
  int64_t progress_after(int64_t start, int64_t batch_index) const;

  // The full permutation of epoch `epoch` (before padding and sharding).
  std::vector<int64_t> permutation(int64_t epoch) const;

  const SamplerOptions& options() const { return options_; }

 private:
  int64_t dataset_size_;
  SamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = -1;
  int64_t first_ = 0;  // first batch index of the current epoch
  int64_t continued_epoch_ = -1;
  int64_t continued_progress_ = 0;
  std::vector<int64_t> indices_;

  void check_progress(int64_t progress) const;
  // Samples per rank when `remaining` entries of the order are sharded (pad: ceil, drop: floor).
  int64_t share(int64_t remaining) const;
  int64_t batches_of(int64_t samples) const;
};

}  // namespace stoker::data
