// TokenSequences: a TokenCorpus (or a split of its documents) cut into the fixed-length training
// sequences of a language model, each of context + 1 tokens (input = tokens [0, T), target =
// tokens [1, T + 1)). The cut is a partition: sequence i is a pure function of i, and every token
// is an input of exactly one sequence.
//
//   packed (cross_documents = true): the selected documents are concatenated in corpus order
//     (V tokens) and sequence i holds tokens [i T, i T + T + 1) of that concatenation (Megatron's
//     and nanoGPT's stride T: the last target of one is the first input of the next), so there are
//     floor((V - 1) / T) sequences and the final (V - 1) mod T input tokens are in none.
//   per document (cross_documents = false): document d of L tokens gives floor((L - 1) / T) full
//     sequences [k T, k T + T + 1) of its own tokens; its tail (the last (L - 1) mod T input
//     tokens, and the whole of a document shorter than T + 1 tokens) is either dropped
//     (DocumentTail::drop) or one more sequence padded to T + 1 (DocumentTail::pad): inputs past
//     the document's end are pad_id and their targets ignore_index (nn::CrossEntropyLoss skips
//     them). A document of 0 or 1 tokens has nothing to predict and gives no sequence.
//
// Document-masked attention: fill() can also write, for each input token, its position inside
// its document (0 at a document's first token) and its document's index in the corpus (padding:
// position 0, document -1), so that attention can be restricted to tokens of the same document.
//
// A validation split by document (split_documents): a fraction or count of the corpus's
// non-empty documents, chosen by the seed alone (the first ones of a seeded permutation of the
// documents), returned sorted; TokenSequences of the split's train part and of its validation
// part cover disjoint documents.
//
// IndexPermutation: a bijection of [0, n) fixed by (seed, key) and computed per index in O(1)
// memory (a 4-round Feistel network on the smallest even power of two >= n, cycle-walking back
// into [0, n)): the shuffled order of billions of sequences needs no array.
//
// Ownership: borrows the corpus, which must outlive it; holds the selected documents' offsets
// (8 bytes a document when a split or per-document sequences need them, none otherwise).
// Thread-safety: immutable after construction; every method is const and thread-safe.
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
