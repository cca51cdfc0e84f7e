#include "run_flags.h"

#include <signal.h>

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <system_error>

#include "program.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/trainer.h"

namespace stoker::program {

namespace fs = std::filesystem;

namespace {

// --save replaces an existing weights file (the last run's, as users expect), but never a
// training checkpoint: that is another run's state (its optimizer, position, scaler), which a
// weights file would silently replace.
void refuse_save_over_a_training_checkpoint(const std::string& save) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(save, ec)) return;
  std::optional<int64_t> step;
  try {
    const train::SafetensorsReader reader(save);
    const auto it = reader.metadata().find("stoker.step");
    if (it != reader.metadata().end()) step = std::stoll(it->second);
  } catch (const std::exception&) {
    return;  // not a readable safetensors file: not a checkpoint either
  }
  if (!step) return;
  core::detail::throw_error(
      __FILE__, __LINE__,
      fmt::format("--save {} is a training checkpoint (step {}): saving the weights over it would "
                  "lose that run's state",
                  save, *step),
      "give --save another path (a checkpoint is resumed with --resume, not replaced)");
}

// The signals --stop-signals may name (with or without SIG), as the kill command spells them.
constexpr std::pair<const char*, int> kStopSignals[] = {
    {"TERM", SIGTERM}, {"INT", SIGINT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}};

std::string signal_name(int sig) {
  for (const auto& [name, number] : kStopSignals)
    if (number == sig) return std::string("SIG") + name;
  return "signal " + std::to_string(sig);
}

}  // namespace

std::vector<int> parse_signals(std::string_view text) {
  const std::string forms =
      "give --stop-signals a comma-separated list of TERM, INT, USR1, USR2, "
      "HUP (default TERM,INT,USR1), or none";
  std::vector<int> out;
  if (text == "none") return out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string word(text.substr(start, end - start));
    for (char& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (word.rfind("SIG", 0) == 0) word = word.substr(3);
    int sig = 0;
    for (const auto& [name, number] : kStopSignals)
      if (word == name) sig = number;
    STOKER_CHECK_HINT(sig != 0, forms, "--stop-signals '", std::string(text), "': '",
                      std::string(text.substr(start, end - start)),
                      "' is not a signal that can stop a run");
    if (std::find(out.begin(), out.end(), sig) == out.end()) out.push_back(sig);
    start = end + 1;
  }
  return out;
}

Interval parse_interval(std::string_view text, std::string_view flag) {
  const std::string word(text);
  const std::string forms = "give a number of steps (500) or a duration (90s, 30m, 1.5h, 2d)";
  // Digits, an optional fraction, an optional unit letter: no signs, spaces, hex or exponents.
  size_t digits = 0;
  while (digits < word.size() && std::isdigit(static_cast<unsigned char>(word[digits]))) ++digits;
  size_t number = digits;
  if (number < word.size() && word[number] == '.') {
    ++number;
    while (number < word.size() && std::isdigit(static_cast<unsigned char>(word[number]))) ++number;
  }
  STOKER_CHECK_HINT(
      digits > 0 && number + 1 >= word.size() &&
          (number == word.size() || std::isalpha(static_cast<unsigned char>(word[number]))),
      forms, flag, " '", word, "' is neither a number of steps nor a duration");
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  const std::string unit(end);
  double seconds = 0;
  if (unit.empty()) {
    STOKER_CHECK_HINT(v >= 1 && v == std::floor(v) && v < 9e18, forms, flag, " ", word,
                      ": a number of steps is a whole number of at least 1");
    return {.steps = static_cast<int64_t>(v)};
  } else if (unit == "s") {
    seconds = v;
  } else if (unit == "m") {
    seconds = v * 60;
  } else if (unit == "h") {
    seconds = v * 3600;
  } else if (unit == "d") {
    seconds = v * 86400;
  } else {
    STOKER_CHECK_HINT(false, forms, flag, " '", word, "': the unit '", unit,
                      "' is not s, m, h or d");
  }
  STOKER_CHECK_HINT(seconds >= 1, forms, flag, " ", word, ": a duration is at least 1 second");
  return {.seconds = seconds};
}

