// TokenCorpus (include/stoker/data/token_corpus.h): which format the sources are, glob
// expansion, and the format-independent interface over the readers' mapped files: positions to
// files, reads, documents, the id scan and positions for messages.
#include "stoker/data/token_corpus.h"

#include <glob.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <bit>
#include <chrono>
#include <mutex>
#include <optional>

#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "token_corpus_internal.h"

namespace stoker::data {

static_assert(std::endian::native == std::endian::little,
              "the token formats are little-endian and are mapped as they are");

namespace {

namespace fs = std::filesystem;
using core::detail::throw_error;

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The Megatron prefix `source` names (PREFIX, PREFIX.idx, or PREFIX.bin with a PREFIX.idx), or
// nothing.
std::optional<fs::path> megatron_prefix(const std::string& source) {
  if (ends_with(source, ".idx")) return fs::path(source.substr(0, source.size() - 4));
  if (ends_with(source, ".bin") && is_file(source.substr(0, source.size() - 4) + ".idx"))
    return fs::path(source.substr(0, source.size() - 4));
  if (!is_file(source) && is_file(source + ".idx")) return fs::path(source);
  return std::nullopt;
}

// A path, or the files a glob pattern matches, sorted by name (byte order, as Python's
// sorted(glob.glob(...)) in llm.c's train_gpt2.py and glob(3) in the C locale sort them).
std::vector<fs::path> expand(const std::string& source) {
  if (source.find_first_of("*?[") == std::string::npos || is_file(source))
    return {fs::path(source)};
  glob_t g{};
  const int rc = ::glob(source.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> names;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) names.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && names.empty()))
    throw_error(__FILE__, __LINE__,
                fmt::format("token corpus: no file matches the pattern {}", source),
                "check the pattern (quote it so that the shell does not expand it)");
  if (rc != 0)
    throw_error(__FILE__, __LINE__,
                fmt::format("token corpus: cannot expand the pattern {}", source),
                "check the pattern and the folder's permissions");
  std::sort(names.begin(), names.end());
  return {names.begin(), names.end()};
}

// The first 4 bytes of a file, read without blocking (a FIFO is refused by the checks).
std::optional<int32_t> first_word(const fs::path& path) {
  core::check_input_file(path, "token corpus");
  const int fd = core::open_input_file(path, "token corpus");
  int32_t w = 0;
  const ssize_t n = ::pread(fd, &w, sizeof(w), 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof(w))) return std::nullopt;
  return w;
}

// Last index i in [0, n) with begin(i) <= pos (begin non-decreasing, begin(0) <= pos).
template <typename F>
int64_t last_at_or_before(int64_t n, int64_t pos, F begin) {
  int64_t lo = 0, hi = n;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (begin(mid) <= pos)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace

struct TokenCorpus::Impl {
  detail::CorpusContent c;
  int64_t tokens = 0;
  mutable std::once_flag documents_once;
  mutable std::unique_ptr<detail::DocumentIndex> built;  // delimited formats' index
  mutable int64_t empty_documents = 0;

  const detail::DocumentIndex& documents() const {
    std::call_once(documents_once, [&] {
      if (!c.documents)
        built = std::make_unique<detail::OffsetDocumentIndex>(
            detail::delimited_documents(c.files, c.type, c.delimiter, c.delimiter_begins_document));
      const detail::DocumentIndex& index = c.documents ? *c.documents : *built;
      int64_t empty = 0;
      for (int64_t d = 0, n = index.num_documents(); d < n; ++d)
        empty += index.document_begin(d) == index.document_begin(d + 1);
      empty_documents = empty;
    });
    return c.documents ? *c.documents : *built;
  }

  size_t file_of(int64_t pos) const {
    const auto it = std::upper_bound(c.files.begin(), c.files.end(), pos,
                                     [](int64_t p, const TokenFile& f) { return p < f.first; });
    return static_cast<size_t>(it - c.files.begin()) - 1;
  }

  template <typename Out>
  void read(int64_t pos, int64_t count, Out* out) const {
    STOKER_CHECK(pos >= 0 && count >= 0 && pos <= tokens && count <= tokens - pos, "token corpus ",
                 c.name, ": positions [", pos, ", ", pos + count, ") are not inside its ", tokens,
                 " tokens");
    size_t f = count > 0 ? file_of(pos) : 0;
    while (count > 0) {
      const TokenFile& file = c.files[f];
      const int64_t off = pos - file.first;
      const int64_t n = std::min(count, file.size - off);
      detail::visit_token_type(c.type, [&](auto zero) {
        using T = decltype(zero);
        const T* p = reinterpret_cast<const T*>(file.data) + off;
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(p[i]);
        return 0;
      });
      out += n;
      pos += n;
      count -= n;
      ++f;
    }
  }
};

const char* token_format_name(TokenFormat format) {
  switch (format) {
    case TokenFormat::automatic:
      return "automatic";
    case TokenFormat::megatron:
      return "Megatron-LM indexed dataset";
    case TokenFormat::llmc:
      return "llm.c token shards";
    case TokenFormat::raw:
      return "raw token ids";
  }
  return "?";
}

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::u8:
      return "uint8";
    case TokenType::i8:
      return "int8";
    case TokenType::u16:
      return "uint16";
    case TokenType::i16:
      return "int16";
    case TokenType::i32:
      return "int32";
    case TokenType::u32:
      return "uint32";
    case TokenType::i64:
      return "int64";
  }
  return "?";
}

