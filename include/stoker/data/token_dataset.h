// TokenDataset: language-model windows from a flat file of token ids, memory-mapped.
//
// The file is the raw little-endian token ids (uint16 or uint32, no header), as written by
// common tokenizer scripts. Window i of epoch e starts at an offset drawn uniformly from
// [0, num_tokens - (context + 1)] by Philox from (seed, e, i); it holds context + 1 tokens,
// returned as input = tokens[0, context) and target = tokens[1, context + 1), both [context]
// tensors of i64 (default) or i32 on the host.
//
// Ownership: owns the read-only mapping; unmapped on destruction. Thread-safety: every const
// method is thread-safe (the mapping is never written).
#pragma once

#include <cstdint>
#include <filesystem>

#include "stoker/core/tensor.h"

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
