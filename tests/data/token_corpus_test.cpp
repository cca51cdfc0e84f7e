// TokenCorpus against corpora written independently of it: tests/data/write_token_corpora.py
// (numpy, from the formats' specifications) writes Megatron datasets of five dtypes (documents of
// several sequences, an empty document, an empty sequence), llm.c GPT-2 and Llama 3 shards
// (documents across shards) and raw uint16/uint32 files, plus every token and boundary they hold
// (expected.json). Then damaged copies of them: each refused with an error naming the file and
// what is wrong, never a crash or a hang.
#include "stoker/data/token_corpus.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "stoker/core/error.h"

namespace stoker::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

// The corpora of write_token_corpora.py, written once for the suite.
class TokenCorpusTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string python = STOKER_PYTHON3;
    if (python.empty()) return;
    const std::string cmd = python + " " + STOKER_SOURCE_DIR +
                            "/tests/data/write_token_corpora.py " + dir_->path().string();
    if (std::system(cmd.c_str()) != 0) return;
    std::ifstream f(dir_->path() / "expected.json");
    expected_ = new json(json::parse(f));
  }
  static void TearDownTestSuite() {
    delete expected_;
    delete dir_;
    expected_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (std::string(STOKER_PYTHON3).empty()) GTEST_SKIP() << "no python3 found by CMake";
    ASSERT_NE(expected_, nullptr)
        << "tests/data/write_token_corpora.py failed (it needs numpy: scripts/setup.sh)";
  }

  static const json& spec(const std::string& name) { return (*expected_)[name]; }
  static fs::path path(const std::string& name) { return dir_->path() / name; }

  static TokenCorpusOptions options_of(const json& c) {
    TokenCorpusOptions o;
    if (c["options"].contains("token_bytes")) o.token_bytes = c["options"]["token_bytes"];
    if (c["options"].contains("delimiter")) o.delimiter = c["options"]["delimiter"];
    return o;
  }
  static TokenCorpus open(const json& c) {
    return TokenCorpus(c["sources"].get<std::vector<std::string>>(), options_of(c));
  }

  // A copy of file `name` in `tmp` with `edit` applied to its bytes.
  template <typename Edit>
  static fs::path damaged(const TempDir& tmp, const std::string& name, Edit edit) {
    std::vector<uint8_t> bytes = read_bytes(path(name));
    edit(bytes);
    const fs::path out = tmp / fs::path(name).filename().string();
    write_bytes(out, bytes);
    return out;
  }

  static TempDir* dir_;
  static json* expected_;
};
TempDir* TokenCorpusTest::dir_ = nullptr;
json* TokenCorpusTest::expected_ = nullptr;

template <typename T>
void put(std::vector<uint8_t>& bytes, size_t offset, T v) {
  std::memcpy(bytes.data() + offset, &v, sizeof(T));
}

// The message of the stoker::Error `f` throws ("" when it does not throw: a test failure).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_FALSE(e.hint().empty()) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return "";
}

#define EXPECT_ERROR(expr, ...)                                                      \
  do {                                                                               \
    const std::string message_ = error_of([&] { (void)(expr); });                    \
    for (const std::string& part_ : std::initializer_list<std::string>{__VA_ARGS__}) \
      EXPECT_NE(message_.find(part_), std::string::npos)                             \
          << "expected \"" << part_ << "\" in: " << message_;                        \
  } while (0)

