#include "program.h"

#include <fmt/format.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <optional>
#include <sstream>
#include <utility>

#include "stoker/core/error.h"

namespace stoker::program {

namespace {

// A bound as a user would write it: 1024, 0.5, inf.
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

// The value of a command-line word, or nullopt when it is no number (CLI11's conversion then
// reports it). Out-of-range words ("1e999") come back infinite.
std::optional<double> parse_number(const std::string& word) {
  const char* begin = word.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || *end != '\0') return std::nullopt;
  return v;
}

// A validator that rejects non-finite numbers and those `reject` refuses (it returns what is
// wrong, or an empty string).
CLI::Validator number_check(const std::string& range,
                            std::function<std::string(const std::string&, double)> reject) {
  return CLI::Validator(
      [reject = std::move(reject)](std::string& word) -> std::string {
        const std::optional<double> v = parse_number(word);
        if (!v) return {};
        if (!std::isfinite(*v)) return word + " is not a finite number";
        return reject(word, *v);
      },
      range);
}

// Why the exception being handled ended the program: its message and, when known, the fix.
std::pair<std::string, std::string> current_exception_text() {
  try {
    throw;
  } catch (const Error& e) {
    return {e.message(), e.hint()};
  } catch (const std::bad_alloc&) {
    return {"out of host memory", "use a smaller --batch (or fewer loader --threads)"};
  } catch (const std::exception& e) {
    return {e.what(), {}};
  } catch (...) {
    return {"an unknown exception", {}};
  }
}

}  // namespace

FlagNames trainer_flag_names() {
  return {
      {", or set TrainerOptions::continue_on_nan", ""},
      {"Lower the learning rate,", "Lower the learning rate (--lr),"},
      {"TrainerOptions::cuda_graph (--cuda-graph in the example trainers)", "--cuda-graph"},
      {"TrainerOptions::cuda_graph; --cuda-graph in the example trainers", "--cuda-graph"},
      {"TrainerOptions::cuda_graph", "--cuda-graph"},
      {"TrainerOptions::activation_checkpoint_every = 2, and selective_recompute = true",
       "--activation-checkpoint-every 2"},
      {"TrainerOptions::activation_checkpoint_every", "--activation-checkpoint-every"},
      {"TrainerOptions::grad_accum_steps = ", "--accum "},
      {"TrainerOptions::grad_accum_steps", "--accum"},
      {"TrainerOptions::precision = Precision::bf16", "--precision bf16"},
      {"TrainerOptions::precision", "--precision"},
      {"TrainerOptions::checkpoint_interval", "--checkpoint-interval"},
      {"TrainerOptions::checkpoint_dir", "--checkpoint-dir"},
      {"TrainerOptions::metrics_path", "--metrics"},
      {"TrainerOptions::evaluation", "--eval-every / --eval-subset"},
      {"EvalOptions::every_steps", "--eval-every"},
      {"EvalOptions::max_samples", "--eval-subset"},
      {" (the example trainers) or set LoaderOptions::on_corrupt = CorruptPolicy::skip", ""},
  };
}

std::string name_flags(std::string text, const FlagNames& names) {
  for (const auto& [phrase, flag] : names) {
    if (phrase.empty()) continue;
    for (size_t at = text.find(phrase); at != std::string::npos;
         at = text.find(phrase, at + flag.size()))
      text.replace(at, phrase.size(), flag);
  }
  return text;
}

int run(std::string_view name, CLI::App& app, int argc, char** argv,
        const std::function<int()>& body) {
  return run(name, app, argc, argv, FlagNames{}, body);
}

int run(std::string_view name, CLI::App& app, int argc, char** argv, const FlagNames& flag_names,
        const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // --help prints the help and exits 0; a bad argument CLI11's code
  }
  try {
    return body();
  } catch (...) {
    auto [message, hint] = current_exception_text();
    message = name_flags(std::move(message), flag_names);
    hint = name_flags(std::move(hint), flag_names);
    std::fflush(stdout);  // what the program printed comes before its error
    std::fprintf(stderr, "%.*s: error: %s\n", static_cast<int>(name.size()), name.data(),
                 message.c_str());
    if (!hint.empty()) std::fprintf(stderr, "  hint: %s\n", hint.c_str());
    return 1;
  }
}

CLI::Validator at_least(double lo) {
  return number_check("at least " + number(lo), [lo](const std::string& word, double v) {
    return v >= lo ? std::string() : word + " is below the minimum " + number(lo);
  });
}

CLI::Validator positive(double hi) {
  if (std::isinf(hi))
    return number_check("positive", [](const std::string& word, double v) {
      return v > 0 ? std::string() : word + " is not a positive number";
    });
  const std::string range = "(0, " + number(hi) + "]";
  return number_check("in " + range, [hi, range](const std::string& word, double v) {
    return v > 0 && v <= hi ? std::string() : word + " is not in " + range;
  });
}

CLI::Validator in_range(double lo, double hi) {
  const std::string range = "[" + number(lo) + ", " + number(hi) + "]";
  return number_check("in " + range, [lo, hi, range](const std::string& word, double v) {
    return v >= lo && v <= hi ? std::string() : word + " is not in " + range;
  });
}

CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& word) -> std::string {
        return word.empty() ? "an empty path does not turn it off: give a path, or leave the "
                              "flag out"
                            : std::string();
      },
      "");
}

Device device(const std::string& value, std::string_view flag) {
  if (value.empty() || value == "auto") return core::best_device();
  Device d;
  try {
    d = core::parse_device(value);
  } catch (const Error&) {
    STOKER_THROW(flag, " ", value, ": unknown device; use auto, cpu, cuda or cuda:N");
  }
  if (d.is_cpu()) return d;
  const std::string cpu_hint = fmt::format(
      "use {} cpu (or leave {} out: the first GPU when there is one, else the CPU)", flag, flag);
  STOKER_CHECK_HINT(core::built_with_cuda(), cpu_hint, flag, " ", value,
                    ": this build of stoker has no CUDA backend");
  const int n = core::cuda_device_count();
  STOKER_CHECK_HINT(n > 0, cpu_hint, flag, " ", value,
                    ": no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
                    "hides them)");
  STOKER_CHECK_HINT(d.index < n, fmt::format("use cuda:0 .. cuda:{}", n - 1), flag, " ", value,
                    ": only ", n, " CUDA device", n == 1 ? " is" : "s are", " visible");
  return d;
}

}  // namespace stoker::program
