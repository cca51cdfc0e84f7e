// TensorBatches: batches cut from tensors held in memory (small datasets, tests, the demo):
// rows of `inputs` and `targets` in the Sampler's (seed, epoch) order, sharded over ranks,
// gathered on the host and copied to `device`; the last partial batch is kept unless drop_last.
// identity() fingerprints the tensors at its first call: they must not change afterwards.
// Details: docs/distributed.md#data-parallelism.
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
