#include "data/text/text_input.h"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "stoker/core/error.h"
#include "stoker/core/output_path.h"

namespace stoker::data::detail {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadBuffer = size_t{1} << 20;

std::string lower_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

// The name of the compression whose magic `head` starts with, or "".
const char* compression_of(std::string_view head) {
  auto starts = [&](std::string_view magic) { return head.substr(0, magic.size()) == magic; };
  if (starts("\x1f\x8b")) return "gzip";
  if (starts("\x28\xb5\x2f\xfd")) return "zstd";
  if (starts("BZh")) return "bzip2";
  if (starts(std::string_view("\xfd"
                              "7zXZ\0",
                              6)))
    return "xz";
  if (starts("PK\x03\x04")) return "zip";
  return "";
}

std::string byte_hex(unsigned char c) {
  static const char* digits = "0123456789ABCDEF";
  return fmt::format("0x{}{}", digits[c >> 4], digits[c & 15]);
}

}  // namespace

TextFormat text_format_of(const fs::path& path, TextFormat requested) {
  if (requested != TextFormat::automatic) return requested;
  const std::string ext = lower_extension(path);
  return ext == ".jsonl" || ext == ".ndjson" || ext == ".json" ? TextFormat::jsonl
                                                               : TextFormat::text;
}

std::string check_utf8(std::string_view s, size_t* offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if (c == 0) {
        *offset = i;
        return "a NUL byte (a binary file?)";
      }
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      *offset = i;
      return fmt::format("invalid UTF-8: byte {} cannot begin a character", byte_hex(c));
    }
    if (i + len > n) {
      *offset = i;
      return fmt::format("invalid UTF-8: byte {} begins a character cut short", byte_hex(c));
    }
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) {
        *offset = i;
        return fmt::format("invalid UTF-8: byte {} followed by {}", byte_hex(c),
                           byte_hex(p[i + k]));
      }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      *offset = i;
      return "invalid UTF-8: an overlong or out-of-range character";
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      *offset = i;
      return "invalid UTF-8: an encoded surrogate (CESU-8?)";
    }
    i += len;
  }
  return {};
}

bool document_text(const TextRecord& record, TextFormat format, const std::string& text_key,
                   std::string& text, std::string& error, int64_t& error_line) {
  size_t offset = 0;
  error = check_utf8(record.raw, &offset);
  if (!error.empty()) {
    const auto before = std::string_view(record.raw).substr(0, offset);
    const size_t newline = before.rfind('\n');
    error_line = record.line + static_cast<int64_t>(std::count(before.begin(), before.end(), '\n'));
    const size_t column = newline == std::string_view::npos ? offset + 1 : offset - newline;
    error += fmt::format(" (column {})", column);
    return false;
  }
  error_line = record.line;
  if (format != TextFormat::jsonl) {
    text = record.raw;
    return true;
  }
  nlohmann::json json = nlohmann::json::parse(record.raw, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // Parsed again with exceptions for the parser's own words on where it goes wrong.
    try {
      const nlohmann::json again = nlohmann::json::parse(record.raw);
      (void)again;
      error = "not JSON";
    } catch (const nlohmann::json::parse_error& e) {
      const std::string what = e.what();
      const size_t colon = what.find("]: ");  // "[json.exception.parse_error.101] parse error..."
      error =
          fmt::format("not JSON: {}", colon == std::string::npos ? what : what.substr(colon + 3));
    }
    return false;
  }
  if (!json.is_object()) {
    error = fmt::format("not a JSON object but {}", json.type_name());
    return false;
  }
  const auto it = json.find(text_key);
  if (it == json.end()) {
    std::string keys;
    int shown = 0;
    for (const auto& item : json.items()) {
      if (shown++ == 8) {
        keys += ", ...";
        break;
      }
      keys += fmt::format("{}\"{}\"", keys.empty() ? "" : ", ", item.key());
    }
    error =
        fmt::format("has no \"{}\" field (its fields: {})", text_key, keys.empty() ? "none" : keys);
    return false;
  }
  if (!it->is_string()) {
    error = fmt::format("its \"{}\" field is {}, not a string", text_key, it->type_name());
    return false;
  }
  text = it->get<std::string>();
  return true;
}