void RunFlags::add_to(CLI::App& app, const std::string& val_help) {
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "training checkpoints go here; the same command restarted continues the run "
                 "from the newest (created when missing)")
      ->check(non_empty_path());
  app.add_option("--checkpoint-interval", checkpoint_interval,
                 "a checkpoint every N steps or every duration (90s, 30m, 2h, 1d)")
      ->capture_default_str();
  app.add_option(
         "--keep-last", keep_last,
         "periodic checkpoints kept, newest first (0: all); last.safetensors is always kept")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--resume", resume,
                 "resume from FILE, or (without a value) from the newest checkpoint of "
                 "--checkpoint-dir, which must exist")
      ->expected(0, 1);
  app.add_option("--save", save,
                 "write the trained weights here (safetensors, PyTorch names); checked before "
                 "training")
      ->check(non_empty_path());
  app.add_option("--val", val, val_help)->check(non_empty_path());
  app.add_option("--eval-every", eval_every,
                 "evaluate every N optimizer steps (0: at each epoch's end) and at the end")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--eval-subset", eval_subset,
                 "evaluate on the first K validation samples, the same each time (0: all)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--metrics", metrics,
                 "write one JSON object per log line and per evaluation here (JSON Lines); a "
                 "resumed run continues it")
      ->check(non_empty_path());
  app.add_option("--on-corrupt", on_corrupt,
                 "a bad sample in the data: fail (stop, naming it) or skip (replace it, count it)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  app.add_option("--activation-checkpoint-every", activation_checkpoint_every,
                 "activation checkpointing: keep only every k-th block's input and recompute the "
                 "block in backward (1: all blocks; 0: off)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--stop-signals", stop_signals,
                 "signals that stop the run after the step in progress, with a checkpoint in "
                 "--checkpoint-dir, exiting 128 + signal (a second one ends it at once): a list "
                 "of TERM, INT, USR1, USR2, HUP, or none")
      ->capture_default_str();
  // The old spelling, easy to take for training checkpoints: still accepted, with a warning.
  old_spelling_ = app.add_option("--checkpoint-every", activation_checkpoint_every)
                      ->check(at_least(0))
                      ->group("");
}

// Every rank refuses the same clashes (nothing is created here: only rank 0 creates folders).
void RunFlags::check_inputs_and_outputs(const std::vector<Input>& inputs) const {
  std::vector<Input> all = inputs;
  if (resume && !resume->empty()) all.push_back({"--resume", *resume});
  for (const Input& in : all) {
    if (in.path.empty() || !in.exists) continue;
    if (in.database)
      core::check_input_folder(in.path, in.flag, {"data.mdb"});
    else
      core::check_input_file(in.path, in.flag);
  }
  // Validation on the training data measures nothing: refused, not warned about.
  for (const Input& v : all)
    for (const Input& in : all)
      if (v.flag == "--val" && in.flag != "--val" && in.flag != "--resume" && in.trained_on &&
          core::same_file(v.path, in.path))
        core::detail::throw_error(
            __FILE__, __LINE__,
            fmt::format("--val {} is the same as {} {}: the validation loss would be measured on "
                        "the training data",
                        v.path.string(), in.flag, in.path.string()),
            "split off a validation set the run does not train on (e.g. the last 10 % of the "
            "tokens, or held-out images packed with `stoker pack`), or leave --val out");
  core::PathGuard guard;
  for (const Input& in : all) guard.input(in.flag, in.path);
  // The diagnostics' files that `stoker doctor -- PROGRAM` (or the user) asks for through the
  // environment (train/environment.h) are outputs too, the baseline to compare with an input.
  const diag::DiagnosticsOptions env = train::apply_environment({}).diagnostics;
  if (!env.baseline_compare.empty())
    guard.input("STOKER_DIAG_BASELINE_COMPARE", env.baseline_compare);
  using Kind = core::PathGuard::Kind;
  guard.output("--checkpoint-dir", checkpoint_dir, Kind::folder, {"--resume"});
  guard.output("--metrics", metrics, Kind::file);
  guard.output("--save", save, save_folder ? Kind::folder : Kind::file);
  const std::pair<const char*, const std::filesystem::path*> diag_outputs[] = {
      {"STOKER_DIAG_REPORT_JSON", &env.report_json},     {"STOKER_DIAG_TRACE", &env.trace_path},
      {"STOKER_DIAG_BASELINE_SAVE", &env.baseline_save}, {"STOKER_DIAG_HTML", &env.html_report},
      {"STOKER_DIAG_TIMELINE_CSV", &env.timeline_csv},   {"STOKER_DIAG_GPU_CSV", &env.gpu_csv}};
  for (const auto& [name, path] : diag_outputs)
    if (!path->empty()) guard.output(name, *path, Kind::file);
}

