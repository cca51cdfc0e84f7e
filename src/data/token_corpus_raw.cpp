// Raw token files: little-endian uint16 or uint32 ids, no header (nanoGPT's prepare.py writes
// uint16 with its end-of-text token appended after each document). The width is not in the file:
// it is given (token_bytes). Each file ends a document; a delimiter, when given, ends documents
// inside files too.
#include "stoker/core/error.h"
#include "token_corpus_internal.h"

#include <fmt/format.h>

namespace stoker::data::detail {

namespace fs = std::filesystem;
using core::detail::throw_error;

CorpusContent open_raw_files(const std::vector<fs::path>& paths, int token_bytes,
                             int64_t delimiter) {
  if (token_bytes != 2 && token_bytes != 4)
    throw_error(
        __FILE__, __LINE__,
        fmt::format("raw token files: token width {} bytes; raw ids are uint16 (2) or uint32 (4)",
                    token_bytes),
        "give --token-bytes 2 or 4");
  CorpusContent c;
  c.format = TokenFormat::raw;
  c.type = token_bytes == 2 ? TokenType::u16 : TokenType::u32;
  c.maps.reserve(paths.size());
  int64_t first = 0;
  for (const fs::path& path : paths) {
    c.maps.emplace_back(path);
    const MappedFile& m = c.maps.back();
    if (m.size() == 0)
      throw_error(__FILE__, __LINE__,
                  fmt::format("raw token file {}: empty (0 bytes), no tokens", path.string()),
                  "give files that hold token ids");
    if (m.size() % uint64_t(token_bytes) != 0)
      throw_error(__FILE__, __LINE__,
                  fmt::format("raw token file {}: {} bytes, not a whole number of {}-byte ids "
                              "(truncated, or another width)",
                              path.string(), m.size(), token_bytes),
                  "give the width the file was written with (--token-bytes 2 for uint16, 4 "
                  "for uint32 ids), or copy the file again");
    TokenFile f;
    f.path = path;
    f.data = m.data();
    f.first = first;
    f.size = static_cast<int64_t>(m.size() / uint64_t(token_bytes));
    c.files.push_back(f);
    first += f.size;
  }
  c.delimiter = delimiter;
  c.delimiter_begins_document = false;
  c.name = paths.size() == 1 ? paths.front().string()
                             : fmt::format("{} files ({} .. {})", paths.size(),
                                           paths.front().string(), paths.back().string());
  return c;
}

}  // namespace stoker::data::detail