TextReader::TextReader(std::vector<fs::path> inputs, Options options)
    : inputs_(std::move(inputs)), options_(options) {
  STOKER_CHECK_HINT(!inputs_.empty(), "name one or more text or JSON Lines files",
                    "stoker pack-text: no INPUT given");
  STOKER_CHECK(options_.max_document_bytes >= 1, "stoker pack-text: --max-document-bytes ",
               options_.max_document_bytes, " is not >= 1");
  for (const fs::path& input : inputs_) {
    core::check_input_file(input, "INPUT");
    const int fd = core::open_input_file(input, "INPUT");
    struct stat st {};
    ::fstat(fd, &st);
    char head[8] = {};
    const ssize_t got = ::pread(fd, head, sizeof head, 0);
    ::close(fd);
    STOKER_CHECK_HINT(got >= 0, "check the file", "stoker pack-text: cannot read ", input.string(),
                      ": ", std::strerror(errno));
    STOKER_CHECK_HINT(st.st_size > 0, "remove it from the inputs", "stoker pack-text: INPUT ",
                      input.string(), " is empty: it holds no document");
    const char* packed = compression_of(std::string_view(head, static_cast<size_t>(got)));
    STOKER_CHECK_HINT(*packed == 0,
                      fmt::format("decompress it first (e.g. `{} FILE`) and pass the plain file",
                                  packed == std::string_view("gzip") ? "gunzip -k" : "zstd -d"),
                      "stoker pack-text: INPUT ", input.string(), " is ", packed,
                      "-compressed, not text");
    formats_.push_back(text_format_of(input, options_.format));
    total_bytes_ += static_cast<uint64_t>(st.st_size);
  }
  buffer_.resize(kReadBuffer);
}

TextReader::~TextReader() {
  if (fd_ >= 0) ::close(fd_);
}

void TextReader::rewind() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  current_ = -1;
  bytes_read_ = 0;
}

bool TextReader::open_next() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (++current_ >= static_cast<int>(inputs_.size())) return false;
  fd_ = core::open_input_file(inputs_[static_cast<size_t>(current_)], "INPUT");
  line_ = 0;
  begin_ = end_ = 0;
  eof_ = false;
  return true;
}

bool TextReader::next_line(std::string& line) {
  line.clear();
  const fs::path& path = inputs_[static_cast<size_t>(current_)];
  for (;;) {
    const char* start = buffer_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    const size_t take =
        nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : end_ - begin_;
    if (line.size() + take > static_cast<size_t>(options_.max_document_bytes)) {
      core::detail::throw_error(
          __FILE__, __LINE__,
          fmt::format("stoker pack-text: {}:{}: a line longer than {} bytes (--max-document-bytes)",
                      path.string(), line_ + 1, options_.max_document_bytes),
          "split the text into shorter documents, or raise --max-document-bytes");
    }
    line.append(start, take);
    if (nl) {
      begin_ += take + 1;
      ++line_;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return true;
    }
    begin_ = end_ = 0;
    if (eof_) {
      if (line.empty()) return false;
      ++line_;  // a last line without "\n"
      if (line.back() == '\r') line.pop_back();
      return true;
    }
    ssize_t n;
    do {
      n = ::read(fd_, buffer_.data(), buffer_.size());
    } while (n < 0 && errno == EINTR);
    STOKER_CHECK_HINT(n >= 0, "check the file and the disk", "stoker pack-text: reading ",
                      path.string(), " failed: ", std::strerror(errno));
    end_ = static_cast<size_t>(n);
    bytes_read_ += static_cast<uint64_t>(n);
    eof_ = n == 0;
  }
}

bool TextReader::next(TextRecord& record) {
  std::string line;
  for (;;) {
    if (current_ < 0 || fd_ < 0) {
      if (!open_next()) return false;
    }
    const TextFormat format = formats_[static_cast<size_t>(current_)];
    record.input = current_;
    record.raw.clear();
    record.line = 0;
    const fs::path& path = inputs_[static_cast<size_t>(current_)];
    bool any = false;
    while (next_line(line)) {
      const bool blank = line.find_first_not_of(" \t\f\v") == std::string::npos;
      if (format == TextFormat::jsonl || options_.split == TextSplit::line) {
        if (format == TextFormat::jsonl && blank) continue;
        if (format == TextFormat::text && line.empty()) continue;
        record.line = line_;
        record.raw = std::move(line);
        return true;
      }
      if (options_.split == TextSplit::paragraph && blank) {
        if (any) return true;
        continue;
      }
      if (!any) record.line = line_;
      if (any) record.raw += '\n';
      if (record.raw.size() + line.size() > static_cast<size_t>(options_.max_document_bytes)) {
        core::detail::throw_error(
            __FILE__, __LINE__,
            fmt::format(
                "stoker pack-text: {}:{}: a document longer than {} bytes (--max-document-bytes)",
                path.string(), record.line, options_.max_document_bytes),
            options_.split == TextSplit::file
                ? "split the file into documents (--split paragraph or line), or raise "
                  "--max-document-bytes"
                : "split the text into shorter documents, or raise --max-document-bytes");
      }
      record.raw += line;
      any = true;
    }
    ::close(fd_);
    fd_ = -1;
    if (any) return true;
  }
}

}  // namespace stoker::data::detail
