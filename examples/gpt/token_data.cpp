// stoker_gpt's token corpora (token_data.h): which arguments are corpora, --mix parsing, and the
// sources cut into sequences.
#include "token_data.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace stoker::gpt_program {

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
    if (options.val_split > 0) {
      STOKER_CHECK_HINT(sources.size() == 1, "split one --data corpus, or give --val",
                        "--val-split: a mixture has no single corpus to split");
      const bool fraction = options.val_split < 1;
      STOKER_CHECK_HINT(fraction || options.val_split == std::floor(options.val_split),
                        "give a fraction below 1 or a whole number of documents", "--val-split ",
                        options.val_split,
                        " is neither a fraction below 1 nor a "
                        "whole number of documents");
      const auto val = data::split_documents(
          corpus, {.fraction = fraction ? options.val_split : 0,
                   .count = fraction ? 0 : static_cast<int64_t>(options.val_split),
                   .seed = options.batches.seed});
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
          fmt::format("  validation split of {}: {} documents, {} tokens, {} sequences\n", arg,
                      val.size(), val_seq.num_tokens(), val_seq.size());
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

}  // namespace stoker::gpt_program
