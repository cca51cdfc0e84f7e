// TokenBatches: language-model batches from a TokenDataset (a flat file of token ids), for a
// decoder trained on next-token prediction (examples/gpt).
//
// A batch holds batch_size windows of the dataset: input [B, T] (the window's tokens) and
// target [B * T] (the same tokens shifted by one, flattened so nn::CrossEntropyLoss takes it
// next to logits [B * T, V]), both in the dataset's integer dtype, copied to `device`.
// Batch b of epoch e on rank r holds windows (b * world_size + r) * B + j, j in [0, B), of the
// dataset's epoch e (TokenDataset::window: offsets drawn by Philox from (seed, e, i)), so the
// ranks of a data-parallel job see different windows and a batch is a pure function of
// (seed, epoch, batch, rank): restore() needs no replay. An epoch has as many batches as the
// dataset's disjoint windows fill on every rank (partial batches are dropped), or
// `batches_per_epoch` when that is set.
//
// Elastic resume: an epoch's windows are indices [0, K) of the epoch's window sequence with
// K = batches_per_epoch() * world_size * batch_size, a prefix whose length depends on the world
// size (the disjoint windows fill whole batches on every rank, partial batches are dropped; or
// batches_per_epoch per rank). epoch_progress() is the number of windows the whole job consumed,
// b * world_size * batch_size after b batches. continue_epoch(e, k) continues epoch e with the
// windows [k, K) of this source's own epoch (K from its own world size): batch c of the
// continuation on rank r holds windows k + (c * world_size + r) * B + j, and the continuation's
// floor((K - k) / (world_size * B)) batches are the epoch's last batch indices (a final
// partial batch is dropped, as in a plain epoch; k >= K: the epoch is over). So the continued
// epoch delivers the windows of this world size's epoch that the old run had not consumed,
// each once. Progress: 0 <= k, and k <= dataset.size() (windows of the largest epoch of any world
// size) unless batches_per_epoch is set.
//
// identity(): the batch size, the dataset's seed, its windows as samples, and a fingerprint of
// the file (token count and width, context, XXH3-64 of its first and last 4096 tokens: a
// sample of the content that costs no full read of a file of billions of tokens), not its path.
//
// Ownership: borrows the dataset, which must outlive the source. Copies to a GPU are queued on
// the current stream. Not thread-safe.
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
