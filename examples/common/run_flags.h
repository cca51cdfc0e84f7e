// The flags that make an example trainer (stoker_classifier, stoker_gpt, stoker_llm) a tool for
// runs of hours or days — the same names, checks and meaning in each (docs/long_runs.md):
//
//   --checkpoint-dir DIR         training checkpoints go here (step_N.safetensors, and
//                                last.safetensors at the end); a restart of the same command
//                                with DIR holding checkpoints continues the run from the newest
//   --checkpoint-interval N|T    every N steps, or every duration T (90s, 30m, 2h, 1d; checked at
//                                log lines); default 30m
//   --keep-last K                keep the K newest periodic checkpoints (default 3; 0 = all);
//                                last.safetensors is always kept
//   --resume [FILE]              resume from FILE, or (no value) from DIR's newest, which must
//                                exist; without --resume, DIR's newest is resumed when there is one
//   --save FILE                  the trained weights (safetensors, PyTorch names; a folder with
//                                save_folder: stoker_llm's transformers folder)
//   --val DB|FILE                the validation set
//   --eval-every N               evaluate every N steps (0: at each epoch's end) and at the end
//   --eval-subset K              evaluate on the first K validation samples (0: all)
//   --metrics FILE               one JSON object per log line and per evaluation
//                                (docs/long_runs.md#metrics); a resumed run continues the file
//   --on-corrupt fail|skip       a bad sample: stop naming it, or replace and count it
//   --activation-checkpoint-every K   activation checkpointing of every K-th block (0: off);
//                                the old spelling --checkpoint-every still works, with a warning
//   --stop-signals LIST          signals that stop the run after its step, with a checkpoint
//                                (default TERM,INT,USR1; none: off); see stopped()
//
// A run owns its outputs: check() locks --checkpoint-dir and --metrics (train/run_lock.h) for
// the process's life, so a second run on them is refused before any work, naming the first.
//
// check() runs before any work: every value, the cross-flag rules and the output paths (created
// when missing), each error naming its flag.
//
// Thread-safety: call from the main thread.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/data/loader.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/trainer.h"

namespace stoker::program {

// A checkpoint interval: `steps` steps or `seconds` wall seconds (exactly one is > 0).
struct Interval {
  int64_t steps = 0;
  double seconds = 0;
};
// "500" (steps) or a duration "90s", "30m", "1.5h", "2d"; anything else, zero or negative is
// an error naming `flag` and the accepted forms.
Interval parse_interval(std::string_view text, std::string_view flag = "--checkpoint-interval");
// --stop-signals: "TERM,INT,USR1" (names with or without SIG, any case) or "none" (empty);
// anything else is an error naming the flag and the accepted names.
std::vector<int> parse_signals(std::string_view text);

struct RunFlags {
  std::string checkpoint_dir;
  std::string checkpoint_interval = "30m";
  int keep_last = 3;
  std::optional<std::string> resume;  // given: a FILE, or "" for the newest in checkpoint_dir
  std::string save;
  std::string val;
  int64_t eval_every = 0;
  int64_t eval_subset = 0;
  std::string metrics;
  std::string on_corrupt = "fail";
  int activation_checkpoint_every = 0;
  std::string stop_signals = "TERM,INT,USR1";
  // --save names a folder the program writes (stoker_llm: a Hugging Face folder), not a file.
  bool save_folder = false;

  // An input of the program, checked by check(): a regular file it reads (a token file) or a
  // database folder from `stoker pack` (its data.mdb a regular file). `exists`: checked now
  // (false: only guarded against the outputs, e.g. a file the program writes before reading).
  struct Input {
    std::string flag;            // "--data"
    std::filesystem::path path;  // empty: not given
    bool database = false;
    bool exists = true;
    bool trained_on = true;  // --val may not be it (false: a validation split, e.g. the text's)
  };

  // Registers the flags on `app`; `val_help` says what --val takes in this program.
  void add_to(CLI::App& app, const std::string& val_help);
  // After parsing: the old --checkpoint-every spelling (a warning), the interval, the rules
  // between flags (`has_validation`: the run has a validation set, given or built in) and the
  // output paths (only the main rank creates folders). `inputs`: the program's inputs, --val
  // among them (its kind is the program's), each refused unless a regular file (a database
  // folder); --val the same as another input is refused; no output (--save, --metrics,
  // --checkpoint-dir) may be, lie in or (a folder) hold an input (core::PathGuard; the
  // checkpoint folder may hold the --resume file). Throws stoker::Error naming the flag.
  void check(const CLI::App& app, bool has_validation, bool main_rank,
             const std::vector<Input>& inputs = {});

  // A mode that trains no run worth keeping (a speed bench): any flag of a run given is an
  // error saying `why` (activation checkpointing and --on-corrupt stay allowed).
  static void refuse_in(const CLI::App& app, const std::string& mode, const std::string& why);

  // TrainerOptions' checkpoint, metrics and evaluation fields (activation checkpointing is the
  // program's to apply: a Sequential model takes TrainerOptions', others their own).
  void apply(train::TrainerOptions& options) const;
  data::CorruptPolicy corrupt_policy() const;

  // After fit(): a run stopped by a signal (FitResult::stop_signal) says so on stderr (`print`:
  // the main rank) — the step, the checkpoint and how to continue — and returns the exit status
  // 128 + signal; a run that was not stopped returns 0.
  int stopped(const train::FitResult& fit, std::string_view program, bool print) const;

  // --resume FILE, --resume, or the automatic resume of a restarted run; returns the file
  // resumed from. `print`: say so on stdout.
  std::optional<std::filesystem::path> resume_run(train::Trainer& trainer, bool print) const;

 private:
  void check_inputs_and_outputs(const std::vector<Input>& inputs) const;

  Interval interval_;
  std::vector<int> signals_;                            // --stop-signals
  std::vector<std::shared_ptr<train::RunLock>> locks_;  // --checkpoint-dir, --metrics (main rank)
  CLI::Option* old_spelling_ = nullptr;
};

}  // namespace stoker::program
