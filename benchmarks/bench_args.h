// Command lines of the CLI11 benchmark programs: scripts/gpu-check.sh passes Google Benchmark's
// --benchmark_* flags to every benchmark binary. parse_skipping_benchmark_flags ignores them,
// except --benchmark_out=FILE, whose FILE it returns (the program writes its JSON there unless
// told otherwise).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace stoker::bench {

// Parses argv without the --benchmark_* flags. Returns the --benchmark_out file ("" if none);
// throws CLI::ParseError like CLI::App::parse (handle it with app.exit).
inline std::string parse_skipping_benchmark_flags(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args;  // CLI11 takes the arguments in reverse order
  std::string benchmark_out;
  for (int i = argc - 1; i >= 1; --i) {
    const std::string a = argv[i];
    if (a.rfind("--benchmark_out=", 0) == 0) benchmark_out = a.substr(16);
    if (a.rfind("--benchmark_", 0) != 0) args.push_back(a);
  }
  app.parse(args);
  return benchmark_out;
}

}  // namespace stoker::bench
