// Private (`stoker pack-text`): the documents of text and JSON Lines files, read in input order
// with the line each begins on, so that every error names FILE:LINE.
//
// Text files: a document is a paragraph (lines up to a blank line; the default), a line, or
// the whole file (TextSplit). Its text is its lines joined with "\n" (a "\r" before a line's
// "\n" is dropped: CRLF files read as LF). JSON Lines: each line is one JSON object whose
// string field `text_key` is the document; blank lines are ignored. Records are handed out raw
// (a JSON line is parsed by document_text(), which worker threads call) so that parsing and
// validation run in parallel.
//
// Inputs are opened with core::open_input_file (a FIFO, device or folder is refused without
// blocking), their first bytes checked (compressed files and empty files refused), and read
// through a fixed buffer: memory is bounded by the longest document (max_document_bytes).
// Thread-safety: a TextReader belongs to one thread; document_text() and check_utf8() are
// thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::data::detail {

enum class TextFormat { automatic, text, jsonl };
enum class TextSplit { paragraph, line, file };

// automatic: ".jsonl", ".ndjson" and ".json" files are JSON Lines, the rest text.
TextFormat text_format_of(const std::filesystem::path& path, TextFormat requested);

// One document before validation: the input it comes from, its first line (1-based) and its
// raw bytes (a text document, or one JSON line).
struct TextRecord {
  int input = 0;
  int64_t line = 0;
  std::string raw;
};

// Empty when `text` is valid UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF) without NUL bytes; else why, and `*offset` the byte where it goes wrong.
std::string check_utf8(std::string_view text, size_t* offset);

// The document of `record`: for text, its raw bytes; for JSON Lines, the `text_key` string of
// the parsed line. Returns false and sets `error` ("invalid UTF-8 ...", "not JSON ...", "has no
// \"text\" field ...") and `error_line` (the line where it goes wrong) otherwise.
bool document_text(const TextRecord& record, TextFormat format, const std::string& text_key,
                   std::string& text, std::string& error, int64_t& error_line);

class TextReader {
 public:
  struct Options {
    TextFormat format = TextFormat::automatic;
    TextSplit split = TextSplit::paragraph;
    int64_t max_document_bytes = int64_t{64} << 20;
  };

  // Checks every input (regular file, not empty, not compressed) before anything is read.
  TextReader(std::vector<std::filesystem::path> inputs, Options options);
  ~TextReader();
  TextReader(const TextReader&) = delete;
  TextReader& operator=(const TextReader&) = delete;

  const std::vector<std::filesystem::path>& inputs() const { return inputs_; }
  TextFormat format_of(int input) const { return formats_[static_cast<size_t>(input)]; }
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t bytes_read() const { return bytes_read_; }

  // The next document into `record`; false at the end of the last input. Throws stoker::Error
  // naming FILE:LINE when a document is longer than max_document_bytes, or on a read error.
  bool next(TextRecord& record);
  // Starts again at the first input (a second pass after training the tokenizer).
  void rewind();

 private:
  bool next_line(std::string& line);  // false at the end of the current input
  bool open_next();

  std::vector<std::filesystem::path> inputs_;
  std::vector<TextFormat> formats_;
  Options options_;
  uint64_t total_bytes_ = 0, bytes_read_ = 0;
  int current_ = -1;
  int fd_ = -1;
  int64_t line_ = 0;  // lines read from the current input
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
};

}  // namespace stoker::data::detail
