// TokenSequences: a TokenCorpus (or a split of its documents) cut into language-model sequences
// of context + 1 tokens, a partition (packed across documents, or per document with the tail
// dropped or padded), with optional per-token document positions for document-masked
// attention; split_documents picks a validation split by the seed alone; IndexPermutation is an
// O(1)-memory seeded bijection of [0, n).
// Ownership: borrows the corpus (it must outlive this). Thread-safety: immutable, thread-safe.
// Details: docs/data_loader.md#token-data-sequences-epochs-mixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/core/dtype.h"
#include "stoker/data/token_corpus.h"

namespace stoker::data {

enum class DocumentTail { drop, pad };

struct TokenSequencesOptions {
  int64_t context = 1024;                  // T: a sequence holds T + 1 tokens
  bool cross_documents = true;             // false: no sequence crosses a document boundary
  DocumentTail tail = DocumentTail::drop;  // per document: what becomes of a document's tail
  int64_t pad_id = 0;                      // input id of padding (DocumentTail::pad)
  int64_t ignore_index = -100;  // target of padding (nn::CrossEntropyOptions::ignore_index)
  int64_t vocab_size = 0;       // > 0: fill() refuses an id outside [0, vocab_size)
};

// What a validation split takes: `fraction` of the documents (rounded, at least one when > 0)
// or `count` documents (exactly one of them is set).
struct DocumentSplit {
  double fraction = 0;
  int64_t count = 0;
  uint64_t seed = 0;
};

// The validation documents of `split` (ascending). Errors name the corpus: a split taking no
// document or every document, a bad fraction.
std::vector<int64_t> split_documents(const TokenCorpus& corpus, const DocumentSplit& split);
// The complement of `validation` (ascending) among the corpus's non-empty documents.
std::vector<int64_t> other_documents(const TokenCorpus& corpus,
                                     const std::vector<int64_t>& validation);

class IndexPermutation {
 public:
  IndexPermutation(int64_t n, uint64_t seed, uint64_t key);
  int64_t size() const { return n_; }
  int64_t operator()(int64_t i) const;  // i in [0, n)

 private:
  uint64_t round(int r, uint64_t x) const;
  int64_t n_;
  uint64_t seed_, key_;
  int half_bits_ = 0;
  uint64_t half_mask_ = 0;
};

class TokenSequences {
 public:
  // Every document of `corpus`.
  TokenSequences(const TokenCorpus& corpus, TokenSequencesOptions options);
  // Only `documents` (ascending, distinct document indices of the corpus; e.g. a split's part).
  TokenSequences(const TokenCorpus& corpus, TokenSequencesOptions options,
                 std::vector<int64_t> documents, std::string part = "");

  int64_t size() const { return sequences_; }  // sequences
  int64_t context() const { return options_.context; }
  int64_t num_tokens() const { return tokens_; }  // tokens of the selected documents
  int64_t num_documents() const;                  // selected documents
  const TokenCorpus& corpus() const { return corpus_; }
  const TokenSequencesOptions& options() const { return options_; }
  // For messages: the corpus's name and the part ("validation split", ...).
  std::string name() const;

  // Where sequence i lies: its first token's position in the concatenation of the selected
  // documents and its number of real tokens (T + 1, fewer for a padded tail).
  struct Span {
    int64_t begin = 0;
    int64_t length = 0;
  };
  Span span(int64_t i) const;
  // Writes sequence i: input[T] and target[T] (dtype i32 or i64), and when not null positions[T]
  // and documents[T] (the same dtype). Throws naming the corpus position of an id outside the
  // vocabulary (options().vocab_size).
  void fill(int64_t i, DType dtype, void* input, void* target, void* positions = nullptr,
            void* documents = nullptr) const;
  // The T + 1 ids of sequence i (padding: pad_id), for tests and checks.
  std::vector<int64_t> tokens(int64_t i) const;

 private:
  // The corpus position of position p of the concatenation of the selected documents, and the
  // selected document k holding it (index into documents_, or the corpus document when all).
  int64_t corpus_position(int64_t p) const;
  int64_t document_at(int64_t p) const;  // the corpus document index holding position p
  // Reads `count` ids from position p of the concatenation into out.
  void read(int64_t p, int64_t count, int64_t* out) const;

  const TokenCorpus& corpus_;
  TokenSequencesOptions options_;
  std::string part_;
  bool all_ = true;                 // every document of the corpus (no documents_ array)
  std::vector<int64_t> documents_;  // selected corpus documents (when !all_)
  std::vector<int64_t> starts_;     // their first position in the concatenation (+ the end)
  // Per document: the first sequence of each document (+ the total), by document order.
  std::vector<int64_t> first_sequence_;
  int64_t tokens_ = 0;
  int64_t sequences_ = 0;
};

}  // namespace stoker::data