TEST_F(TokenCorpusTest, EveryFormatReadsEveryTokenAndBoundaryAsWritten) {
  for (const auto& [name, c] : expected_->items()) {
    SCOPED_TRACE(name);
    const TokenCorpus corpus = open(c);
    const std::string format = c["format"];
    EXPECT_EQ(corpus.format(), format == "megatron" ? TokenFormat::megatron
                               : format == "llmc"   ? TokenFormat::llmc
                                                    : TokenFormat::raw);
    EXPECT_EQ(token_type_name(corpus.token_type()), c["dtype"].get<std::string>());
    const std::vector<int64_t> tokens = c["tokens"];
    ASSERT_EQ(corpus.num_tokens(), static_cast<int64_t>(tokens.size()));

    // Every token, by one read across the files, by token() and by reads of 7 at any offset.
    std::vector<int64_t> all(tokens.size());
    corpus.read(0, corpus.num_tokens(), all.data());
    EXPECT_EQ(all, tokens);
    std::vector<int32_t> narrow(7);
    for (int64_t pos = 0; pos < corpus.num_tokens(); ++pos) {
      ASSERT_EQ(corpus.token(pos), tokens[pos]) << "position " << pos;
      const int64_t n = std::min<int64_t>(7, corpus.num_tokens() - pos);
      corpus.read(pos, n, narrow.data());
      for (int64_t k = 0; k < n; ++k) ASSERT_EQ(narrow[k], tokens[pos + k]) << pos << "+" << k;
    }

    // Documents (and Megatron's sequences and document indices).
    const std::vector<int64_t> docs = c["documents"];
    ASSERT_EQ(corpus.num_documents(), static_cast<int64_t>(docs.size()) - 1);
    int64_t empty = 0;
    for (int64_t d = 0; d < corpus.num_documents(); ++d) {
      EXPECT_EQ(corpus.document_begin(d), docs[d]) << "document " << d;
      EXPECT_EQ(corpus.document_length(d), docs[d + 1] - docs[d]) << "document " << d;
      empty += docs[d] == docs[d + 1];
      for (int64_t pos = docs[d]; pos < docs[d + 1]; ++pos)
        ASSERT_EQ(corpus.document_of(pos), d) << "position " << pos;
    }
    EXPECT_EQ(corpus.document_begin(corpus.num_documents()), corpus.num_tokens());
    EXPECT_EQ(corpus.num_empty_documents(), empty);
    if (c.contains("sequences")) {
      const std::vector<int64_t> seqs = c["sequences"];
      ASSERT_EQ(corpus.num_sequences(), static_cast<int64_t>(seqs.size()) - 1);
      for (int64_t s = 0; s <= corpus.num_sequences(); ++s)
        EXPECT_EQ(corpus.sequence_begin(s), seqs[s]) << "sequence " << s;
      const std::vector<int64_t> doc_index = c["document_indices"];
      for (int64_t d = 0; d <= corpus.num_documents(); ++d)
        EXPECT_EQ(corpus.document_first_sequence(d), doc_index[d]) << "document " << d;
    } else {
      EXPECT_EQ(corpus.num_sequences(), corpus.num_documents());
    }

    // The scan's smallest and largest id; a vocabulary of exactly max + 1 passes.
    const TokenScanResult scan = corpus.scan(c["max_id"].get<int64_t>() + 1);
    EXPECT_EQ(scan.min_id, c["min_id"].get<int64_t>());
    EXPECT_EQ(scan.max_id, c["max_id"].get<int64_t>());
    EXPECT_EQ(scan.tokens, corpus.num_tokens());
  }
}

TEST_F(TokenCorpusTest, FilesAreZeroCopyViewsOfTheMappings) {
  const TokenCorpus corpus = open(spec("llmc_gpt2"));
  const std::vector<std::string> shards = spec("llmc_gpt2")["shards"];
  ASSERT_EQ(corpus.files().size(), shards.size());
  int64_t first = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const TokenFile& f = corpus.files()[i];
    EXPECT_EQ(f.path, fs::path(shards[i]));
    EXPECT_EQ(f.first, first);
    EXPECT_EQ(f.header_bytes, 1024);
    const std::vector<uint8_t> bytes = read_bytes(shards[i]);
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), 1024 + 2 * f.size);
    EXPECT_EQ(std::memcmp(f.data, bytes.data() + 1024, bytes.size() - 1024), 0);
    first += f.size;
  }
  EXPECT_EQ(corpus.name(), std::to_string(shards.size()) + " shards (" + shards.front() + " .. " +
                               shards.back() + ")");
}

