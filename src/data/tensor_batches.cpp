#include "stoker/data/tensor_batches.h"

#include <cstring>
#include <numeric>

#include "stoker/core/error.h"
#include "stoker/core/rng.h"

namespace stoker::data {

TensorBatches::TensorBatches(Tensor inputs, Tensor targets, TensorBatchesOptions options)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), options_(options) {
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

int64_t TensorBatches::batches_per_epoch() const {
  const int64_t n = inputs_.size(0), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t TensorBatches::samples_per_epoch() const {
  return options_.drop_last ? batches_per_epoch() * options_.batch_size : inputs_.size(0);
}

void TensorBatches::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  batch_ = 0;
  order_.resize(static_cast<size_t>(inputs_.size(0)));
  std::iota(order_.begin(), order_.end(), 0);
  if (!options_.shuffle) return;
  // Fisher-Yates with Philox draws from (seed, stream = epoch): the order is a pure function
  // of (seed, epoch), so resuming at any epoch reproduces it.
  for (int64_t i = static_cast<int64_t>(order_.size()) - 1; i > 0; --i) {
    const core::Philox4 r = core::philox_block(options_.seed, static_cast<uint64_t>(epoch) + 1,
                                               static_cast<uint64_t>(i));
    const uint64_t x = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    const int64_t j = static_cast<int64_t>(x % static_cast<uint64_t>(i + 1));
    std::swap(order_[i], order_[j]);
  }
}

Tensor TensorBatches::gather(const Tensor& src, int64_t begin, int64_t count) const {
  Shape shape = src.shape();
  shape[0] = count;
  Tensor host = Tensor::empty(shape, src.dtype(), Device::cpu());
  const size_t row = src.size(0) == 0 ? 0 : src.nbytes() / static_cast<size_t>(src.size(0));
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(static_cast<char*>(host.data()) + i * row,
                static_cast<const char*>(src.data()) + order_[begin + i] * row, row);
  }
  return options_.device.is_cpu() ? host : host.to(options_.device);
}

bool TensorBatches::next(Batch& batch) {
  STOKER_CHECK(epoch_ >= 0, "TensorBatches::next called before start_epoch");
  if (batch_ >= batches_per_epoch()) return false;
  const int64_t begin = batch_ * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, inputs_.size(0) - begin);
  batch.input = gather(inputs_, begin, count);
  batch.target = gather(targets_, begin, count);
  batch.size = count;
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

}  // namespace stoker::data
