// TokenBatches: language-model batches of Philox-drawn windows from a TokenDataset (a flat file of
// token ids): input [B, T] and target [B * T] in the file's integer dtype, copied to `device` on
// the current stream. A batch is a pure function of (seed, epoch, batch, rank), and an epoch
// continues elastically at another world size.
// Ownership: borrows the dataset (it must outlive the source). Not thread-safe.
// Details: docs/formats.md#token-file-tokendataset, docs/distributed.md#data-parallelism.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "stoker/core/device.h"
#include "stoker/core/tensor.h"
#include "stoker/data/batch_source.h"

// TokenDataset: language-model windows from a flat file of token ids, memory-mapped.
namespace stoker::data {

struct TokenDatasetOptions {
  int token_bytes = 2;     // 2 (uint16 ids) or 4 (uint32 ids)
  int64_t context = 1024;  // T: tokens per input window
  uint64_t seed = 0;
  DType dtype = DType::i64;  // i64 or i32
  int64_t vocab_size = 0;    // > 0: every token of a window is checked to be below it
};

struct TokenWindow {
  Tensor input;        // [context]
  Tensor target;       // [context], input shifted by one
  int64_t offset = 0;  // first token's position in the file
};

class TokenDataset {
 public:
  TokenDataset(std::filesystem::path path, TokenDatasetOptions options);
  ~TokenDataset();
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  int64_t num_tokens() const { return num_tokens_; }
  // Windows per epoch: the number of disjoint windows of context + 1 tokens that fit.
  int64_t size() const { return num_tokens_ / (options_.context + 1); }
  // Start of window i of `epoch`, in [0, num_tokens - context - 1].
  int64_t offset(int64_t epoch, int64_t i) const;
  TokenWindow window(int64_t epoch, int64_t i) const;
  // The window starting at token `offset`.
  TokenWindow window_at(int64_t offset) const;
  // Token at position `pos` of the file.
  uint32_t token(int64_t pos) const;

  const std::filesystem::path& path() const { return path_; }
  const TokenDatasetOptions& options() const { return options_; }

 private:
  std::filesystem::path path_;
  TokenDatasetOptions options_;
  const uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  int64_t num_tokens_ = 0;
};

}  // namespace stoker::data

namespace stoker::data {

struct TokenBatchesOptions {
  int64_t batch_size = 8;         // B: windows per batch on this rank
  int64_t batches_per_epoch = 0;  // 0: dataset.size() / (batch_size * world_size)
  Device device = Device::cpu();
  int rank = 0;  // data parallelism: this rank's batches of each epoch
  int world_size = 1;
  // A window with a token the dataset refuses (vocab_size): fail throws naming it; skip takes
  // another window drawn for the same place (deterministically: every rank and every resume
  // sees the same one) and counts it (skipped()).
  CorruptPolicy on_corrupt = CorruptPolicy::fail;
};

class TokenBatches : public BatchSource {
 public:
  TokenBatches(const TokenDataset& dataset, TokenBatchesOptions options);

  void start_epoch(int64_t epoch) override;
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override { return batches_; }
  int64_t samples_per_epoch() const override { return batches_ * options_.batch_size; }
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return batch_; }
  void restore(int64_t epoch, int64_t batch_index) override;
  int64_t epoch_progress() const override;
  bool continue_epoch(int64_t epoch, int64_t progress) override;
  SourceIdentity identity() const override;
  std::string kind() const override { return "TokenBatches"; }

  // Batch `b` of `epoch` on this rank (a plain epoch's), without moving the position
  // (evaluation, tests).
  Batch batch_at(int64_t epoch, int64_t b) const;
  int64_t context() const { return dataset_.options().context; }
  // Windows replaced under CorruptPolicy::skip so far (each time one is met), and why the first
  // one was.
  int64_t skipped() const { return skipped_; }
  const std::string& first_skipped() const { return first_skipped_; }

 private:
  // Window i of `epoch`, or its replacement under skip.
  TokenWindow window(int64_t epoch, int64_t i) const;
  // The batch of windows first, first + 1, ..., first + B - 1 of `epoch`.
  Batch windows_from(int64_t epoch, int64_t first) const;

  const TokenDataset& dataset_;
  TokenBatchesOptions options_;
  int64_t batches_ = 0;
  int64_t epoch_ = -1;
  int64_t batch_ = 0;
  int64_t start_ = 0;  // the progress the current epoch started at (0: a plain epoch)
  int64_t first_ = 0;  // its first batch index
  mutable int64_t skipped_ = 0;
  mutable std::string first_skipped_;
};

}  // namespace stoker::data
