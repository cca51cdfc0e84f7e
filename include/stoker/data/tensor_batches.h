// TensorBatches: batches cut from tensors held in memory (small datasets, tests, the demo).
//
// Samples are rows of `inputs` and `targets` (dim 0). Each epoch visits them in the Sampler's
// (seed, epoch) permutation, gathered on the host into one contiguous batch and copied to
// `device`. The last partial batch is kept unless drop_last. With world_size > 1 each rank sees
// its shard of every epoch (the Sampler's DistributedSampler semantics: padded so every rank has
// as many samples).
//
// Elastic resume: epoch_progress() is the Sampler's epoch progress (samples of the epoch's order
// the whole job consumed, capped at N) and continue_epoch(e, k) makes epoch e the Sampler's
// continuation at k (data/sampler.h): this rank's share of the rest of the epoch, as the last
// batch indices of the epoch. start_epoch() and restore() are plain epochs again.
//
// identity(): the batch size, the seed (when shuffling) and a fingerprint of the tensors'
// dtypes, shapes and bytes (XXH3-64 over all of them, computed at the first call and kept: the
// tensors must not change afterwards).
#pragma once

#include <string>
#include <vector>

#include "stoker/data/batch_source.h"
#include "stoker/data/sampler.h"

namespace stoker::data {

struct TensorBatchesOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  Device device = Device::cpu();
  int rank = 0;  // data parallelism: this rank's shard of each epoch
  int world_size = 1;
};

class TensorBatches : public BatchSource {
 public:
  // inputs [N, ...] and targets [N, ...] on the host.
  TensorBatches(Tensor inputs, Tensor targets, TensorBatchesOptions options);

  void start_epoch(int64_t epoch) override;
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override;
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return batch_; }
  void restore(int64_t epoch, int64_t batch_index) override;
  int64_t epoch_progress() const override;
  bool continue_epoch(int64_t epoch, int64_t progress) override;
  SourceIdentity identity() const override;
  std::string kind() const override { return "TensorBatches"; }

 private:
  Tensor gather(const Tensor& src, std::span<const int64_t> rows) const;

  Tensor inputs_, targets_;
  TensorBatchesOptions options_;
  Sampler sampler_;
  int64_t epoch_ = -1;
  int64_t batch_ = 0;
  mutable std::string fingerprint_;  // identity(): computed once
};

}  // namespace stoker::data