TEST_F(TokenCorpusTest, MegatronOpensByPrefixIdxOrBin) {
  const std::string prefix = path("mega_i32").string();
  for (const std::string& source : {prefix, prefix + ".idx", prefix + ".bin"}) {
    SCOPED_TRACE(source);
    const TokenCorpus corpus(source);
    EXPECT_EQ(corpus.format(), TokenFormat::megatron);
    EXPECT_EQ(corpus.name(), prefix);
    EXPECT_EQ(corpus.num_tokens(), static_cast<int64_t>(spec("megatron_int32")["tokens"].size()));
    ASSERT_EQ(corpus.files().size(), 1u);
    EXPECT_EQ(corpus.files()[0].path, fs::path(prefix + ".bin"));
  }
}

TEST_F(TokenCorpusTest, ShardListsKeepTheirOrderAndGlobsAreSortedByName) {
  const std::vector<std::string> shards = spec("llmc_gpt2")["shards"];
  const std::vector<int64_t> tokens = spec("llmc_gpt2")["tokens"];
  // A list given in reverse order is read in that order.
  const TokenCorpus reversed(std::vector<std::string>(shards.rbegin(), shards.rend()));
  ASSERT_EQ(reversed.files().size(), shards.size());
  EXPECT_EQ(reversed.files()[0].path, fs::path(shards.back()));
  EXPECT_EQ(reversed.token(0), tokens[tokens.size() - reversed.files()[0].size]);
  // A glob whose matches the file system lists in any order reads them sorted: shards _2.._11
  // (not zero-padded: byte order puts _10, _11 before _2).
  TempDir tmp;
  std::vector<std::string> names;
  for (int i = 2; i <= 11; ++i) {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = 1;
    std::vector<uint8_t> bytes(1024 + 2);
    std::memcpy(bytes.data(), header.data(), 1024);
    put<uint16_t>(bytes, 1024, static_cast<uint16_t>(i));
    write_bytes(tmp / ("s_" + std::to_string(i) + ".bin"), bytes);
  }
  const TokenCorpus globbed((tmp / "s_*.bin").string());
  std::vector<int64_t> order(globbed.num_tokens());
  globbed.read(0, globbed.num_tokens(), order.data());
  EXPECT_EQ(order, (std::vector<int64_t>{10, 11, 2, 3, 4, 5, 6, 7, 8, 9}));
  // No document delimiter in these ids: one document over all shards.
  EXPECT_EQ(globbed.num_documents(), 1);
}

TEST_F(TokenCorpusTest, DelimitersAreOptionsWithEachFormatsDefault) {
  const TokenCorpus gpt2(spec("llmc_gpt2")["sources"].get<std::vector<std::string>>());
  EXPECT_EQ(gpt2.delimiter(), 50256);
  const TokenCorpus llama(spec("llmc_llama3")["sources"].get<std::vector<std::string>>());
  EXPECT_EQ(llama.delimiter(), 128000);
  // Raw files: one document per file unless a delimiter is given.
  const TokenCorpus raw(path("raw_u16.bin").string(), {.token_bytes = 2});
  EXPECT_EQ(raw.delimiter(), -1);
  EXPECT_EQ(raw.num_documents(), 1);
  const TokenCorpus two_files(
      std::vector<std::string>{path("raw_u16.bin").string(), path("raw_u16.bin").string()},
      {.token_bytes = 2});
  EXPECT_EQ(two_files.num_documents(), 2);
  EXPECT_EQ(two_files.document_begin(1), raw.num_tokens());
  // Another delimiter for shards: the first token of the GPT-2 corpus's third document.
  const int64_t third = gpt2.document_begin(2) + 1;
  const TokenCorpus other(spec("llmc_gpt2")["sources"].get<std::vector<std::string>>(),
                          {.delimiter = gpt2.token(third)});
  EXPECT_EQ(other.document_begin(1), third);
  // A delimiter no id of the type can be.
  EXPECT_ERROR(TokenCorpus(spec("llmc_gpt2")["sources"].get<std::vector<std::string>>(),
                           {.delimiter = 70000}),
               "delimiter 70000 cannot be a uint16 id");
}