int token_type_bytes(TokenType type) {
  return detail::visit_token_type(type, [](auto zero) { return int(sizeof(zero)); });
}

std::string TokenPosition::describe() const {
  return fmt::format("{} token {} (byte {}), document {} token {}{}", file.string(), file_token,
                     file_byte, document, document_offset,
                     sequence >= 0 ? fmt::format(", sequence {}", sequence) : "");
}

TokenCorpus::TokenCorpus(const std::string& source, TokenCorpusOptions options)
    : TokenCorpus(std::vector<std::string>{source}, options) {}

TokenCorpus::TokenCorpus(const std::vector<std::string>& sources, TokenCorpusOptions options)
    : impl_(std::make_unique<Impl>()) {
  STOKER_CHECK_HINT(!sources.empty(), "name the token files", "token corpus: no source given");
  for (const std::string& s : sources)
    STOKER_CHECK_HINT(!s.empty(), "name the token files", "token corpus: an empty path");
  TokenFormat format = options.format;
  if (format == TokenFormat::automatic && options.token_bytes > 0) format = TokenFormat::raw;

  std::optional<fs::path> prefix;
  if (format == TokenFormat::automatic || format == TokenFormat::megatron) {
    prefix = megatron_prefix(sources.front());
    if (format == TokenFormat::megatron && !prefix) prefix = fs::path(sources.front());
    if (prefix) format = TokenFormat::megatron;
  }
  if (format == TokenFormat::megatron) {
    STOKER_CHECK_HINT(sources.size() == 1,
                      "give one Megatron prefix per corpus (several datasets form a mixture)",
                      "token corpus: ", sources.size(), " sources given with the Megatron dataset ",
                      prefix->string());
    impl_->c = detail::open_megatron(*prefix);
  } else {
    std::vector<fs::path> paths;
    for (const std::string& s : sources) {
      if (sources.size() > 1 && megatron_prefix(s))
        throw_error(__FILE__, __LINE__,
                    fmt::format("token corpus: {} is a Megatron dataset among other sources", s),
                    "give one Megatron prefix per corpus (several datasets form a mixture)");
      for (fs::path& p : expand(s)) paths.push_back(std::move(p));
    }
    if (format == TokenFormat::automatic) {
      const std::optional<int32_t> w = first_word(paths.front());
      if (w && (*w == detail::kLlmcMagicGpt2 || *w == detail::kLlmcMagicLlama3 ||
                *w == detail::kLlmcMagicEval)) {
        format = TokenFormat::llmc;
      } else {
        const std::string p = paths.front().string();
        throw_error(__FILE__, __LINE__,
                    fmt::format("token corpus {}: not a Megatron dataset (no {}.idx beside it) and "
                                "not an llm.c shard ({})",
                                p, ends_with(p, ".bin") ? p.substr(0, p.size() - 4) : p,
                                w ? fmt::format("it starts with {}, not the magic {} or {}", *w,
                                                detail::kLlmcMagicGpt2, detail::kLlmcMagicLlama3)
                                  : std::string("shorter than 4 bytes")),
                    "if it holds raw token ids, give their width: --token-bytes 2 (uint16) or 4 "
                    "(uint32)");
      }
    }
    if (format == TokenFormat::llmc)
      impl_->c = detail::open_llmc_shards(paths, options.delimiter);
    else
      impl_->c = detail::open_raw_files(paths, options.token_bytes, options.delimiter);
  }
  const detail::CorpusContent& c = impl_->c;
  for (const TokenFile& f : c.files) impl_->tokens += f.size;
  STOKER_CHECK_HINT(impl_->tokens > 0, "give a corpus that holds token ids", "token corpus ",
                    c.name, ": holds no tokens");
  if (c.delimiter >= 0) {
    const int64_t limit = c.type == TokenType::u16 ? 0xFFFF : 0xFFFFFFFFll;
    STOKER_CHECK_HINT(c.delimiter <= limit,
                      "give the end-of-text id of the corpus's tokenizer (--eot)", "token corpus ",
                      c.name, ": the document delimiter ", c.delimiter, " cannot be a ",
                      token_type_name(c.type), " id");
  }
}

TokenCorpus::~TokenCorpus() = default;
TokenCorpus::TokenCorpus(TokenCorpus&&) noexcept = default;
TokenCorpus& TokenCorpus::operator=(TokenCorpus&&) noexcept = default;

