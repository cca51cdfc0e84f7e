#include "pack_text.h"

#include <cstdio>

#include "stoker/core/error.h"

namespace stoker::cli {

CLI::App* add_pack_text_command(CLI::App& app, PackTextCommand& c) {
  data::PackTextOptions& o = c.options;
  CLI::App* cmd = app.add_subcommand(
      "pack-text",
      "tokenize text and JSON Lines files with SentencePiece into Megatron-LM's indexed dataset "
      "(DIR/PREFIX.bin + .idx, the tokenizer and a checksum manifest)");
  cmd->add_option("inputs", c.inputs,
                  "text files (documents: paragraphs, see --split) and JSON Lines files "
                  "(.jsonl/.ndjson/.json: one object per line, its --text-key field)")
      ->required();
  cmd->add_option("-o,--out", c.out, "output folder (written whole at the end)")->required();
  cmd->add_option("--tokenizer", c.tokenizer, "a SentencePiece .model file to encode with");
  cmd->add_flag("--train-tokenizer", o.train,
                "train a SentencePiece model on the inputs (BPE with byte fallback, Llama's "
                "settings) and write it into --out as tokenizer.model");
  cmd->add_option("--vocab-size", o.training.vocab_size, "--train-tokenizer: pieces in the model")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--model-type", o.training.model_type, "--train-tokenizer: bpe or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}))
      ->capture_default_str();
  cmd->add_option("--train-sentences", o.training.sample_sentences,
                  "--train-tokenizer: lines sampled from the inputs to train on")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--seed", o.training.seed, "--train-tokenizer: seed of the sample")
      ->capture_default_str();
  cmd->add_flag("--verbose", c.verbose, "--train-tokenizer: print SentencePiece's training log");
  cmd->add_option("--prefix", o.prefix, "file names in --out: PREFIX.bin, PREFIX.idx")
      ->capture_default_str();
  cmd->add_option("--format", c.format,
                  "auto (by extension: .jsonl/.ndjson/.json are JSON Lines), text or jsonl")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))
      ->capture_default_str();
  cmd->add_option("--split", c.split,
                  "text files: a document is a paragraph (up to a blank line), a line, or the "
                  "whole file")
      ->check(CLI::IsMember({"paragraph", "line", "file"}))
      ->capture_default_str();
  cmd->add_option("--text-key", o.text_key, "JSON Lines: the field that holds the text")
      ->capture_default_str();
  cmd->add_option("--max-document-bytes", o.max_document_bytes,
                  "refuse documents (and lines) longer than this")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_flag("!--no-eos", o.eos, "do not append the end-of-document id (</s>) to documents");
  cmd->add_flag("--bos", o.bos, "also put the beginning-of-document id (<s>) before documents");
  cmd->add_flag("--skip-bad-documents", o.skip_bad_documents,
                "leave out (count and list) documents with invalid UTF-8, JSON lines that are "
                "not JSON or lack --text-key; default: the first one is an error");
  cmd->add_option("-j,--threads", o.threads, "encoding threads (0: all cores)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  cmd->add_flag("--overwrite", o.overwrite,
                "replace an existing --out (only a folder written by stoker pack-text)");
  cmd->add_flag("!--no-progress", o.progress, "no progress bar");
  cmd->footer(
      "Example: stoker pack-text examples/gpt/data/kjv-genesis-exodus.txt --out kjv "
      "--train-tokenizer --vocab-size 2000\n"
      "SIGINT or SIGTERM stops it with nothing written and exit status 130 / 143.");
  return cmd;
}

int run_pack_text(PackTextCommand& c) {
  data::PackTextOptions& o = c.options;
  if (!c.tokenizer.empty() && o.train) {
    core::detail::throw_error(__FILE__, __LINE__,
                              "stoker pack-text: --tokenizer and --train-tokenizer exclude each "
                              "other",
                              "pass one of them");
  }
  o.tokenizer = c.tokenizer;
  o.format = c.format == "text"    ? data::detail::TextFormat::text
             : c.format == "jsonl" ? data::detail::TextFormat::jsonl
                                   : data::detail::TextFormat::automatic;
  o.split = c.split == "line"   ? data::detail::TextSplit::line
            : c.split == "file" ? data::detail::TextSplit::file
                                : data::detail::TextSplit::paragraph;
  o.training.verbose = c.verbose;
  std::vector<std::filesystem::path> inputs(c.inputs.begin(), c.inputs.end());
  const data::PackTextSummary summary = data::pack_text(inputs, c.out, o);
  std::fputs(data::format_summary(summary).c_str(), stdout);
  return 0;
}

}  // namespace stoker::cli