TEST_F(TokenCorpusTest, IdsOutsideTheVocabularyNameFileDocumentAndOffset) {
  // The GPT-2 shards hold ids below 50257; vocabulary 50256 makes every delimiter bad: the
  // first is position 0.
  const TokenCorpus shards(spec("llmc_gpt2")["sources"].get<std::vector<std::string>>());
  const std::vector<std::string> names = spec("llmc_gpt2")["shards"];
  EXPECT_ERROR(shards.scan(50256), "token id 50256 at " + names[0] + " token 0 (byte 1024)",
               "document 0 token 0", "not below the vocabulary size 50256");
  // One large id in the second shard, written by hand.
  TempDir tmp;
  std::vector<std::string> copies;
  for (size_t i = 0; i < names.size(); ++i)
    copies.push_back(damaged(tmp, "shards/" + fs::path(names[i]).filename().string(),
                             [&](std::vector<uint8_t>& b) {
                               if (i == 1) put<uint16_t>(b, 1024 + 2 * 5, 60000);
                             })
                         .string());
  const TokenCorpus bad(copies);
  const int64_t pos = bad.files()[1].first + 5;
  const int64_t doc = bad.document_of(pos);
  EXPECT_ERROR(bad.scan(50257),
               "token id 60000 at " + copies[1] + " token 5 (byte 1034), document " +
                   std::to_string(doc) + " token " + std::to_string(pos - bad.document_begin(doc)),
               "not below the vocabulary size 50257");
  EXPECT_EQ(bad.scan(0).max_id, 60000);  // no vocabulary: the range only
  // Megatron: the position names the sequence too.
  const TokenCorpus mega(path("mega_i32").string());
  const json& c = spec("megatron_int32");
  const int64_t max_id = c["max_id"];
  const std::vector<int64_t> tokens = c["tokens"];
  const int64_t first_max = std::find(tokens.begin(), tokens.end(), max_id) - tokens.begin();
  const TokenPosition at = mega.locate(first_max);
  EXPECT_GE(at.sequence, 0);
  EXPECT_ERROR(mega.scan(max_id), "token id " + std::to_string(max_id) + " at " + at.describe(),
               ", sequence " + std::to_string(at.sequence));
  EXPECT_EQ(at.file_byte, first_max * 4);
}

TEST_F(TokenCorpusTest, NegativeIdsOfSignedMegatronDtypesAreBad) {
  TempDir tmp;
  fs::copy_file(path("mega_i16.idx"), tmp / "mega_i16.idx");
  damaged(tmp, "mega_i16.bin", [](std::vector<uint8_t>& b) { put<int16_t>(b, 6, -3); });
  const TokenCorpus corpus((tmp / "mega_i16").string());
  EXPECT_EQ(corpus.scan().min_id, -3);
  EXPECT_ERROR(corpus.scan(30000), "token id -3 at ", "token 3 (byte 6)", "is negative");
}

// --- damaged Megatron datasets -------------------------------------------------------------

