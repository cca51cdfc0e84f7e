// ReplaySource: the "synthetic data" ablation. It takes the first batch of a real source and
// hands out that same batch for every step of every epoch (the real source's epoch length),
// so a training run without any input pipeline can be compared with the real one (`stoker
// doctor` wraps its loader in one; TrainerOptions::replay_first_batch wraps fit()'s source).
// It reports the real source's identity (a checkpoint records the run's data) but no input
// pipeline: diagnostics see a source with nothing to wait for.
//
// The batch tensors are shared, not copied: the Trainer never writes into its inputs. The real
// source is borrowed and must outlive the ReplaySource. Not thread-safe (one consumer).
#pragma once

#include <cstdint>
#include <string>

#include "stoker/data/batch_source.h"

namespace stoker::diag {

class ReplaySource : public data::BatchSource {
 public:
  explicit ReplaySource(data::BatchSource& real) : real_(real) {}

  void start_epoch(int64_t epoch) override;
  bool next(data::Batch& batch) override;
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override { return real_.samples_per_epoch(); }
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return index_; }
  void restore(int64_t epoch, int64_t batch_index) override;
  data::SourceIdentity identity() const override { return real_.identity(); }
  std::string kind() const override { return "replayed first batch (synthetic-data ablation)"; }

 private:
  data::BatchSource& real_;
  data::Batch batch_;
  bool have_ = false;
  int64_t epoch_ = -1;
  int64_t index_ = 0;
};

}  // namespace stoker::diag
