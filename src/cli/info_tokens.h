// `stoker info` on tokenized corpora (data::TokenCorpus): a Megatron dataset (PREFIX, PREFIX.idx
// or PREFIX.bin), llm.c shards (a shard, or a quoted glob of them), or raw uint16/uint32 files
// (--token-bytes 2|4). Private to the CLI; main.cpp dispatches here.
//
// Prints the format and dtype, the files, tokens, documents (and Megatron's sequences), empty
// documents, min/median/max document length and the smallest and largest id (a parallel scan of
// every id). Opening validates every header, size, pointer and index; --vocab N also checks every
// id against N; --verify says what was verified and how fast the ids were read (these formats
// have no checksums: said so). Errors (exit status 1) name the file and the problem.
//
// Thread-safety: call from the main thread.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace stoker::cli {

struct InfoTokenOptions {
  int token_bytes = 0;  // > 0: raw files of this width
  int64_t vocab = 0;    // > 0: every id must be below it
  int64_t eot = -1;     // the document delimiter; -1: the format's default
};

// Adds --token-bytes, --vocab and --eot to the `info` subcommand.
void add_info_token_options(CLI::App* info, InfoTokenOptions& options);

// Whether `stoker info PATH` means a token corpus: --token-bytes given, a glob pattern, a
// Megatron prefix / .idx / .bin with its .idx, or any other regular file but an LMDB `*.mdb`
// (call after is_safetensors_file). Nothing is opened.
bool is_token_corpus(const std::string& path, const InfoTokenOptions& options);

// Prints the description; returns the exit status. Throws stoker::Error for a corpus that
// cannot be read, is damaged, or holds an id outside --vocab.
int run_info_tokens(const std::string& path, bool verify, const InfoTokenOptions& options);

}  // namespace stoker::cli
