// What the example programs (stoker_mlp, stoker_demo, stoker_classifier, stoker_gpt) share to
// meet a bad input the same way: one top-level handler and the checks of their arguments. Every
// bad input ends in one clear error before any work is done, never in an uncaught exception.
//
//   run(NAME, app, argc, argv, body)   parses the command line with `app` (a parse error or
//       --help: CLI11's message and exit code, via app.exit), then runs `body`; an exception
//       escaping it is printed as "NAME: error: MESSAGE" and, when there is one,
//       "  hint: HINT" on stderr (the library's C++ option names replaced by the program's
//       flags: `flag_names`), and run returns 1.
//   at_least / positive / in_range    CLI11 validators (Option::check) for numbers: finite
//       values in a range, named in plain numbers in the message and in --help ("--batch: 0 is
//       below the minimum 1", "--threads: 10000 is not in [0, 1024]"). NaN and infinities never
//       pass; a value that is no number at all is left to CLI11's conversion error.
//   non_empty_path                    a CLI11 validator for path flags: an empty value is
//       refused ("--save: an empty path ..."), never taken as "off".
//   device(value, flag)                "auto" (or empty): the best device; cpu; cuda, gpu or
//       cuda:N, which must be visible: otherwise an error naming the flag, with the hint
//       `--device cpu`.
// Output paths are checked with core::check_output_path / check_output_dir (core/output_path.h)
// before the first step.
//
// Thread-safety: call from the main thread.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/core/device.h"

namespace stoker::program {

// The library's errors name its C++ options ("TrainerOptions::cuda_graph"), right for a C++
// user; a program's user knows its flags. Each pair: a phrase of the library's messages and
// the program's words for it ("--cuda-graph"), replaced in the error and the hint that run()
// prints. Longer phrases come first (the first match of a place wins).
using FlagNames = std::vector<std::pair<std::string, std::string>>;
// The phrases the flags of both example trainers answer (common/run_flags.h, --accum, --lr,
// --precision, --cuda-graph); each program adds its own before them.
FlagNames trainer_flag_names();
// `text` with every phrase of `names` replaced.
std::string name_flags(std::string text, const FlagNames& names);

int run(std::string_view name, CLI::App& app, int argc, char** argv,
        const std::function<int()>& body);
int run(std::string_view name, CLI::App& app, int argc, char** argv, const FlagNames& flag_names,
        const std::function<int()>& body);

inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

CLI::Validator at_least(double lo);               // [lo, inf)
CLI::Validator positive(double hi = kUnbounded);  // (0, hi]
CLI::Validator in_range(double lo, double hi);    // [lo, hi]
// A path flag given an empty value ("--save ''", often an unset shell variable) is refused: an
// empty path is not "off", leaving the flag out is.
CLI::Validator non_empty_path();

Device device(const std::string& value, std::string_view flag = "--device");

}  // namespace stoker::program