TEST_F(TokenCorpusTest, DamagedMegatronIndexesAreRefusedNamingTheFileAndTheProblem) {
  const json& c = spec("megatron_uint16");
  const int64_t S = static_cast<int64_t>(c["sequences"].size()) - 1;
  const int64_t D = static_cast<int64_t>(c["document_indices"].size());
  const size_t lengths = 34, pointers = 34 + 4 * S, doc_index = 34 + 12 * S;
  const uint64_t bin_size = fs::file_size(path("mega_u16.bin"));
  struct Case {
    std::string what;
    std::function<void(std::vector<uint8_t>&)> edit;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"magic", [](auto& b) { b[0] = 'T'; }, {"bad magic", "MMIDIDX"}},
      {"version", [](auto& b) { put<uint64_t>(b, 9, 2); }, {"version 2", "version 1"}},
      {"dtype code", [](auto& b) { b[17] = 9; }, {"unknown dtype code 9"}},
      {"float dtype", [](auto& b) { b[17] = 7; }, {"dtype code 7 (float32)", "not token ids"}},
      {"sequence count",
       [](auto& b) { put<uint64_t>(b, 18, uint64_t(1) << 62); },
       {"more bytes than the file has"}},
      {"document count", [&](auto& b) { put<uint64_t>(b, 26, D + 1); }, {"truncated"}},
      {"pointer outside the .bin",
       [&](auto& b) { put<int64_t>(b, pointers + 8 * (S - 1), int64_t(bin_size) + 100); },
       {"sequence " + std::to_string(S - 1), "points outside", "mega_u16.bin"}},
      {"negative pointer",
       [&](auto& b) { put<int64_t>(b, pointers, -2); },
       {"sequence 0", "points outside"}},
      {"pointers not back to back",
       [&](auto& b) { put<int64_t>(b, pointers + 8, 0); },
       {"sequence 1 starts at byte 0", "back to back"}},
      {"negative length",
       [&](auto& b) { put<int32_t>(b, lengths + 4, -1); },
       {"sequence 1 has a negative length -1"}},
      {"length past the .bin",
       [&](auto& b) { put<int32_t>(b, lengths + 4 * (S - 1), 1 << 30); },
       {"points outside"}},
      {"document index not 0 first",
       [&](auto& b) { put<int64_t>(b, doc_index, 1); },
       {"start with 1, not 0"}},
      {"document indices decreasing",
       [&](auto& b) { put<int64_t>(b, doc_index + 16, 0); },
       {"document index 2 is 0, below the one before it"}},
      {"document index past the sequences",
       [&](auto& b) { put<int64_t>(b, doc_index + 8, S + 5); },
       {"document index 1 is " + std::to_string(S + 5), "past the"}},
      {"last document index",
       [&](auto& b) { put<int64_t>(b, doc_index + 8 * (D - 1), S - 1); },
       {"last document index is " + std::to_string(S - 1)}},
      {"multimodal sequence modes",
       [&](auto& b) { b.resize(b.size() + S, 0); },
       {"sequence mode per sequence", "multimodal"}},
      {"extra bytes", [&](auto& b) { b.resize(b.size() + 3, 0); }, {"extra bytes at the end"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    TempDir tmp;
    fs::copy_file(path("mega_u16.bin"), tmp / "mega_u16.bin");
    const fs::path idx = damaged(tmp, "mega_u16.idx", k.edit);
    std::vector<std::string> parts = k.message;
    if (k.what != "pointer outside the .bin") parts.push_back(idx.string());
    const std::string message = error_of([&] { TokenCorpus((tmp / "mega_u16").string()); });
    for (const std::string& p : parts)
      EXPECT_NE(message.find(p), std::string::npos) << "expected \"" << p << "\" in: " << message;
  }
}

TEST_F(TokenCorpusTest, TruncatedMegatronFilesAreRefusedAtEveryLength) {
  const std::vector<uint8_t> idx = read_bytes(path("mega_u16.idx"));
  const std::vector<uint8_t> bin = read_bytes(path("mega_u16.bin"));
  for (size_t keep : {size_t{0}, size_t{8}, size_t{33}, size_t{34}, size_t{35}, idx.size() / 2,
                      idx.size() - 8, idx.size() - 1}) {
    SCOPED_TRACE("idx cut to " + std::to_string(keep));
    TempDir tmp;
    write_bytes(tmp / "m.idx", idx.data(), keep);
    write_bytes(tmp / "m.bin", bin);
    EXPECT_ERROR(TokenCorpus((tmp / "m").string()), (tmp / "m.idx").string(),
                 keep < 34 ? "shorter than the 34-byte header" : "truncated");
  }
  for (size_t keep : {size_t{0}, size_t{1}, bin.size() / 2, bin.size() - 2, bin.size() - 1}) {
    SCOPED_TRACE(".bin cut to " + std::to_string(keep));
    TempDir tmp;
    write_bytes(tmp / "m.idx", idx);
    write_bytes(tmp / "m.bin", bin.data(), keep);
    EXPECT_ERROR(TokenCorpus((tmp / "m").string()), (tmp / "m.bin").string(),
                 "truncated or belongs to another index");
  }
  TempDir tmp;
  write_bytes(tmp / "m.idx", idx);
  std::vector<uint8_t> longer = bin;
  longer.resize(bin.size() + 4);
  write_bytes(tmp / "m.bin", longer);
  EXPECT_ERROR(TokenCorpus((tmp / "m").string()), "do not belong together");
  fs::remove(tmp / "m.bin");
  EXPECT_ERROR(TokenCorpus((tmp / "m").string()), (tmp / "m.bin").string());
}

// --- damaged llm.c shards and raw files ------------------------------------------------------

TEST_F(TokenCorpusTest, DamagedShardsAreRefusedNamingTheShard) {
  const std::string shard = "shards/gpt2_train_000001.bin";
  const std::vector<uint8_t> good = read_bytes(path(shard));
  struct Case {
    std::string what;
    std::function<void(std::vector<uint8_t>&)> edit;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"magic", [](auto& b) { put<int32_t>(b, 0, 20240521); }, {"bad magic 20240521"}},
      {"evaluation file", [](auto& b) { put<int32_t>(b, 0, 20240522); }, {"evaluation file"}},
      {"version", [](auto& b) { put<int32_t>(b, 4, 2); }, {"version 2", "version 1"}},
      {"llama version",
       [](auto& b) { put<int32_t>(b, 0, 20240801); },
       {"version 1 with the Llama 3"}},
      {"count 0", [](auto& b) { put<int32_t>(b, 8, 0); }, {"counts 0 tokens"}},
      {"negative count", [](auto& b) { put<int32_t>(b, 8, -5); }, {"counts -5 tokens"}},
      {"count above the file",
       [](auto& b) { put<int32_t>(b, 8, 65); },
       {"counts 65 tokens", "truncated"}},
      {"extra bytes", [](auto& b) { b.push_back(0); }, {"extra bytes at the end"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    TempDir tmp;
    const fs::path p = damaged(tmp, shard, k.edit);
    std::vector<std::string> parts = k.message;
    parts.push_back("llm.c shard " + p.string());
    const std::string message = error_of(
        [&] { TokenCorpus(std::vector<std::string>{p.string()}, {.format = TokenFormat::llmc}); });
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos)
          << "expected \"" << part << "\" in: " << message;
  }
  for (size_t keep : {size_t{0}, size_t{4}, size_t{1023}, size_t{1024}, size_t{1025},
                      good.size() - 2, good.size() - 1}) {
    SCOPED_TRACE("cut to " + std::to_string(keep));
    TempDir tmp;
    write_bytes(tmp / "s.bin", good.data(), keep);
    EXPECT_ERROR(TokenCorpus((tmp / "s.bin").string(), {.format = TokenFormat::llmc}),
                 (tmp / "s.bin").string(),
                 keep < 1024 ? "shorter than the 1024-byte header" : "truncated");
  }
  // One bad shard among good ones: the error names it.
  TempDir tmp;
  const std::vector<std::string> names = spec("llmc_gpt2")["shards"];
  write_bytes(tmp / "a.bin", read_bytes(names[0]));
  write_bytes(tmp / "b.bin", good.data(), good.size() - 2);
  EXPECT_ERROR(TokenCorpus((tmp / "*.bin").string()), "llm.c shard " + (tmp / "b.bin").string(),
               "truncated");
  // GPT-2 and Llama 3 shards in one corpus.
  write_bytes(tmp / "b.bin", read_bytes(spec("llmc_llama3")["shards"][0].get<std::string>()));
  EXPECT_ERROR(TokenCorpus((tmp / "*.bin").string()), "one corpus has one tokenizer");
}

TEST_F(TokenCorpusTest, BadRawFilesAndSourcesAreRefused) {
  TempDir tmp;
  write_bytes(tmp / "odd.bin", std::vector<uint8_t>{1, 2, 3});
  EXPECT_ERROR(TokenCorpus((tmp / "odd.bin").string(), {.token_bytes = 2}),
               "raw token file " + (tmp / "odd.bin").string(), "3 bytes, not a whole number");
  write_bytes(tmp / "empty.bin", std::vector<uint8_t>{});
  EXPECT_ERROR(TokenCorpus((tmp / "empty.bin").string(), {.token_bytes = 4}), "empty (0 bytes)");
  EXPECT_ERROR(TokenCorpus((tmp / "odd.bin").string(), {.token_bytes = 3}), "token width 3");
  // Not recognized without a width: the error says how to read raw ids.
  write_bytes(tmp / "ids.bin", std::vector<uint8_t>{1, 0, 2, 0, 3, 0});
  const std::string message = error_of([&] { TokenCorpus((tmp / "ids.bin").string()); });
  EXPECT_NE(message.find("not a Megatron dataset (no " + (tmp / "ids").string() + ".idx"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("not an llm.c shard"), std::string::npos) << message;
  try {
    TokenCorpus((tmp / "ids.bin").string());
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("--token-bytes 2"), std::string::npos) << e.hint();
  }
  EXPECT_ERROR(TokenCorpus((tmp / "empty.bin").string()), "shorter than 4 bytes");
  EXPECT_ERROR(TokenCorpus((tmp / "nothing_*.bin").string()), "no file matches the pattern");
  EXPECT_ERROR(TokenCorpus((tmp / "missing.bin").string(), {.token_bytes = 2}),
               (tmp / "missing.bin").string(), "No such file");
  EXPECT_ERROR(TokenCorpus(tmp.path().string(), {.token_bytes = 2}), "is a folder");
  EXPECT_ERROR(TokenCorpus(std::vector<std::string>{}), "no source given");
  EXPECT_ERROR(
      TokenCorpus(std::vector<std::string>{path("mega_u8").string(), path("mega_i16").string()}),
      "2 sources given with the Megatron dataset");
}

// A FIFO with no writer, as every kind of input: refused at once. Each open runs in a thread; a
// hang is ended after 20 s by opening the FIFO for writing, and fails the test.
TEST_F(TokenCorpusTest, FifosAreRefusedWithoutBlocking) {
  TempDir tmp;
  const fs::path fifo = tmp / "pipe.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ::mkfifo((tmp / "mega.idx").c_str(), 0644);
  fs::copy_file(path("mega_u8.idx"), tmp / "bin_fifo.idx");
  ::mkfifo((tmp / "bin_fifo.bin").c_str(), 0644);
  struct Case {
    std::string source;
    TokenCorpusOptions options;
    fs::path fifo;
  };
  const std::vector<Case> cases = {{fifo.string(), {.token_bytes = 2}, fifo},
                                   {fifo.string(), {}, fifo},
                                   {fifo.string(), {.format = TokenFormat::llmc}, fifo},
                                   {(tmp / "mega").string(), {}, tmp / "mega.idx"},
                                   {(tmp / "bin_fifo").string(), {}, tmp / "bin_fifo.bin"}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.source);
    auto done = std::async(std::launch::async,
                           [&] { return error_of([&] { TokenCorpus(k.source, k.options); }); });
    if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      ADD_FAILURE() << "opening a FIFO hangs";
      const int fd = ::open(k.fifo.c_str(), O_RDWR | O_NONBLOCK);
      done.wait();
      ::close(fd);
      continue;
    }
    const std::string message = done.get();
    EXPECT_NE(message.find("FIFO"), std::string::npos) << message;
    EXPECT_NE(message.find(k.fifo.string()), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace stoker::data
