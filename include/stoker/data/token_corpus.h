// TokenCorpus: a tokenized corpus as the ecosystem writes it (Megatron-LM's .idx/.bin, llm.c's
// token shards, raw uint16/uint32 ids), memory-mapped read-only and zero-copy: documents of ids
// addressed by global token position. Opening validates every header, size and index; scan()
// checks every id against a vocabulary size in parallel.
// Ownership: owns its mappings; pointers into them live as long as the corpus.
// Thread-safety: every const method is thread-safe.
// Details: docs/formats.md#token-corpora.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace stoker::data {

enum class TokenFormat { automatic, megatron, llmc, raw };
// How ids are stored on disk (little-endian). Megatron may store any integer type; llm.c and raw
// files uint16 or uint32.
enum class TokenType { u8, i8, u16, i16, i32, u32, i64 };

const char* token_format_name(TokenFormat format);  // "Megatron indexed dataset", ...
const char* token_type_name(TokenType type);        // "uint16", ...
int token_type_bytes(TokenType type);

struct TokenCorpusOptions {
  // automatic: a `.idx`, or a `.bin`/prefix with a `.idx` beside it, is Megatron; files starting
  // with an llm.c magic are shards; token_bytes > 0 makes the files raw.
  TokenFormat format = TokenFormat::automatic;
  int token_bytes = 0;  // raw files: 2 (uint16) or 4 (uint32)
  // llm.c shards: the token that begins each document (-1: 50256 for GPT-2 shards, 128000 for
  // Llama 3 shards). Raw files: the token that ends each document (-1: none, one document per
  // file). Megatron: unused (documents come from the index).
  int64_t delimiter = -1;
};

// One mapped file of token ids: its tokens are the corpus's positions [first, first + size).
struct TokenFile {
  std::filesystem::path path;
  const uint8_t* data = nullptr;  // its first token, inside the mapping (nullptr when size is 0)
  int64_t first = 0;
  int64_t size = 0;          // tokens
  int64_t header_bytes = 0;  // byte offset of its first token in the file
};

// Where a global position lies, for messages: "PATH token T (byte B), document D token K".
struct TokenPosition {
  std::filesystem::path file;
  int64_t file_token = 0;
  int64_t file_byte = 0;
  int64_t document = 0;
  int64_t document_offset = 0;
  int64_t sequence = -1;  // Megatron only
  std::string describe() const;
};

struct TokenScanResult {
  int64_t tokens = 0;
  int64_t min_id = 0;  // signed: a negative id of a signed Megatron dtype shows here
  int64_t max_id = 0;
  double seconds = 0;  // wall time of the scan
};

class TokenCorpus {
 public:
  // `sources`: one Megatron prefix (PREFIX, PREFIX.idx or PREFIX.bin), or llm.c shards / raw
  // files, each a path or a glob pattern ("data/fineweb_train_*.bin"). Throws stoker::Error
  // naming the file and the problem.
  explicit TokenCorpus(const std::vector<std::string>& sources, TokenCorpusOptions options = {});
  explicit TokenCorpus(const std::string& source, TokenCorpusOptions options = {});
  ~TokenCorpus();
  TokenCorpus(TokenCorpus&&) noexcept;
  TokenCorpus& operator=(TokenCorpus&&) noexcept;

  TokenFormat format() const;
  TokenType token_type() const;
  // The ids' delimiter in use (llm.c: begins a document; raw: ends one); -1 when none.
  int64_t delimiter() const;
  int64_t num_tokens() const;
  const std::vector<TokenFile>& files() const;
  // A short name for messages: the prefix, the one file, or "N shards (first .. last)".
  const std::string& name() const;

  // Documents: document d is the positions [document_begin(d), document_begin(d + 1)),
  // d in [0, num_documents()); document_begin(num_documents()) == num_tokens(). Delimited
  // formats build this index on first use (a parallel scan of every token).
  int64_t num_documents() const;
  int64_t document_begin(int64_t d) const;
  int64_t document_length(int64_t d) const;
  int64_t document_of(int64_t pos) const;  // the (non-empty) document holding `pos`
  int64_t num_empty_documents() const;
  // Megatron's sequences (a document is sequences [document_first_sequence(d),
  // document_first_sequence(d + 1))); the other formats have one sequence per document.
  int64_t num_sequences() const;
  int64_t sequence_begin(int64_t s) const;  // s in [0, num_sequences()]
  int64_t document_first_sequence(int64_t d) const;

  // Token ids (copied, widened) of positions [pos, pos + count), across file boundaries.
  int64_t token(int64_t pos) const;
  void read(int64_t pos, int64_t count, int32_t* out) const;
  void read(int64_t pos, int64_t count, int64_t* out) const;

  // Reads every id in parallel: the smallest and largest. With vocab_size > 0, an id outside
  // [0, vocab_size) throws naming the first one's position (locate()).
  TokenScanResult scan(int64_t vocab_size = 0) const;
  TokenPosition locate(int64_t pos) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::data