TokenFormat TokenCorpus::format() const { return impl_->c.format; }
TokenType TokenCorpus::token_type() const { return impl_->c.type; }
int64_t TokenCorpus::delimiter() const { return impl_->c.delimiter; }
int64_t TokenCorpus::num_tokens() const { return impl_->tokens; }
const std::vector<TokenFile>& TokenCorpus::files() const { return impl_->c.files; }
const std::string& TokenCorpus::name() const { return impl_->c.name; }

int64_t TokenCorpus::num_documents() const { return impl_->documents().num_documents(); }

int64_t TokenCorpus::document_begin(int64_t d) const {
  const detail::DocumentIndex& index = impl_->documents();
  STOKER_CHECK(d >= 0 && d <= index.num_documents(), "token corpus ", impl_->c.name, ": document ",
               d, " is not in [0, ", index.num_documents(), "]");
  return index.document_begin(d);
}

int64_t TokenCorpus::document_length(int64_t d) const {
  STOKER_CHECK(d >= 0 && d < num_documents(), "token corpus ", impl_->c.name, ": document ", d,
               " is not in [0, ", num_documents(), ")");
  return document_begin(d + 1) - document_begin(d);
}

int64_t TokenCorpus::document_of(int64_t pos) const {
  STOKER_CHECK(pos >= 0 && pos < impl_->tokens, "token corpus ", impl_->c.name, ": position ", pos,
               " is not in [0, ", impl_->tokens, ")");
  const detail::DocumentIndex& index = impl_->documents();
  return last_at_or_before(index.num_documents(), pos,
                           [&](int64_t d) { return index.document_begin(d); });
}

int64_t TokenCorpus::num_empty_documents() const {
  impl_->documents();
  return impl_->empty_documents;
}

int64_t TokenCorpus::num_sequences() const { return impl_->documents().num_sequences(); }

int64_t TokenCorpus::sequence_begin(int64_t s) const {
  const detail::DocumentIndex& index = impl_->documents();
  STOKER_CHECK(s >= 0 && s <= index.num_sequences(), "token corpus ", impl_->c.name, ": sequence ",
               s, " is not in [0, ", index.num_sequences(), "]");
  return index.sequence_begin(s);
}

int64_t TokenCorpus::document_first_sequence(int64_t d) const {
  const detail::DocumentIndex& index = impl_->documents();
  STOKER_CHECK(d >= 0 && d <= index.num_documents(), "token corpus ", impl_->c.name, ": document ",
               d, " is not in [0, ", index.num_documents(), "]");
  return index.document_first_sequence(d);
}

int64_t TokenCorpus::token(int64_t pos) const {
  int64_t v = 0;
  impl_->read(pos, 1, &v);
  return v;
}

void TokenCorpus::read(int64_t pos, int64_t count, int32_t* out) const {
  impl_->read(pos, count, out);
}
void TokenCorpus::read(int64_t pos, int64_t count, int64_t* out) const {
  impl_->read(pos, count, out);
}

TokenPosition TokenCorpus::locate(int64_t pos) const {
  STOKER_CHECK(pos >= 0 && pos < impl_->tokens, "token corpus ", impl_->c.name, ": position ", pos,
               " is not in [0, ", impl_->tokens, ")");
  const TokenFile& f = impl_->c.files[impl_->file_of(pos)];
  TokenPosition p;
  p.file = f.path;
  p.file_token = pos - f.first;
  p.file_byte = f.header_bytes + p.file_token * token_type_bytes(impl_->c.type);
  p.document = document_of(pos);
  p.document_offset = pos - document_begin(p.document);
  if (impl_->c.format == TokenFormat::megatron) {
    const detail::DocumentIndex& index = impl_->documents();
    p.sequence = last_at_or_before(index.num_sequences(), pos,
                                   [&](int64_t s) { return index.sequence_begin(s); });
  }
  return p;
}

TokenScanResult TokenCorpus::scan(int64_t vocab_size) const {
  const auto start = std::chrono::steady_clock::now();
  const detail::IdRange r = detail::scan_ids(impl_->c.files, impl_->c.type, vocab_size);
  if (r.first_bad >= 0) {
    const int64_t id = token(r.first_bad);
    throw_error(
        __FILE__, __LINE__,
        fmt::format("token corpus {}: token id {} at {}{}", impl_->c.name, id,
                    locate(r.first_bad).describe(),
                    id < 0 ? std::string(" is negative")
                           : fmt::format(" is not below the vocabulary size {}", vocab_size)),
        "give the vocabulary size of the tokenizer that wrote the corpus (--vocab), or "
        "tokenize it again with the model's tokenizer");
  }
  TokenScanResult out;
  out.tokens = impl_->tokens;
  out.min_id = r.min_id;
  out.max_id = r.max_id;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace stoker::data
