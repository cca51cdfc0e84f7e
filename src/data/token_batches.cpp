// TokenBatches: windows gathered into one host batch, then one copy per tensor to the device.
#include "stoker/data/token_batches.h"

#include <fmt/format.h>
#include <algorithm>
#include <cstring>
#include <vector>

#include "stoker/core/error.h"
#include "util/checksum.h"

namespace stoker::data {

TokenBatches::TokenBatches(const TokenDataset& dataset, TokenBatchesOptions options)
    : dataset_(dataset), options_(options) {
  STOKER_CHECK(options_.batch_size > 0, "TokenBatches: batch_size ", options_.batch_size,
               " must be positive");
  STOKER_CHECK(
      options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size,
      "TokenBatches: rank ", options_.rank, " is not in [0, world_size = ", options_.world_size,
      ")");
  STOKER_CHECK(options_.batches_per_epoch >= 0, "TokenBatches: batches_per_epoch ",
               options_.batches_per_epoch, " must be >= 0 (0: as many as the file fills)");
  const int64_t per_step = options_.batch_size * options_.world_size;
  batches_ =
      options_.batches_per_epoch > 0 ? options_.batches_per_epoch : dataset_.size() / per_step;
  STOKER_CHECK_HINT(
      batches_ > 0, "use a longer token file, a smaller batch or context, or set batches_per_epoch",
      "TokenBatches: ", dataset_.path().string(), " holds ", dataset_.size(), " windows of ",
      dataset_.options().context + 1, " tokens, fewer than one batch of ", options_.batch_size,
      " on each of ", options_.world_size, " ranks");
}

void TokenBatches::start_epoch(int64_t epoch) {
  STOKER_CHECK(epoch >= 0, "TokenBatches::start_epoch: epoch ", epoch, " must be >= 0");
  epoch_ = epoch;
  batch_ = 0;
  start_ = first_ = 0;
}

int64_t TokenBatches::epoch_progress() const {
  if (epoch_ < 0) return 0;
  return start_ + (batch_ - first_) * options_.world_size * options_.batch_size;
}

bool TokenBatches::continue_epoch(int64_t epoch, int64_t progress) {
  STOKER_CHECK(epoch >= 0, "TokenBatches::continue_epoch: epoch ", epoch, " must be >= 0");
  if (options_.batches_per_epoch > 0) {
    STOKER_CHECK(progress >= 0, "TokenBatches::continue_epoch: epoch progress ", progress,
                 " is not in [0, inf) (windows of the epoch the job consumed)");
  } else {
    STOKER_CHECK(progress >= 0 && progress <= dataset_.size(),
                 "TokenBatches::continue_epoch: epoch progress ", progress, " is not in [0, ",
                 dataset_.size(), "] (windows of the epoch the job consumed, at most the ",
                 dataset_.size(), " disjoint windows of ", dataset_.path().string(), ")");
  }
  const int64_t per_batch = options_.world_size * options_.batch_size;  // windows per batch index
  const int64_t total = batches_ * per_batch;                           // this epoch's windows
  // (total - progress) / per_batch <= total / per_batch = batches_: the continuation fits.
  const int64_t left = progress < total ? (total - progress) / per_batch : 0;
  epoch_ = epoch;
  start_ = progress;
  first_ = batches_ - left;
  batch_ = first_;
  return true;
}

TokenWindow TokenBatches::window(int64_t epoch, int64_t i) const {
  if (options_.on_corrupt == CorruptPolicy::fail) {
    try {
      return dataset_.window(epoch, i);
    } catch (const Error& e) {
      STOKER_CHECK_HINT(false, "fix the token file, or skip such windows (--on-corrupt skip)",
                        e.message());
    }
  }
  // Replacements are windows of the same epoch with indices past the epoch's own (distinct
  // Philox draws), a pure function of (epoch, i).
  constexpr int kAttempts = 16;
  std::string why;
  for (int a = 0; a < kAttempts; ++a) {
    try {
      return dataset_.window(epoch, i + a * std::max<int64_t>(1, dataset_.size()));
    } catch (const Error& e) {
      if (a == 0) {
        ++skipped_;
        if (first_skipped_.empty()) first_skipped_ = e.message();
      }
      why = e.message();
    }
  }
  STOKER_CHECK_HINT(false, "fix the token file (most windows hold a bad token)",
                    "TokenBatches: ", kAttempts, " windows in a row drawn for window ", i,
                    " of epoch ", epoch, " were bad, the last: ", why);
  return {};
}

Batch TokenBatches::batch_at(int64_t epoch, int64_t b) const {
  STOKER_CHECK(epoch >= 0 && b >= 0, "TokenBatches::batch_at: epoch ", epoch, " and batch ", b,
               " must be >= 0");
  return windows_from(epoch, (b * options_.world_size + options_.rank) * options_.batch_size);
}

Batch TokenBatches::windows_from(int64_t epoch, int64_t first) const {
  const int64_t bs = options_.batch_size;
  const int64_t t = dataset_.options().context;
  const DType dtype = dataset_.options().dtype;
  const size_t row = static_cast<size_t>(t) * dtype_size(dtype);
  // Pinned for a GPU: the copies to the device are then asynchronous. From pageable memory a
  // copy waits until the stream reaches it, i.e. for the steps already queued — the host's
  // "data wait" was the GPU's backlog (15 ms of a 65 ms GPT-2 step on an H100), and the host
  // could not queue the next step ahead.
  const bool pin = options_.device.is_cuda();
  Tensor input = pin ? Tensor::empty_pinned({bs, t}, dtype) : Tensor::empty({bs, t}, dtype);
  Tensor target = pin ? Tensor::empty_pinned({bs * t}, dtype) : Tensor::empty({bs * t}, dtype);
  for (int64_t j = 0; j < bs; ++j) {
    const TokenWindow w = window(epoch, first + j);
    std::memcpy(static_cast<char*>(input.data()) + j * row, w.input.data(), row);
    std::memcpy(static_cast<char*>(target.data()) + j * row, w.target.data(), row);
  }
  Batch batch;
  batch.input = options_.device.is_cpu() ? input : input.to(options_.device);
  batch.target = options_.device.is_cpu() ? target : target.to(options_.device);
  batch.size = bs;
  return batch;
}

bool TokenBatches::next(Batch& batch) {
  STOKER_CHECK(epoch_ >= 0, "TokenBatches::next called before start_epoch");
  if (batch_ >= batches_) return false;
  // Batch c of the epoch's continuation from window start_ (c = batch_ for a plain epoch).
  const int64_t c = batch_ - first_;
  batch = windows_from(epoch_,
                       start_ + (c * options_.world_size + options_.rank) * options_.batch_size);
  ++batch_;
  return true;
}

void TokenBatches::restore(int64_t epoch, int64_t batch_index) {
  start_epoch(epoch);
  STOKER_CHECK(batch_index >= 0 && batch_index <= batches_, "TokenBatches::restore: batch ",
               batch_index, " is outside the epoch of ", batches_, " batches");
  batch_ = batch_index;  // start_epoch made it a plain epoch
}

SourceIdentity TokenBatches::identity() const {
  constexpr int64_t kEdgeTokens = 4096;
  const int64_t n = dataset_.num_tokens();
  const int64_t head = std::min(n, kEdgeTokens);
  const int64_t tail_start = std::max(head, n - kEdgeTokens);
  std::vector<uint32_t> edges;
  for (int64_t i = 0; i < head; ++i) edges.push_back(dataset_.token(i));
  for (int64_t i = tail_start; i < n; ++i) edges.push_back(dataset_.token(i));
  SourceIdentity id;
  id.batch_size = options_.batch_size;
  id.seed = dataset_.options().seed;
  id.samples = dataset_.size();
  id.fingerprint = fmt::format(
      "token file of {} tokens of {} bytes, windows of {}, xxh3 of the first and last {} tokens {}",
      n, dataset_.options().token_bytes, dataset_.options().context + 1, kEdgeTokens,
      util::checksum_hex(util::checksum64(edges.data(), edges.size() * sizeof(uint32_t))));
  id.location = dataset_.path().string();
  return id;
}

}  // namespace stoker::data
