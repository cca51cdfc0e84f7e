// Private (`stoker pack-text`): text and JSON Lines files tokenized with SentencePiece into
// Megatron-LM's indexed dataset, the corpus stoker's language-model trainers read.
//
// Output folder (docs/formats.md#token-corpus-written-by-stoker-pack-text):
//   DIR/PREFIX.bin, DIR/PREFIX.idx   the indexed dataset, one sequence per document, each
//                                    document's ids followed by the end-of-document id
//   DIR/tokenizer.model              the SentencePiece model used (trained, or a copy of
//                                    --tokenizer)
//   DIR/PREFIX.manifest.json         XXH3-64 checksums of the three files, the counts, the
//                                    inputs and the options; written last
// Everything is written into "DIR.tmp-<pid>" and renamed to DIR at the end, so a DIR that
// exists is complete; SIGINT/SIGTERM remove the temporary folder and throw PackInterrupted (as
// `stoker pack`); a pack killed outright leaves the temporary folder, which the next pack to
// DIR removes when its process is gone.
//
// Documents are encoded in parallel (oneTBB pipeline: a serial reader, parallel encoders, a
// serial writer in input order), so the bytes written do not depend on the thread count.
// Thread-safety: one call at a time per output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/text/sentencepiece_tokenizer.h"
#include "data/text/text_input.h"

namespace stoker::data {

struct PackTextOptions {
  std::string prefix = "tokens";
  std::filesystem::path tokenizer;  // a .model file; empty: train one (train = true)
  bool train = false;
  detail::TokenizerTraining training;
  detail::TextFormat format = detail::TextFormat::automatic;
  detail::TextSplit split = detail::TextSplit::paragraph;
  std::string text_key = "text";
  int64_t max_document_bytes = int64_t{64} << 20;
  bool eos = true;   // append the model's </s> after each document
  bool bos = false;  // put the model's <s> before each document
  // false: the first bad document (invalid UTF-8, a line that is not JSON, a missing field)
  // ends the pack with FILE:LINE; true: it is left out, counted and listed.
  bool skip_bad_documents = false;
  int threads = 0;  // 0: all cores
  bool overwrite = false;
  bool progress = true;
  bool report = true;                 // print skipped documents and notes on stderr
  int64_t fail_after_documents = -1;  // tests: throw after writing this many documents
};

struct PackTextSummary {
  std::filesystem::path output, bin, idx, manifest, tokenizer;
  int64_t documents = 0, tokens = 0, vocab_size = 0;
  std::string dtype;  // "uint16" or "int32"
  int64_t empty_documents = 0, bad_documents = 0;
  std::vector<std::string> bad;  // "FILE:LINE: why", the first 100
  uint64_t input_bytes = 0;
  bool trained = false;
  double train_seconds = 0, seconds = 0;
};

PackTextSummary pack_text(const std::vector<std::filesystem::path>& inputs,
                          const std::filesystem::path& out, const PackTextOptions& options);

std::string format_summary(const PackTextSummary& summary);

// The tokenizer a pack-text dataset records: PREFIX.manifest.json beside `idx` (PREFIX.idx) names
// its .model file and vocabulary. nullopt: no manifest there (a dataset packed by other tools);
// a manifest that is not pack-text's, or names a model that is not there, throws naming it.
struct RecordedTokenizer {
  std::filesystem::path model;
  int64_t vocab_size = 0;
};
std::optional<RecordedTokenizer> recorded_tokenizer(const std::filesystem::path& idx);

namespace detail {
// Throws stoker::Error when something is at `out` that may not be replaced: always without
// `overwrite`; with it, unless it is a folder that `stoker pack-text` wrote (its manifests say
// so and it holds nothing but the files they list).
void check_pack_text_replaceable(const std::filesystem::path& out, bool overwrite);
}  // namespace detail

}  // namespace stoker::data
