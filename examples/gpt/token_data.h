// Private to stoker_gpt: --data / --val / --mix as token corpora (data::TokenCorpus: a Megatron
// prefix, .idx or .bin, a `stoker pack-text` folder, llm.c shards or a glob of them) served by
// data::SequenceBatches (each sequence once per epoch, mixtures, elastic resume). A plain file of
// raw uint16 ids given alone to --data keeps today's data::TokenBatches (random windows).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/stoker.h"

namespace stoker::gpt_program {

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
};

// `sources`: (flag's argument, weight); a raw file among several is read as one document of
// uint16 ids.
std::unique_ptr<CorpusData> open_corpus_data(
    const std::string& flag, const std::vector<std::pair<std::string, double>>& sources,
    const CorpusDataOptions& options);

}  // namespace stoker::gpt_program
