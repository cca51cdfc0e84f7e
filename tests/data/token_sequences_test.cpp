// TokenSequences: the partition of a corpus into sequences of T + 1 tokens (packed, or per
// document with dropped or padded tails), document masks, document splits and the Feistel
// permutation. The corpora are raw uint32 files whose ids are their own positions + 1 (documents
// end with the delimiter 0), so every token read back says where it came from.
#include "stoker/data/token_sequences.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "data_test_util.h"
#include "stoker/core/error.h"

namespace stoker::data {
namespace {

using test::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_FALSE(e.hint().empty()) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// Documents of the given lengths (each ends with the delimiter 0; the other ids are position + 1).
std::filesystem::path write_corpus(const TempDir& dir, const std::string& name,
                                   const std::vector<int64_t>& lengths) {
  std::vector<uint32_t> ids;
  for (const int64_t len : lengths) {
    for (int64_t k = 0; k + 1 < len; ++k) ids.push_back(static_cast<uint32_t>(ids.size() + 1));
    if (len > 0) ids.push_back(0);
  }
  const auto path = dir / name;
  test::write_bytes(path, ids.data(), ids.size() * sizeof(uint32_t));
  return path;
}

TokenCorpusOptions raw_u32() {
  return {.format = TokenFormat::raw, .token_bytes = 4, .delimiter = 0};
}

TEST(IndexPermutation, IsABijectionFixedByItsSeedAndKey) {
  for (const int64_t n : {1, 2, 3, 5, 17, 1000, 4097}) {
    IndexPermutation p(n, 42, 7);
    std::vector<int64_t> seen;
    for (int64_t i = 0; i < n; ++i) seen.push_back(p(i));
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(static_cast<size_t>(n));
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(sorted, iota) << n;
    IndexPermutation again(n, 42, 7), other_seed(n, 43, 7), other_key(n, 42, 8);
    int64_t differ_seed = 0, differ_key = 0, fixed_points = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(again(i), seen[static_cast<size_t>(i)]);
      differ_seed += other_seed(i) != seen[static_cast<size_t>(i)];
      differ_key += other_key(i) != seen[static_cast<size_t>(i)];
      fixed_points += seen[static_cast<size_t>(i)] == i;
    }
    if (n >= 1000) {
      EXPECT_GT(differ_seed, n * 9 / 10);
      EXPECT_GT(differ_key, n * 9 / 10);
      EXPECT_LT(fixed_points, 20);  // a shuffle, not the identity (about 1 expected)
    }
  }
}

TEST(TokenSequences, PackedSequencesTileTheConcatenationWithStrideT) {
  TempDir dir;
  const TokenCorpus corpus(write_corpus(dir, "c.bin", {7, 1, 30, 12, 2}).string(), raw_u32());
  const int64_t t = 5;
  const TokenSequences seq(corpus, {.context = t});
  ASSERT_EQ(corpus.num_tokens(), 52);
  EXPECT_EQ(seq.size(), (52 - 1) / t);  // 10: the last input token 50 is in none
  std::vector<int> inputs(52, 0);
  for (int64_t i = 0; i < seq.size(); ++i) {
    const auto ids = seq.tokens(i);
    ASSERT_EQ(ids.size(), static_cast<size_t>(t + 1));
    for (int64_t j = 0; j <= t; ++j)
      EXPECT_EQ(ids[static_cast<size_t>(j)], corpus.token(i * t + j));
    std::vector<int64_t> in(t), tg(t);
    seq.fill(i, DType::i64, in.data(), tg.data());
    for (int64_t j = 0; j < t; ++j) {
      EXPECT_EQ(in[static_cast<size_t>(j)], ids[static_cast<size_t>(j)]);
      EXPECT_EQ(tg[static_cast<size_t>(j)], ids[static_cast<size_t>(j) + 1]);
      ++inputs[static_cast<size_t>(i * t + j)];
    }
  }
  for (int64_t p = 0; p < 52; ++p) EXPECT_EQ(inputs[static_cast<size_t>(p)], p < 50 ? 1 : 0) << p;
}

TEST(TokenSequences, PerDocumentSequencesNeverCrossABoundaryAndTailsAreDroppedOrPadded) {
  TempDir dir;
  // T = 4: 9 tokens -> 2 full sequences; 1 token -> nothing to predict; 0 (none); 3 -> only a
  // tail; 5 -> exactly one; 14 -> 3 full + a tail of 1.
  const std::vector<int64_t> lengths = {9, 1, 3, 5, 14};
  const TokenCorpus corpus(write_corpus(dir, "c.bin", lengths).string(), raw_u32());
  const int64_t t = 4;
  const TokenSequences drop(corpus, {.context = t, .cross_documents = false});
  EXPECT_EQ(drop.size(), 2 + 0 + 0 + 1 + 3);
  const TokenSequences pad(corpus, {.context = t,
                                    .cross_documents = false,
                                    .tail = DocumentTail::pad,
                                    .pad_id = 7777,
                                    .ignore_index = -100});
  EXPECT_EQ(pad.size(), 2 + 0 + 1 + 1 + 4);

  // Every sequence lies inside one document; with padding, each document's tokens that have a
  // next token are inputs exactly once, and only padding has the ignored target.
  std::map<int64_t, int> inputs;
  for (int64_t i = 0; i < pad.size(); ++i) {
    const auto span = pad.span(i);
    const int64_t d = corpus.document_of(span.begin);
    EXPECT_LE(span.begin + span.length, corpus.document_begin(d + 1)) << i;
    std::vector<int64_t> in(t), tg(t), pos(t), doc(t);
    pad.fill(i, DType::i64, in.data(), tg.data(), pos.data(), doc.data());
    for (int64_t j = 0; j < t; ++j) {
      const auto uj = static_cast<size_t>(j);
      if (j < span.length - 1) {
        EXPECT_EQ(in[uj], corpus.token(span.begin + j));
        EXPECT_EQ(tg[uj], corpus.token(span.begin + j + 1));
        EXPECT_EQ(pos[uj], span.begin + j - corpus.document_begin(d));
        EXPECT_EQ(doc[uj], d);
        ++inputs[span.begin + j];
      } else {
        EXPECT_EQ(in[uj], 7777);
        EXPECT_EQ(tg[uj], -100);
        EXPECT_EQ(doc[uj], -1);
      }
    }
  }
  int64_t expected_inputs = 0;
  for (int64_t d = 0; d < corpus.num_documents(); ++d) {
    const int64_t len = corpus.document_length(d);
    for (int64_t k = 0; k + 1 < len; ++k) {
      EXPECT_EQ(inputs[corpus.document_begin(d) + k], 1) << "document " << d << " token " << k;
      ++expected_inputs;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(inputs.size()), expected_inputs);
  // Dropped tails: the same full sequences, in the same order.
  int64_t k = 0;
  for (int64_t i = 0; i < pad.size(); ++i)
    if (pad.span(i).length == t + 1) EXPECT_EQ(drop.tokens(k++), pad.tokens(i));
  EXPECT_EQ(k, drop.size());
}

TEST(TokenSequences, PackedMasksRestartPositionsAtEachDocument) {
  TempDir dir;
  const TokenCorpus corpus(write_corpus(dir, "c.bin", {3, 2, 9, 4}).string(), raw_u32());
  const int64_t t = 6;
  const TokenSequences seq(corpus, {.context = t});
  for (int64_t i = 0; i < seq.size(); ++i) {
    std::vector<int32_t> in(t), tg(t), pos(t), doc(t);
    seq.fill(i, DType::i32, in.data(), tg.data(), pos.data(), doc.data());
    for (int64_t j = 0; j < t; ++j) {
      const int64_t p = i * t + j;
      const int64_t d = corpus.document_of(p);
      EXPECT_EQ(doc[static_cast<size_t>(j)], d);
      EXPECT_EQ(pos[static_cast<size_t>(j)], p - corpus.document_begin(d));
      EXPECT_EQ(in[static_cast<size_t>(j)], corpus.token(p));
    }
  }
}

TEST(TokenSequences, DocumentSplitIsFixedBySeedAndDisjoint) {
  TempDir dir;
  std::vector<int64_t> lengths;
  for (int d = 0; d < 200; ++d) lengths.push_back(3 + d % 11);
  lengths[17] = 0;  // an empty document is in neither part
  const TokenCorpus corpus(write_corpus(dir, "c.bin", lengths).string(), raw_u32());
  // The raw reader counts documents by delimiters: an empty one leaves no trace here, so count
  // the corpus's own documents.
  const int64_t docs = corpus.num_documents() - corpus.num_empty_documents();
  const auto val = split_documents(corpus, {.fraction = 0.1, .seed = 5});
  EXPECT_EQ(static_cast<int64_t>(val.size()), std::llround(0.1 * static_cast<double>(docs)));
  EXPECT_EQ(split_documents(corpus, {.fraction = 0.1, .seed = 5}), val);
  EXPECT_NE(split_documents(corpus, {.fraction = 0.1, .seed = 6}), val);
  EXPECT_EQ(split_documents(corpus, {.count = 7, .seed = 5}).size(), 7u);
  const auto train = other_documents(corpus, val);
  EXPECT_EQ(static_cast<int64_t>(train.size() + val.size()), docs);
  std::set<int64_t> all(train.begin(), train.end());
  for (const int64_t d : val) EXPECT_TRUE(all.insert(d).second) << d;

  const int64_t t = 4;
  const TokenSequences tr(corpus, {.context = t}, train, "train split");
  const TokenSequences va(corpus, {.context = t}, val, "validation split");
  EXPECT_EQ(tr.num_tokens() + va.num_tokens(), corpus.num_tokens());
  std::set<int64_t> val_ids;
  for (const int64_t d : val)
    for (int64_t k = 0; k < corpus.document_length(d); ++k)
      val_ids.insert(corpus.token(corpus.document_begin(d) + k));
  val_ids.erase(0);
  // Packed over the train documents only: the ids (unique but for the delimiter) of validation
  // documents never appear; positions follow the train documents' concatenation.
  int64_t seen = 0;
  for (int64_t i = 0; i < tr.size(); ++i) {
    std::vector<int64_t> in(t), tg(t), pos(t), doc(t);
    tr.fill(i, DType::i64, in.data(), tg.data(), pos.data(), doc.data());
    for (int64_t j = 0; j < t; ++j) {
      EXPECT_EQ(val_ids.count(in[static_cast<size_t>(j)]), 0u);
      EXPECT_FALSE(std::binary_search(val.begin(), val.end(), doc[static_cast<size_t>(j)]));
      ++seen;
    }
  }
  EXPECT_EQ(seen, (tr.num_tokens() - 1) / t * t);
  EXPECT_NE(tr.name().find("train split"), std::string::npos);
}

TEST(TokenSequences, BadInputsAreClearErrors) {
  TempDir dir;
  const TokenCorpus small(write_corpus(dir, "small.bin", {4, 3}).string(), raw_u32());
  auto message = error_of([&] { TokenSequences(small, {.context = 8}); });
  EXPECT_NE(message.find("not one sequence of context + 1 = 9 tokens"), std::string::npos)
      << message;
  EXPECT_NE(message.find("small.bin"), std::string::npos) << message;
  message = error_of([&] { TokenSequences(small, {.context = 4, .cross_documents = false}); });
  EXPECT_NE(message.find("inside a document"), std::string::npos) << message;
  message = error_of([&] { TokenSequences(small, {.context = 0}); });
  EXPECT_NE(message.find("context 0"), std::string::npos) << message;
  message = error_of([&] { split_documents(small, {.count = 2}); });
  EXPECT_NE(message.find("would leave none to train on"), std::string::npos) << message;
  // An empty corpus file: refused when opened or when cut, naming the file either way.
  test::write_bytes(dir / "empty.bin", "", 0);
  message = error_of([&] {
    const TokenCorpus empty((dir / "empty.bin").string(), raw_u32());
    TokenSequences(empty, {.context = 4});
  });
  EXPECT_NE(message.find("empty.bin"), std::string::npos) << message;
  // Ids outside the vocabulary are named with their place in the corpus.
  // Ids 1 2 3 0 | 5 6 0: sequence 0 (1 2 3) is inside [0, 4), sequence 1 (3 0 5) is not.
  const TokenSequences vocab(small, {.context = 2, .vocab_size = 4});
  std::vector<int64_t> in(2), tg(2);
  vocab.fill(0, DType::i64, in.data(), tg.data());
  message = "";
  try {
    vocab.fill(1, DType::i64, in.data(), tg.data());
  } catch (const Error& e) {
    message = e.message();
  }
  EXPECT_NE(message.find("token id 5 of"), std::string::npos) << message;
}

}  // namespace
}  // namespace stoker::data