void RunFlags::check(const CLI::App& app, bool has_validation, bool main_rank,
                     const std::vector<Input>& inputs) {
  if (old_spelling_ && old_spelling_->count() > 0) {
    STOKER_CHECK_HINT(app.count("--activation-checkpoint-every") == 0,
                      "give only --activation-checkpoint-every",
                      "--checkpoint-every and --activation-checkpoint-every are the same flag "
                      "(activation checkpointing); give it once");
    if (main_rank)
      std::fprintf(stderr,
                   "warning: --checkpoint-every is now spelled --activation-checkpoint-every "
                   "(activation checkpointing of every k-th block); training checkpoints are "
                   "--checkpoint-dir and --checkpoint-interval\n");
  }
  const bool dir = !checkpoint_dir.empty();
  for (const char* flag : {"--checkpoint-interval", "--keep-last"})
    STOKER_CHECK_HINT(dir || app.count(flag) == 0, "add --checkpoint-dir DIR", flag,
                      " needs --checkpoint-dir: there is no folder to write checkpoints into");
  interval_ = parse_interval(checkpoint_interval);
  signals_ = parse_signals(stop_signals);
  if (resume) {
    STOKER_CHECK_HINT(!resume->empty() || dir,
                      "add --checkpoint-dir DIR (the run's folder), or give --resume FILE",
                      "--resume without a file resumes the newest checkpoint of --checkpoint-dir, "
                      "and there is no --checkpoint-dir");
    if (!resume->empty()) {
      std::error_code ec;
      STOKER_CHECK_HINT(fs::is_regular_file(*resume, ec),
                        "give the path of a checkpoint file (step_N.safetensors or "
                        "last.safetensors), or --resume alone for the newest of --checkpoint-dir",
                        "--resume ", *resume, ": ",
                        fs::exists(*resume, ec) ? "not a regular file" : "no such file");
    }
  }
  if (!val.empty()) {
    std::error_code ec;
    STOKER_CHECK_HINT(fs::exists(val, ec), "check the path of the validation set", "--val ", val,
                      ": no such file or folder");
  }
  for (const char* flag : {"--eval-every", "--eval-subset"})
    STOKER_CHECK_HINT(has_validation || app.count(flag) == 0,
                      "add --val, or leave " + std::string(flag) + " out", flag,
                      " needs a validation set: there is no --val");
  check_inputs_and_outputs(inputs);
  if (!main_rank) return;  // rank 0 writes; the others must not race it creating folders
  if (dir) core::check_output_dir(checkpoint_dir, "--checkpoint-dir");
  if (!metrics.empty()) core::check_output_path(metrics, "--metrics");
  // This run owns them from now on (rank 0 writes them: the job's other ranks do not lock).
  if (dir)
    locks_.push_back(train::RunLock::acquire(train::RunLock::dir_lock_path(checkpoint_dir),
                                             "--checkpoint-dir " + checkpoint_dir,
                                             "--checkpoint-dir"));
  if (!metrics.empty())
    locks_.push_back(train::RunLock::acquire(train::RunLock::file_lock_path(metrics),
                                             "--metrics " + metrics, "--metrics"));
  if (!save.empty() && save_folder) {
    core::check_output_dir(save, "--save");
  } else if (!save.empty()) {
    core::check_output_path(save, "--save");
    refuse_save_over_a_training_checkpoint(save);
  }
}

void RunFlags::apply(train::TrainerOptions& o) const {
  o.checkpoint_dir = checkpoint_dir;
  o.checkpoint_interval = interval_.steps;
  o.checkpoint_interval_seconds = interval_.seconds;
  o.keep_last = keep_last;
  o.metrics_path = metrics;
  o.evaluation.every_steps = eval_every;
  o.evaluation.max_samples = eval_subset;
  o.stop_signals = signals_;
}

int RunFlags::stopped(const train::FitResult& fit, std::string_view program, bool print) const {
  if (fit.stop_signal == 0) return 0;
  if (print) {
    std::fflush(stdout);
    const std::string name = std::string(program);
    const std::string sig = signal_name(fit.stop_signal);
    if (!fit.stop_checkpoint.empty())
      std::fprintf(stderr,
                   "%s: stopped by %s after step %lld; checkpoint written to %s: run the same "
                   "command to continue from it\n",
                   name.c_str(), sig.c_str(), static_cast<long long>(fit.steps),
                   fit.stop_checkpoint.string().c_str());
    else
      std::fprintf(stderr,
                   "%s: stopped by %s after step %lld; no checkpoint was written (there is no "
                   "--checkpoint-dir): give --checkpoint-dir DIR to make a run resumable\n",
                   name.c_str(), sig.c_str(), static_cast<long long>(fit.steps));
  }
  return 128 + fit.stop_signal;
}

void RunFlags::refuse_in(const CLI::App& app, const std::string& mode, const std::string& why) {
  for (const char* flag : {"--checkpoint-dir", "--checkpoint-interval", "--keep-last", "--resume",
                           "--save", "--val", "--eval-every", "--eval-subset", "--metrics"})
    STOKER_CHECK_HINT(app.count(flag) == 0, std::string("leave ") + flag + " out of " + mode, flag,
                      " has no use in ", mode, ": ", why);
}

data::CorruptPolicy RunFlags::corrupt_policy() const {
  return on_corrupt == "skip" ? data::CorruptPolicy::skip : data::CorruptPolicy::fail;
}

std::optional<fs::path> RunFlags::resume_run(train::Trainer& trainer, bool print) const {
  std::optional<fs::path> from;
  if (resume && !resume->empty()) {
    trainer.resume(*resume);
    from = *resume;
  } else if (!checkpoint_dir.empty()) {
    from = trainer.resume_latest(checkpoint_dir);
    STOKER_CHECK_HINT(from || !resume, "leave --resume out to start the run",
                      "--resume: --checkpoint-dir ", checkpoint_dir,
                      " holds no checkpoint to resume");
  }
  if (from && print) {
    std::printf("resuming from %s at step %lld%s\n", from->string().c_str(),
                static_cast<long long>(trainer.step()),
                resume ? ""
                       : " (--checkpoint-dir holds this run's checkpoints: a restart continues "
                         "it; give another folder for a new run)");
    std::fflush(stdout);
  }
  return from;
}

}  // namespace stoker::program
