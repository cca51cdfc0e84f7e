#include "diag/replay_source.h"

#include "stoker/core/error.h"

namespace stoker::diag {

void ReplaySource::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  index_ = 0;
  if (!have_) {
    real_.start_epoch(epoch);
    STOKER_CHECK(real_.next(batch_), "synthetic-data ablation: the data source has no batch");
    have_ = true;
  }
}

bool ReplaySource::next(data::Batch& batch) {
  STOKER_CHECK(have_, "ReplaySource::next called before start_epoch");
  const int64_t n = batches_per_epoch();
  if (n >= 0 && index_ >= n) return false;
  ++index_;
  batch = batch_;
  return true;
}

int64_t ReplaySource::batches_per_epoch() const {
  const int64_t n = real_.batches_per_epoch();
  return n >= 0 ? n : 1000;  // a stream: epochs of 1000 replayed batches
}

void ReplaySource::restore(int64_t epoch, int64_t batch_index) {
  start_epoch(epoch);
  index_ = batch_index;
}

}  // namespace stoker::diag
