#include "info_tokens.h"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "data/token_corpus_internal.h"
#include "stoker/core/allocator.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/data/token_corpus.h"
#include "util/checksum.h"

namespace stoker::cli {

namespace fs = std::filesystem;
using data::TokenCorpus;
using data::TokenFormat;

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

int megatron_code(data::TokenType t) {
  switch (t) {
    case data::TokenType::u8:
      return 1;
    case data::TokenType::i8:
      return 2;
    case data::TokenType::i16:
      return 3;
    case data::TokenType::i32:
      return 4;
    case data::TokenType::i64:
      return 5;
    case data::TokenType::u16:
      return 8;
    default:
      return 0;
  }
}

// `stoker pack-text` leaves PREFIX.manifest.json beside the dataset (docs/formats.md): --verify
// recomputes the size and XXH3-64 of every file it lists. Returns the number of bad files (each
// named on stderr), or -1 when there is no manifest.
int verify_manifest(const fs::path& manifest) {
  std::error_code ec;
  if (!fs::exists(manifest, ec)) return -1;
  nlohmann::json m;
  try {
    core::check_input_file(manifest, "the manifest");
    std::ifstream in(manifest);
    m = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "stoker info: %s is not valid JSON (%s)\n", manifest.c_str(), e.what());
    return 1;
  }
  if (!m.is_object() || !m.contains("files") || !m["files"].is_object()) {
    std::fprintf(stderr, "stoker info: %s lists no files\n", manifest.c_str());
    return 1;
  }
  int bad = 0;
  for (const auto& [name, entry] : m["files"].items()) {
    const fs::path file = manifest.parent_path() / name;
    if (!entry.is_object() || !entry.contains("xxh3_64") || !entry["xxh3_64"].is_string() ||
        !entry.contains("bytes") || !entry["bytes"].is_number_unsigned()) {
      std::fprintf(stderr, "  %s: its manifest entry has no bytes or xxh3_64\n", file.c_str());
      ++bad;
      continue;
    }
    if (!fs::exists(file, ec)) {
      std::fprintf(stderr, "  %s: missing\n", file.c_str());
      ++bad;
      continue;
    }
    const data::detail::MappedFile mapped(file);  // refuses a FIFO without blocking
    const uint64_t bytes = mapped.size();
    const std::string sum = util::checksum_hex(util::checksum64(mapped.data(), bytes));
    const uint64_t want_bytes = entry["bytes"].get<uint64_t>();
    const std::string want = entry["xxh3_64"].get<std::string>();
    if (bytes != want_bytes || sum != want) {
      std::fprintf(stderr, "  %s: %llu bytes, xxh3_64 %s; the manifest says %llu bytes, %s\n",
                   file.c_str(), static_cast<unsigned long long>(bytes), sum.c_str(),
                   static_cast<unsigned long long>(want_bytes), want.c_str());
      ++bad;
    }
  }
  return bad;
}

std::string bytes_text(uint64_t b) {
  return fmt::format("{} bytes ({})", b, core::format_bytes(b));
}

// What the format's header says about the ids, for the first line.
std::string format_line(const TokenCorpus& c) {
  const std::string type = data::token_type_name(c.token_type());
  switch (c.format()) {
    case TokenFormat::megatron:
      return fmt::format("Megatron-LM indexed dataset (MMIDIDX version 1), {} ids (dtype code {})",
                         type, megatron_code(c.token_type()));
    case TokenFormat::llmc:
      return c.token_type() == data::TokenType::u16
                 ? "llm.c token shards (magic 20240520, version 1: GPT-2), uint16 ids"
                 : "llm.c token shards (magic 20240801, version 7: Llama 3), uint32 ids";
    default:
      return fmt::format("raw token ids, {}", type);
  }
}

}  // namespace

void add_info_token_options(CLI::App* info, InfoTokenOptions& o) {
  info->add_option("--token-bytes", o.token_bytes,
                   "token files: read FILE as raw ids of this width (2: uint16, 4: uint32)")
      ->check(CLI::IsMember({2, 4}));
  info->add_option("--vocab", o.vocab,
                   "token files: check that every id is below this vocabulary size")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  info->add_option("--eot", o.eot,
                   "token files: the end-of-text id that separates documents (llm.c shards: "
                   "begins each, default 50256 for GPT-2 and 128000 for Llama 3; raw files: ends "
                   "each, default none: one document per file)")
      ->check(CLI::Range(int64_t{0}, int64_t{0xFFFFFFFF}));
}

bool is_token_corpus(const std::string& path, const InfoTokenOptions& o) {
  if (o.token_bytes > 0) return true;
  if (path.find_first_of("*?[") != std::string::npos && !exists(path)) return true;
  if (ends_with(path, ".idx")) return true;
  if (ends_with(path, ".bin") && exists(path.substr(0, path.size() - 4) + ".idx")) return true;
  if (!exists(path) && exists(path + ".idx")) return true;
  // Any other regular file (a folder is a database; safetensors files were dispatched before):
  // an llm.c shard, or raw ids whose error asks for --token-bytes.
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && !ends_with(path, ".mdb");
}

