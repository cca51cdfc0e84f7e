// What the token trainers (stoker_gpt, stoker_llm) share: --data / --val / --mix as token
// corpora (data::TokenCorpus: a Megatron prefix, .idx or .bin, a `stoker pack-text` folder, llm.c
// shards or a glob of them) served by data::SequenceBatches (each sequence once per epoch,
// mixtures, elastic resume), and the bundled text packed with SentencePiece. A plain file of raw
// uint16 ids given alone to --data keeps data::TokenBatches (random windows). Owns nothing
// global; call from the main thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/stoker.h"

namespace stoker::program {

// What a --data/--val/--mix argument names.
struct TokenSource {
  std::string arg;   // as given
  std::string path;  // the file to open and guard: the .idx of a prefix or folder, else arg
  bool raw = false;  // a plain file of uint16 ids (no llm.c header, no index beside it)
  bool glob = false;
};
// Resolves `arg` of flag `flag`; throws naming the flag when a folder holds no single index.
TokenSource resolve_token_source(const std::string& flag, const std::string& arg);

// --mix "a.idx:0.7,b:0.3": (source, weight) pairs; a malformed entry or a weight that is not a
// positive number throws naming it.
std::vector<std::pair<std::string, double>> parse_mix(const std::string& mix);

// Corpora cut into sequences and served as batches. Owns everything it points to.
struct CorpusData {
  std::vector<std::unique_ptr<data::TokenCorpus>> corpora;
  std::vector<std::unique_ptr<data::TokenSequences>> sequences;
  std::unique_ptr<data::SequenceBatches> batches;
  // With CorpusDataOptions::val_split: the split's documents, in corpus order, on every rank.
  std::unique_ptr<data::SequenceBatches> validation;
  std::string summary;  // one line per source for the run's header
};

struct CorpusDataOptions {
  int64_t context = 0;
  int64_t vocab = 0;
  data::SequenceBatchesOptions batches;
  // > 0 (one source only): that fraction (< 1) or count (>= 1) of its documents, chosen by the
  // seed, is the validation set and left out of training (data::split_documents).
  double val_split = 0;
  // > 0 (one source only): the last documents holding at least this fraction of its tokens are
  // the validation set (the default text's: its end, as the byte-level split's last 10 %).
  double val_tail = 0;
};

// `sources`: (flag's argument, weight); a raw file among several is read as one document of
// uint16 ids.
std::unique_ptr<CorpusData> open_corpus_data(
    const std::string& flag, const std::vector<std::pair<std::string, double>>& sources,
    const CorpusDataOptions& options);

// ---- the default data: the bundled text (or --text) as a SentencePiece corpus

// The vocabulary of the tokenizer trained on the text when --vocab is not given: small, for a
// text of hundreds of kilobytes (about 3.6 bytes per token on the bundled one).
inline constexpr int64_t kTextVocab = 1024;

// Where the text's corpus is cached: DIR/<text's stem>-<XXH3-64 of its bytes>-sp<vocab>, a
// `stoker pack-text` output folder (another text or vocabulary: another folder). Reads the text.
std::filesystem::path text_corpus_folder(const std::filesystem::path& text,
                                         const std::filesystem::path& cache, int64_t vocab);

// The text packed as `stoker pack-text TEXT --train-tokenizer --vocab-size VOCAB` does (the
// library's code: paragraphs as documents, each ended by </s>, a SentencePiece BPE tokenizer
// trained on the text), into text_corpus_folder(); nothing when that folder is there (a pack is
// complete or absent: written in a temporary folder renamed at the end). Ranks racing on the
// first run each pack; the first rename wins and the others use its folder (the same bytes).
// Returns the folder; `report`: one line on stdout when it packed.
std::filesystem::path prepare_text_corpus(const std::filesystem::path& text,
                                          const std::filesystem::path& cache, int64_t vocab,
                                          bool report);

}  // namespace stoker::program
