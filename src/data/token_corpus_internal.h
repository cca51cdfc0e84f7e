// Private parts of TokenCorpus (include/stoker/data/token_corpus.h): the read-only file mapping,
// the document index each format provides, the format readers (one file each:
// token_corpus_megatron.cpp, token_corpus_llmc.cpp, token_corpus_raw.cpp) and the parallel token
// kernels (token_scan.cpp). token_corpus.cpp finds the format and holds the common interface.
//
// Thread-safety: MappedFile and the indexes are immutable after construction.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/data/token_corpus.h"

namespace stoker::data::detail {

// A whole regular file mapped read-only. Opening refuses FIFOs, sockets, devices and folders
// without blocking (core::check_input_file, core::open_input_file). An empty file maps nothing.
class MappedFile {
 public:
  explicit MappedFile(std::filesystem::path path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // A little-endian value at byte `offset` (no alignment needed); the caller checks the bounds.
  template <typename T>
  T load(uint64_t offset) const {
    T v;
    std::memcpy(&v, data_ + offset, sizeof(T));
    return v;
  }

 private:
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Documents and sequences of a corpus in global token positions (see TokenCorpus).
class DocumentIndex {
 public:
  virtual ~DocumentIndex() = default;
  virtual int64_t num_documents() const = 0;
  virtual int64_t document_begin(int64_t d) const = 0;  // d in [0, num_documents()]
  virtual int64_t num_sequences() const = 0;
  virtual int64_t sequence_begin(int64_t s) const = 0;  // s in [0, num_sequences()]
  virtual int64_t document_first_sequence(int64_t d) const = 0;
};

// Documents given by their first positions (plus the end): one sequence per document.
class OffsetDocumentIndex final : public DocumentIndex {
 public:
  explicit OffsetDocumentIndex(std::vector<int64_t> begins) : begins_(std::move(begins)) {}
  int64_t num_documents() const override { return static_cast<int64_t>(begins_.size()) - 1; }
  int64_t document_begin(int64_t d) const override { return begins_[static_cast<size_t>(d)]; }
  int64_t num_sequences() const override { return num_documents(); }
  int64_t sequence_begin(int64_t s) const override { return begins_[static_cast<size_t>(s)]; }
  int64_t document_first_sequence(int64_t d) const override { return d; }

 private:
  std::vector<int64_t> begins_;
};

// What a format reader opens: the mappings, the token files inside them and, for formats with an
// index, the documents. Delimited formats leave `documents` empty: TokenCorpus builds it from
// the delimiter on first use.
struct CorpusContent {
  TokenFormat format = TokenFormat::raw;
  TokenType type = TokenType::u16;
  std::string name;
  std::vector<MappedFile> maps;
  std::vector<TokenFile> files;
  std::unique_ptr<DocumentIndex> documents;
  int64_t delimiter = -1;
  bool delimiter_begins_document = true;  // llm.c: begins; raw: ends (and files end documents)
};

CorpusContent open_megatron(const std::filesystem::path& prefix);
CorpusContent open_llmc_shards(const std::vector<std::filesystem::path>& paths, int64_t delimiter);
CorpusContent open_raw_files(const std::vector<std::filesystem::path>& paths, int token_bytes,
                             int64_t delimiter);

// The llm.c shard header (dev/data/data_common.py, llmc/dataloader.h).
inline constexpr int32_t kLlmcMagicGpt2 = 20240520;    // version 1, uint16 ids
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;  // version 7, uint32 ids
inline constexpr int32_t kLlmcMagicEval = 20240522;    // multiple-choice evaluation files
inline constexpr uint64_t kLlmcHeaderBytes = 256 * 4;

// Calls f(T{}) with the C++ type of `type`.
template <typename F>
decltype(auto) visit_token_type(TokenType type, F&& f) {
  switch (type) {
    case TokenType::u8:
      return f(uint8_t{});
    case TokenType::i8:
      return f(int8_t{});
    case TokenType::u16:
      return f(uint16_t{});
    case TokenType::i16:
      return f(int16_t{});
    case TokenType::i32:
      return f(int32_t{});
    case TokenType::u32:
      return f(uint32_t{});
    case TokenType::i64:
      break;
  }
  return f(int64_t{});
}

// Parallel kernels over all tokens of `files` (token_scan.cpp).
struct IdRange {
  int64_t min_id = 0;
  int64_t max_id = 0;
  int64_t first_bad = -1;  // the first position outside [0, vocab_size) (vocab_size > 0)
};
IdRange scan_ids(const std::vector<TokenFile>& files, TokenType type, int64_t vocab_size);
// The first positions of the documents, plus the end: a document begins at position 0 and at
// each delimiter (begins) or after each delimiter and at each file's start (!begins).
std::vector<int64_t> delimited_documents(const std::vector<TokenFile>& files, TokenType type,
                                         int64_t delimiter, bool begins);

}  // namespace stoker::data::detail
