// llm.c's token shards (dev/data/data_common.py write_datafile, llmc/dataloader.h): a header of
// 256 little-endian int32 (header[0] magic, header[1] version, header[2] the token count, the
// rest 0), then the ids: magic 20240520 / version 1 with uint16 ids (GPT-2), magic 20240801 /
// version 7 with uint32 ids (Llama 3). The file is exactly 1024 + count x width bytes (llm.c's
// dataloader refuses any other size, and a count of 0). The writers (dev/data/fineweb.py...) put
// the end-of-text token before each document (GPT-2's <|endoftext|> 50256; for Llama 3
// tokenizer.encode('')[0], the <|begin_of_text|> 128000) and cut shards at a fixed token count,
// so a document may continue in the next shard: the shards form one stream.
#include "stoker/core/error.h"
#include "token_corpus_internal.h"

#include <fmt/format.h>

namespace stoker::data::detail {

namespace {

namespace fs = std::filesystem;
using core::detail::throw_error;

constexpr const char* kShardHint =
    "give shards written by llm.c's dev/data scripts (write_datafile), or tokenize the data "
    "again";

}  // namespace

CorpusContent open_llmc_shards(const std::vector<fs::path>& paths, int64_t delimiter) {
  CorpusContent c;
  c.format = TokenFormat::llmc;
  c.maps.reserve(paths.size());
  int32_t first_magic = 0;
  int64_t first = 0;
  for (const fs::path& path : paths) {
    c.maps.emplace_back(path);
    const MappedFile& m = c.maps.back();
    const std::string P = path.string();
    if (m.size() < kLlmcHeaderBytes)
      throw_error(__FILE__, __LINE__,
                  fmt::format("llm.c shard {}: {}, shorter than the 1024-byte header (256 int32) "
                              "of a shard (truncated?)",
                              P,
                              m.size() == 0 ? std::string("empty (0 bytes)")
                                            : fmt::format("only {} bytes", m.size())),
                  kShardHint);
    const int32_t magic = m.load<int32_t>(0);
    const int32_t version = m.load<int32_t>(4);
    const int32_t count = m.load<int32_t>(8);
    TokenType type;
    if (magic == kLlmcMagicGpt2) {
      type = TokenType::u16;
      if (version != 1)
        throw_error(__FILE__, __LINE__,
                    fmt::format("llm.c shard {}: version {} with the GPT-2 magic {}; llm.c writes "
                                "version 1 (uint16 ids) with it",
                                P, version, magic),
                    kShardHint);
    } else if (magic == kLlmcMagicLlama3) {
      type = TokenType::u32;
      if (version != 7)
        throw_error(__FILE__, __LINE__,
                    fmt::format("llm.c shard {}: version {} with the Llama 3 magic {}; llm.c "
                                "writes version 7 (uint32 ids) with it",
                                P, version, magic),
                    kShardHint);
    } else if (magic == kLlmcMagicEval) {
      throw_error(__FILE__, __LINE__,
                  fmt::format("llm.c shard {}: magic {} is llm.c's multiple-choice evaluation file "
                              "(HellaSwag, MMLU), not a token shard",
                              P, magic),
                  "give the token shards (fineweb_train_*.bin), not the evaluation file");
    } else {
      throw_error(
          __FILE__, __LINE__,
          fmt::format(
              "llm.c shard {}: bad magic {} (shards start with {} for GPT-2 or {} for Llama 3)", P,
              magic, kLlmcMagicGpt2, kLlmcMagicLlama3),
          kShardHint);
    }
    if (c.maps.size() == 1) {
      first_magic = magic;
      c.type = type;
    } else if (magic != first_magic) {
      throw_error(__FILE__, __LINE__,
                  fmt::format("llm.c shards: {} has magic {} ({} ids), {} has {} ({} ids): one "
                              "corpus has one tokenizer",
                              P, magic, token_type_name(type), paths.front().string(), first_magic,
                              token_type_name(c.type)),
                  "give the shards of one tokenizer (GPT-2 or Llama 3) together");
    }
    const uint64_t width = uint64_t(token_type_bytes(type));
    const uint64_t body = m.size() - kLlmcHeaderBytes;
    if (count <= 0)
      throw_error(
          __FILE__, __LINE__,
          fmt::format(
              "llm.c shard {}: its header counts {} tokens (llm.c's shards hold at least one)", P,
              count),
          kShardHint);
    if (body != uint64_t(count) * width)
      throw_error(
          __FILE__, __LINE__,
          fmt::format("llm.c shard {}: its header counts {} tokens ({} bytes of {}), but the file "
                      "has {} bytes after the header ({})",
                      P, count, uint64_t(count) * width, token_type_name(type), body,
                      body < uint64_t(count) * width ? "truncated" : "extra bytes at the end"),
          kShardHint);
    TokenFile f;
    f.path = path;
    f.data = m.data() + kLlmcHeaderBytes;
    f.first = first;
    f.size = count;
    f.header_bytes = static_cast<int64_t>(kLlmcHeaderBytes);
    c.files.push_back(f);
    first += count;
  }
  c.delimiter = delimiter >= 0 ? delimiter : (c.type == TokenType::u16 ? 50256 : 128000);
  c.delimiter_begins_document = true;
  c.name = paths.size() == 1 ? paths.front().string()
                             : fmt::format("{} shards ({} .. {})", paths.size(),
                                           paths.front().string(), paths.back().string());
  return c;
}

}  // namespace stoker::data::detail
