// `stoker pack-text INPUT... --out DIR`: the subcommand's flags and its run (pack_text.cpp);
// the work is data::pack_text (src/data/text/pack_text.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "data/text/pack_text.h"

namespace stoker::cli {

struct PackTextCommand {
  std::vector<std::string> inputs;
  std::string out;
  std::string tokenizer;
  std::string format = "auto";
  std::string split = "paragraph";
  bool verbose = false;
  data::PackTextOptions options;
};

CLI::App* add_pack_text_command(CLI::App& app, PackTextCommand& command);
// Packs and prints the summary; errors are thrown (stoker::Error, data::PackInterrupted).
int run_pack_text(PackTextCommand& command);

}  // namespace stoker::cli