int run_info_tokens(const std::string& path, bool verify, const InfoTokenOptions& o) {
  data::TokenCorpusOptions options;
  options.token_bytes = o.token_bytes;
  options.delimiter = o.eot;
  const TokenCorpus c(path, options);  // validates headers, sizes, pointers and indexes

  std::printf("%s: %s\n", c.name().c_str(), format_line(c).c_str());
  if (c.format() == TokenFormat::megatron) {
    const fs::path bin = c.files().front().path;
    const fs::path idx = fs::path(c.name() + ".idx");
    std::printf("  files: %s %s, %s %s\n", idx.c_str(), bytes_text(fs::file_size(idx)).c_str(),
                bin.c_str(), bytes_text(fs::file_size(bin)).c_str());
  } else {
    uint64_t bytes = 0;
    for (const data::TokenFile& f : c.files()) bytes += fs::file_size(f.path);
    std::printf("  files: %zu, %s\n", c.files().size(), bytes_text(bytes).c_str());
  }
  std::printf("  tokens: %lld\n", static_cast<long long>(c.num_tokens()));

  const int64_t docs = c.num_documents();
  std::string split;
  if (c.format() == TokenFormat::megatron)
    split = "from the index";
  else if (c.delimiter() < 0)
    split = "one per file";
  else
    split = fmt::format(
        "{}{}{}", c.format() == TokenFormat::llmc ? "each begins with id " : "each ends with id ",
        c.delimiter(), c.format() == TokenFormat::raw ? ", and at each file's end" : "");
  std::printf("  documents: %lld (%s), %lld empty\n", static_cast<long long>(docs), split.c_str(),
              static_cast<long long>(c.num_empty_documents()));
  if (c.format() == TokenFormat::megatron)
    std::printf("  sequences: %lld\n", static_cast<long long>(c.num_sequences()));
  std::vector<int64_t> lengths(static_cast<size_t>(docs));
  for (int64_t d = 0; d < docs; ++d) lengths[size_t(d)] = c.document_length(d);
  if (!lengths.empty()) {
    const auto [mn, mx] = std::minmax_element(lengths.begin(), lengths.end());
    const int64_t lo = *mn, hi = *mx;
    std::nth_element(lengths.begin(), lengths.begin() + lengths.size() / 2, lengths.end());
    std::printf("  document length: min %lld, median %lld, max %lld tokens\n",
                static_cast<long long>(lo), static_cast<long long>(lengths[lengths.size() / 2]),
                static_cast<long long>(hi));
  }

  const data::TokenScanResult scan = c.scan(o.vocab);  // throws at the first bad id
  std::printf("  ids: largest %lld, smallest %lld%s\n", static_cast<long long>(scan.max_id),
              static_cast<long long>(scan.min_id),
              o.vocab > 0 ? fmt::format(", all below --vocab {}", o.vocab).c_str() : "");
  if (verify) {
    std::printf("verified: %s; every id read (%lld tokens in %.3f s, %.2f GB/s)%s\n",
                c.format() == TokenFormat::megatron
                    ? "header, sizes, sequence lengths and pointers inside the .bin, document "
                      "indices"
                : c.format() == TokenFormat::llmc ? "headers (magic, version), token counts "
                                                    "against the file sizes"
                                                  : "file sizes against the token width",
                static_cast<long long>(scan.tokens), scan.seconds,
                scan.seconds > 0 ? double(scan.tokens) * data::token_type_bytes(c.token_type()) /
                                       scan.seconds / 1e9
                                 : 0.0,
                o.vocab > 0 ? fmt::format(", all below --vocab {}", o.vocab).c_str()
                            : " (give --vocab N to check them against the vocabulary)");
    const fs::path manifest =
        c.format() == TokenFormat::megatron ? fs::path(c.name() + ".manifest.json") : fs::path();
    const int bad = manifest.empty() ? -1 : verify_manifest(manifest);
    if (bad < 0) {
      std::printf("checksums: none: %s\n",
                  c.format() == TokenFormat::megatron
                      ? "Megatron's indexed dataset has no checksums (and no stoker pack-text "
                        "manifest is beside it)"
                  : c.format() == TokenFormat::llmc ? "llm.c's shards have no checksums"
                                                    : "raw token files have no checksums");
    } else if (bad == 0) {
      std::printf("checksums: every file of %s matches its size and XXH3-64\n", manifest.c_str());
    } else {
      std::fprintf(stderr,
                   "stoker info: %d file%s of %s do not match the manifest: the dataset is "
                   "damaged or was changed after `stoker pack-text` wrote it\n"
                   "  hint: copy it again or run stoker pack-text again\n",
                   bad, bad == 1 ? "" : "s", manifest.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace stoker::cli
