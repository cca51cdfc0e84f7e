// TokenSequences (include/stoker/data/token_sequences.h): the partition of a corpus's documents
// into sequences, document splits, and the Feistel permutation that shuffles them.
#include "stoker/data/token_sequences.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "stoker/core/error.h"
#include "stoker/core/rng.h"

namespace stoker::data {

namespace {

template <typename T>
void store(void* out, int64_t j, int64_t v) {
  static_cast<T*>(out)[j] = static_cast<T>(v);
}

void store_as(DType dtype, void* out, int64_t j, int64_t v) {
  if (dtype == DType::i64)
    store<int64_t>(out, j, v);
  else
    store<int32_t>(out, j, v);
}

}  // namespace

// ---- IndexPermutation ----------------------------------------------------------------------

IndexPermutation::IndexPermutation(int64_t n, uint64_t seed, uint64_t key)
    : n_(n), seed_(seed), key_(key) {
  STOKER_CHECK(n >= 1, "IndexPermutation: size ", n, " must be positive");
  int bits = 0;
  while ((int64_t{1} << bits) < n) ++bits;
  half_bits_ = std::max(1, (bits + 1) / 2);
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t IndexPermutation::round(int r, uint64_t x) const {
  const core::Philox4 p = core::philox_block(seed_, key_, (static_cast<uint64_t>(r) << 40) | x);
  return ((static_cast<uint64_t>(p.v[0]) << 32) | p.v[1]) & half_mask_;
}

int64_t IndexPermutation::operator()(int64_t i) const {
  if (n_ == 1) return 0;
  // A Feistel network is a bijection of [0, 4^half_bits); walking the cycle until the value
  // falls back into [0, n) restricts it to a bijection of [0, n) (fewer than 4 steps expected,
  // since 4^half_bits < 4 n).
  uint64_t x = static_cast<uint64_t>(i);
  do {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (int r = 0; r < 4; ++r) {
      const uint64_t next = left ^ round(r, right);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

// ---- splits ----------------------------------------------------------------------------------

std::vector<int64_t> split_documents(const TokenCorpus& corpus, const DocumentSplit& split) {
  std::vector<int64_t> nonempty;
  for (int64_t d = 0; d < corpus.num_documents(); ++d)
    if (corpus.document_length(d) > 0) nonempty.push_back(d);
  const auto n = static_cast<int64_t>(nonempty.size());
  STOKER_CHECK((split.fraction > 0) != (split.count > 0),
               "split_documents: give a validation fraction in (0, 1) or a document count, not ",
               split.fraction > 0 ? "both" : "neither", " (", corpus.name(), ")");
  STOKER_CHECK(split.fraction >= 0 && split.fraction < 1 && split.count >= 0,
               "split_documents: validation fraction ", split.fraction, " and count ", split.count,
               " must be in [0, 1) and >= 0 (", corpus.name(), ")");
  int64_t take = split.count;
  if (split.fraction > 0)
    take = std::max<int64_t>(1, std::llround(split.fraction * static_cast<double>(n)));
  STOKER_CHECK_HINT(take < n, "split off fewer documents, or give a separate validation corpus",
                    "split_documents: ", corpus.name(), " has ", n,
                    " non-empty documents; a validation split of ", take,
                    " would leave none to train on");
  IndexPermutation perm(n, split.seed, 0x5f11u);
  std::vector<int64_t> val;
  val.reserve(static_cast<size_t>(take));
  for (int64_t i = 0; i < take; ++i) val.push_back(nonempty[static_cast<size_t>(perm(i))]);
  std::sort(val.begin(), val.end());
  return val;
}

std::vector<int64_t> other_documents(const TokenCorpus& corpus,
                                     const std::vector<int64_t>& validation) {
  std::vector<int64_t> out;
  size_t k = 0;
  for (int64_t d = 0; d < corpus.num_documents(); ++d) {
    while (k < validation.size() && validation[k] < d) ++k;
    if (k < validation.size() && validation[k] == d) continue;
    if (corpus.document_length(d) > 0) out.push_back(d);
  }
  return out;
}

// ---- TokenSequences --------------------------------------------------------------------------

TokenSequences::TokenSequences(const TokenCorpus& corpus, TokenSequencesOptions options)
    : TokenSequences(corpus, options, {}, "") {}

TokenSequences::TokenSequences(const TokenCorpus& corpus, TokenSequencesOptions options,
                               std::vector<int64_t> documents, std::string part)
    : corpus_(corpus), options_(options), part_(std::move(part)) {
  const int64_t t = options_.context;
  STOKER_CHECK_HINT(t >= 1, "give a positive context (--context)", "TokenSequences: context ", t,
                    " must be positive");
  all_ = part_.empty() && documents.empty();
  if (!all_) {
    documents_ = std::move(documents);
    starts_.reserve(documents_.size() + 1);
    int64_t at = 0, previous = -1;
    for (const int64_t d : documents_) {
      STOKER_CHECK(d > previous && d < corpus_.num_documents(), "TokenSequences: document ", d,
                   " of ", name(), " is not an ascending index below ", corpus_.num_documents());
      previous = d;
      starts_.push_back(at);
      at += corpus_.document_length(d);
    }
    starts_.push_back(at);
    tokens_ = at;
  } else {
    tokens_ = corpus_.num_tokens();
  }
  STOKER_CHECK_HINT(tokens_ > 0, "give a corpus with tokens", "TokenSequences: ", name(),
                    " holds no tokens");
  if (options_.cross_documents) {
    sequences_ = (tokens_ - 1) / t;
  } else {
    const int64_t docs = num_documents();
    first_sequence_.resize(static_cast<size_t>(docs) + 1);
    int64_t count = 0;
    for (int64_t k = 0; k < docs; ++k) {
      first_sequence_[static_cast<size_t>(k)] = count;
      const int64_t len = corpus_.document_length(all_ ? k : documents_[static_cast<size_t>(k)]);
      if (len < 2) continue;
      count += (len - 1) / t;
      if (options_.tail == DocumentTail::pad && (len - 1) % t != 0) ++count;
    }
    first_sequence_.back() = count;
    sequences_ = count;
  }
  STOKER_CHECK_HINT(
      sequences_ > 0,
      options_.cross_documents
          ? "use a smaller context (--context) or a larger corpus"
          : "use a smaller context (--context), pad document tails, or let sequences cross "
            "documents",
      "TokenSequences: ", name(), " holds ", tokens_, " tokens in ", num_documents(),
      " documents, not one sequence of context + 1 = ", t + 1, " tokens",
      options_.cross_documents ? "" : " inside a document");
}

int64_t TokenSequences::num_documents() const {
  return all_ ? corpus_.num_documents() : static_cast<int64_t>(documents_.size());
}

std::string TokenSequences::name() const {
  return part_.empty() ? corpus_.name() : fmt::format("{} ({})", corpus_.name(), part_);
}

int64_t TokenSequences::corpus_position(int64_t p) const {
  if (all_) return p;
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), p);
  const auto k = static_cast<size_t>(it - starts_.begin() - 1);
  return corpus_.document_begin(documents_[k]) + (p - starts_[k]);
}

int64_t TokenSequences::document_at(int64_t p) const {
  if (all_) return corpus_.document_of(p);
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), p);
  return documents_[static_cast<size_t>(it - starts_.begin() - 1)];
}

void TokenSequences::read(int64_t p, int64_t count, int64_t* out) const {
  if (all_) {
    corpus_.read(p, count, out);
    return;
  }
  while (count > 0) {
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), p);
    const auto k = static_cast<size_t>(it - starts_.begin() - 1);
    const int64_t n = std::min(count, starts_[k + 1] - p);
    corpus_.read(corpus_.document_begin(documents_[k]) + (p - starts_[k]), n, out);
    p += n;
    out += n;
    count -= n;
  }
}

