// The token trainers' corpora (token_data.h): which arguments are corpora, --mix parsing, and the
// sources cut into sequences.
#include "token_data.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/text/pack_text.h"
#include "stoker/core/output_path.h"
#include "stoker/data/pack.h"
#include "util/checksum.h"

namespace stoker::program {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool regular(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The first int32 of an llm.c shard (GPT-2 and Llama 3 headers).
bool starts_like_llmc(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  int32_t magic = 0;
  if (!f.read(reinterpret_cast<char*>(&magic), sizeof magic)) return false;
  return magic == 20240520 || magic == 20240801;
}

}  // namespace

TokenSource resolve_token_source(const std::string& flag, const std::string& arg) {
  TokenSource s{arg, arg};
  std::error_code ec;
  if (fs::is_directory(arg, ec)) {  // a `stoker pack-text` output: one PREFIX.idx inside
    std::vector<fs::path> idx;
    for (const auto& e : fs::directory_iterator(arg, ec))
      if (e.path().extension() == ".idx") idx.push_back(e.path());
    if (idx.empty()) return s;  // not a corpus: refused as a folder by the input checks
    STOKER_CHECK_HINT(
        idx.size() == 1,
        fmt::format("give {} a Megatron prefix, .idx or a folder with one .idx", flag), flag, " ",
        arg, ": a folder with ", idx.size(),
        " Megatron indexes (.idx), not one: which one is the corpus?");
    s.path = idx.front().string();
    return s;
  }
  if (arg.find_first_of("*?[") != std::string::npos && !fs::exists(arg, ec)) {
    s.glob = true;
    return s;
  }
  if (ends_with(arg, ".idx")) return s;
  if (ends_with(arg, ".bin") && regular(arg.substr(0, arg.size() - 4) + ".idx")) {
    s.path = arg.substr(0, arg.size() - 4) + ".idx";
    return s;
  }
  if (!fs::exists(arg, ec) && regular(arg + ".idx")) {
    s.path = arg + ".idx";
    return s;
  }
  s.raw = regular(arg) && !starts_like_llmc(arg);
  return s;
}

std::vector<std::pair<std::string, double>> parse_mix(const std::string& mix) {
  std::vector<std::pair<std::string, double>> out;
  size_t at = 0;
  while (at <= mix.size()) {
    const size_t comma = std::min(mix.find(',', at), mix.size());
    const std::string entry = mix.substr(at, comma - at);
    const size_t colon = entry.rfind(':');
    STOKER_CHECK_HINT(colon != std::string::npos && colon > 0 && colon + 1 < entry.size(),
                      "write --mix \"a.idx:0.7,b:0.3\" (SOURCE:WEIGHT, comma-separated)",
                      "--mix: entry \"", entry, "\" is not SOURCE:WEIGHT");
    const std::string number = entry.substr(colon + 1);
    char* end = nullptr;
    const double w = std::strtod(number.c_str(), &end);
    STOKER_CHECK_HINT(end != number.c_str() && *end == '\0' && std::isfinite(w) && w > 0,
                      "give every source a positive weight, e.g. --mix \"a.idx:0.7,b:0.3\"",
                      "--mix: the weight \"", number, "\" of ", entry.substr(0, colon),
                      " is not a positive number");
    out.emplace_back(entry.substr(0, colon), w);
    at = comma + 1;
  }
  return out;
}

std::unique_ptr<CorpusData> open_corpus_data(
    const std::string& flag, const std::vector<std::pair<std::string, double>>& sources,
    const CorpusDataOptions& options) {
  auto out = std::make_unique<CorpusData>();
  std::vector<data::SequenceSource> mix;
  for (const auto& [arg, weight] : sources) {
    const TokenSource src = resolve_token_source(flag, arg);
    data::TokenCorpusOptions copts;
    if (src.raw) copts.token_bytes = 2;  // as --data's raw files: uint16 ids
    try {
      out->corpora.push_back(std::make_unique<data::TokenCorpus>(src.path, copts));
    } catch (const Error& e) {
      STOKER_CHECK_HINT(false, e.hint().empty() ? fmt::format("check {}", flag) : e.hint(), flag,
                        " ", arg, ": ", e.message());
    }
    const data::TokenCorpus& corpus = *out->corpora.back();
    const data::TokenSequencesOptions sopts{.context = options.context,
                                            .vocab_size = options.vocab};
    if (options.val_split > 0 || options.val_tail > 0) {
      STOKER_CHECK_HINT(sources.size() == 1, "split one --data corpus, or give --val",
                        "--val-split: a mixture has no single corpus to split");
      const bool fraction = options.val_split < 1;
      STOKER_CHECK_HINT(fraction || options.val_split == std::floor(options.val_split),
                        "give a fraction below 1 or a whole number of documents", "--val-split ",
                        options.val_split,
                        " is neither a fraction below 1 nor a "
                        "whole number of documents");
      std::vector<int64_t> val;
      if (options.val_tail > 0) {
        const auto want = static_cast<int64_t>(std::ceil(options.val_tail * corpus.num_tokens()));
        int64_t d = corpus.num_documents(), got = 0;
        while (d > 1 && got < want) got += corpus.document_length(--d);
        for (; d < corpus.num_documents(); ++d) val.push_back(d);
      } else {
        val = data::split_documents(
            corpus, {.fraction = fraction ? options.val_split : 0,
                     .count = fraction ? 0 : static_cast<int64_t>(options.val_split),
                     .seed = options.batches.seed});
      }
      out->sequences.push_back(
          std::make_unique<data::TokenSequences>(corpus, sopts, val, "validation split"));
      const data::TokenSequences& val_seq = *out->sequences.back();
      data::SequenceBatchesOptions vopts = options.batches;
      vopts.shuffle = false;
      vopts.rank = 0;
      vopts.world_size = 1;
      out->validation = std::make_unique<data::SequenceBatches>(
          std::vector<data::SequenceSource>{{&val_seq, 1, val_seq.name()}}, vopts);
      out->summary +=
          fmt::format("  validation split of {}: {}{} documents, {} tokens, {} sequences\n", arg,
                      options.val_tail > 0 ? "the last " : "", val.size(), val_seq.num_tokens(),
                      val_seq.size());
      out->sequences.push_back(std::make_unique<data::TokenSequences>(
          corpus, sopts, data::other_documents(corpus, val), "train split"));
    } else {
      out->sequences.push_back(std::make_unique<data::TokenSequences>(corpus, sopts));
    }
    const data::TokenSequences& seq = *out->sequences.back();
    mix.push_back({&seq, weight, arg});
    out->summary +=
        fmt::format("  {}: {}, {} tokens in {} documents, {} sequences of {}{}\n", arg,
                    data::token_format_name(corpus.format()), corpus.num_tokens(),
                    corpus.num_documents(), seq.size(), options.context + 1,
                    sources.size() > 1 ? fmt::format(", weight {:g}", weight) : std::string());
  }
  out->batches = std::make_unique<data::SequenceBatches>(std::move(mix), options.batches);
  return out;
}

fs::path text_corpus_folder(const fs::path& text, const fs::path& cache, int64_t vocab) {
  core::check_input_file(text, "--text");  // a FIFO is refused, not read (it could block)
  std::ifstream in(text, std::ios::binary);
  STOKER_CHECK_HINT(in.good(), "pass --text FILE (any UTF-8 text), or --data with a token corpus",
                    "--text ", text.string(), ": cannot be read");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cache / fmt::format("{}-{}-sp{}", text.stem().string(),
                             util::checksum_hex(util::checksum64(bytes.data(), bytes.size())),
                             vocab);
}

fs::path prepare_text_corpus(const fs::path& text, const fs::path& cache, int64_t vocab,
                             bool report) {
  const fs::path folder = text_corpus_folder(text, cache, vocab);
  // Complete: pack-text writes its manifest last, in a temporary folder renamed to `folder`.
  const fs::path manifest = folder / "tokens.manifest.json";
  std::error_code ec;
  if (fs::exists(manifest, ec)) return folder;
  core::check_output_dir(cache, "--data-cache");
  data::PackTextOptions po;
  po.train = true;
  po.training.vocab_size = static_cast<int>(vocab);
  po.progress = false;
  po.report = report;
  try {
    const data::PackTextSummary s = data::pack_text({text}, folder, po);
    if (report)
      std::printf(
          "packed %s into %s: %lld documents, %lld tokens (%.2f bytes per token), SentencePiece "
          "BPE tokenizer of %lld ids trained on it, in %.1f s\n",
          text.string().c_str(), folder.string().c_str(), static_cast<long long>(s.documents),
          static_cast<long long>(s.tokens),
          s.tokens > 0 ? static_cast<double>(s.input_bytes) / static_cast<double>(s.tokens) : 0.0,
          static_cast<long long>(s.vocab_size), s.seconds);
  } catch (const data::PackInterrupted&) {
    throw;
  } catch (const Error& e) {
    // Another rank renamed its pack into place first: the same text, the same bytes.
    if (fs::exists(manifest, ec)) return folder;
    STOKER_CHECK_HINT(false,
                      e.hint().empty() ? "pass --text with another text, or --data" : e.hint(),
                      "--text ", text.string(), ": packing it into --data-cache ", folder.string(),
                      " failed: ", e.message());
  }
  return folder;
}

}  // namespace stoker::program
