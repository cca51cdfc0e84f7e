#include "stoker/data/tensor_batches.h"

#include <fmt/format.h>
#include <cstring>

#include "stoker/core/error.h"
#include "util/checksum.h"

namespace stoker::data {

TensorBatches::TensorBatches(Tensor inputs, Tensor targets, TensorBatchesOptions options)
    : inputs_(std::move(inputs)),
      targets_(std::move(targets)),
      options_(options),
      sampler_(inputs_.defined() && inputs_.rank() >= 1 ? inputs_.size(0) : 0,
               {.shuffle = options.shuffle,
                .seed = options.seed,
                .rank = options.rank,
                .world_size = options.world_size,
                .batch_size = options.batch_size > 0 ? options.batch_size : 1,
                .drop_last = options.drop_last}) {
  STOKER_CHECK(inputs_.defined() && targets_.defined() && inputs_.rank() >= 1 &&
                   targets_.rank() >= 1 && inputs_.size(0) == targets_.size(0),
               "TensorBatches: inputs ", inputs_.str(), " and targets ", targets_.str(),
               " must have the same number of samples (dim 0)");
  STOKER_CHECK(inputs_.device().is_cpu() && targets_.device().is_cpu(),
               "TensorBatches: keep the dataset on the host; batches are copied to ",
               options_.device.str());
  STOKER_CHECK(options_.batch_size > 0, "TensorBatches: batch_size ", options_.batch_size,
               " must be positive");
  STOKER_CHECK(!options_.drop_last || inputs_.size(0) >= options_.batch_size,
               "TensorBatches: ", inputs_.size(0), " samples make no full batch of ",
               options_.batch_size, " with drop_last");
}

int64_t TensorBatches::batches_per_epoch() const { return sampler_.num_batches(); }

int64_t TensorBatches::samples_per_epoch() const {
  return options_.drop_last ? batches_per_epoch() * options_.batch_size : sampler_.num_samples();
}

void TensorBatches::start_epoch(int64_t epoch) {
  STOKER_CHECK(epoch >= 0, "TensorBatches::start_epoch: epoch ", epoch, " must be >= 0");
  sampler_.clear_continuation();
  epoch_ = epoch;
  batch_ = 0;
  sampler_.set_epoch(epoch);
}

int64_t TensorBatches::epoch_progress() const {
  if (epoch_ < 0) return 0;
  return sampler_.progress_after(sampler_.start_progress(epoch_), batch_);
}

bool TensorBatches::continue_epoch(int64_t epoch, int64_t progress) {
  STOKER_CHECK(epoch >= 0, "TensorBatches::continue_epoch: epoch ", epoch, " must be >= 0");
  sampler_.set_continuation(epoch, progress);  // checks progress before anything changes
  epoch_ = epoch;
  sampler_.set_epoch(epoch);
  batch_ = sampler_.first_batch(epoch);
  return true;
}

Tensor TensorBatches::gather(const Tensor& src, std::span<const int64_t> rows) const {
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor host = Tensor::empty(shape, src.dtype(), Device::cpu());
  const size_t row = src.size(0) == 0 ? 0 : src.nbytes() / static_cast<size_t>(src.size(0));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(static_cast<char*>(host.data()) + i * row,
                static_cast<const char*>(src.data()) + rows[i] * row, row);
  }
  return options_.device.is_cpu() ? host : host.to(options_.device);
}

bool TensorBatches::next(Batch& batch) {
  STOKER_CHECK(epoch_ >= 0, "TensorBatches::next called before start_epoch");
  if (batch_ >= batches_per_epoch()) return false;
  const std::span<const int64_t> rows = sampler_.batch(batch_);
  batch.input = gather(inputs_, rows);
  batch.target = gather(targets_, rows);
  batch.size = static_cast<int64_t>(rows.size());
  ++batch_;
  return true;
}

void TensorBatches::restore(int64_t epoch, int64_t batch_index) {
  start_epoch(epoch);
  STOKER_CHECK(batch_index >= 0 && batch_index <= batches_per_epoch(),
               "TensorBatches::restore: "
               "batch ",
               batch_index, " outside epoch of ", batches_per_epoch(), " batches");
  batch_ = batch_index;
}

SourceIdentity TensorBatches::identity() const {
  if (fingerprint_.empty()) {
    util::Checksum64 sum;
    std::string text = "tensors";
    for (const Tensor* t : {&inputs_, &targets_}) {
      const std::string desc = fmt::format("{}{}", dtype_name(t->dtype()), t->shape().str());
      sum.update(desc.data(), desc.size());
      sum.update(t->data(), t->nbytes());
      text += " " + desc;
    }
    fingerprint_ = text + ", xxh3 " + util::checksum_hex(sum.value());
  }
  SourceIdentity id;
  id.batch_size = options_.batch_size;
  if (options_.shuffle) id.seed = options_.seed;
  id.samples = inputs_.size(0);
  id.fingerprint = fingerprint_;  // no location: the tensors are in memory
  return id;
}

}  // namespace stoker::data