TokenSequences::Span TokenSequences::span(int64_t i) const {
  STOKER_CHECK(i >= 0 && i < sequences_, "TokenSequences: sequence ", i, " is not in [0, ",
               sequences_, ") of ", name());
  const int64_t t = options_.context;
  if (options_.cross_documents) return {i * t, t + 1};
  const auto it = std::upper_bound(first_sequence_.begin(), first_sequence_.end(), i);
  const auto k = static_cast<size_t>(it - first_sequence_.begin() - 1);
  const int64_t d = all_ ? static_cast<int64_t>(k) : documents_[k];
  const int64_t doc_start = all_ ? corpus_.document_begin(d) : starts_[k];
  const int64_t len = corpus_.document_length(d);
  const int64_t j = i - first_sequence_[k];
  return {doc_start + j * t, std::min(t + 1, len - j * t)};
}

std::vector<int64_t> TokenSequences::tokens(int64_t i) const {
  const Span s = span(i);
  std::vector<int64_t> ids(static_cast<size_t>(options_.context + 1), options_.pad_id);
  read(s.begin, s.length, ids.data());
  return ids;
}

void TokenSequences::fill(int64_t i, DType dtype, void* input, void* target, void* positions,
                          void* documents) const {
  STOKER_CHECK(dtype == DType::i32 || dtype == DType::i64,
               "TokenSequences::fill: dtype must be i32 or i64");
  const Span s = span(i);
  const int64_t t = options_.context;
  thread_local std::vector<int64_t> ids;
  ids.resize(static_cast<size_t>(s.length));
  read(s.begin, s.length, ids.data());
  if (options_.vocab_size > 0) {
    for (int64_t j = 0; j < s.length; ++j) {
      const int64_t id = ids[static_cast<size_t>(j)];
      if (id < 0 || id >= options_.vocab_size) {
        STOKER_CHECK_HINT(
            false, "fix the corpus, or give the vocabulary size it was made with (--vocab)",
            "token id ", id, " of ", name(), " is outside the vocabulary [0, ", options_.vocab_size,
            ") at ", corpus_.locate(corpus_position(s.begin + j)).describe());
      }
    }
  }
  const int64_t real = s.length - 1;  // inputs with a real target
  if (dtype == DType::i64) {
    std::memcpy(input, ids.data(), static_cast<size_t>(real) * 8);
    std::memcpy(target, ids.data() + 1, static_cast<size_t>(real) * 8);
  } else {
    for (int64_t j = 0; j < real; ++j) {
      store<int32_t>(input, j, ids[static_cast<size_t>(j)]);
      store<int32_t>(target, j, ids[static_cast<size_t>(j) + 1]);
    }
  }
  for (int64_t j = real; j < t; ++j) {
    store_as(dtype, input, j, options_.pad_id);
    store_as(dtype, target, j, options_.ignore_index);
  }
  if (positions == nullptr && documents == nullptr) return;
  // Positions restart at each document's first token; walk the documents the sequence crosses.
  int64_t j = 0;
  while (j < real) {
    const int64_t p = s.begin + j;
    const int64_t d = document_at(p);
    int64_t doc_first, doc_end;  // in the concatenation's positions
    if (all_) {
      doc_first = corpus_.document_begin(d);
      doc_end = corpus_.document_begin(d + 1);
    } else {
      const auto it = std::upper_bound(starts_.begin(), starts_.end(), p);
      const auto k = static_cast<size_t>(it - starts_.begin() - 1);
      doc_first = starts_[k];
      doc_end = starts_[k + 1];
    }
    const int64_t stop = std::min(real, doc_end - s.begin);
    for (; j < stop; ++j) {
      if (positions != nullptr) store_as(dtype, positions, j, s.begin + j - doc_first);
      if (documents != nullptr) store_as(dtype, documents, j, d);
    }
  }
  for (; j < t; ++j) {
    if (positions != nullptr) store_as(dtype, positions, j, 0);
    if (documents != nullptr) store_as(dtype, documents, j, -1);
  }
}

}  // namespace stoker::data
