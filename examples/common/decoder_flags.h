// The flags the two decoder trainers (stoker_gpt, stoker_llm) share, declared once so that they
// keep one spelling, one check and one help text: the optimization schedule and the sample
// generated at the end, and the settings of them a checkpoint records. Used with any options
// struct with fields of these names (examples/gpt/gpt_program.h, examples/llm/llm_program.h);
// their defaults stay the program's.
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "common/program.h"
#include "stoker/train/training_checkpoint.h"

namespace stoker::program {

// --batch --accum --steps --lr --warmup --min-lr --weight-decay --clip.
template <class Options>
void add_schedule_flags(CLI::App& app, Options& o) {
  app.add_option("--batch", o.batch, "sequences per micro-batch per rank")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--accum", o.accum, "gradient accumulation steps")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps (synthetic: timed steps)")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "peak learning rate")->check(positive())->capture_default_str();
  app.add_option("--warmup", o.warmup, "linear warmup steps")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--clip", o.clip, "gradient norm clipping (0: off)")
      ->check(at_least(0))
      ->capture_default_str();
}

// --sample --top-k --temperature --prompt.
template <class Options>
void add_sampling_flags(CLI::App& app, Options& o) {
  app.add_option("--sample", o.sample, "tokens to generate at the end (0: none)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "sampling: 1 = greedy, k > 1 = top-k")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "text the sample continues (not empty with --sample)")
      ->capture_default_str();
}

// A setting's text as checkpoints record it: floats as a stream writes them (6 significant
// digits), so a resumed run compares the same texts its checkpoint holds.
template <class T>
std::string setting_text(const T& x) {
  if constexpr (std::is_floating_point_v<T>) {
    return fmt::format("{:g}", x);
  } else {
    return fmt::format("{}", x);
  }
}

// The schedule's and the optimizer's settings a training checkpoint records (train::RunSetting):
// a resume refuses another --optimizer-state, treats --accum as another global batch, and notes
// the others.
template <class Options>
std::vector<train::RunSetting> optimization_settings(const Options& o) {
  using train::SettingChange;
  return {{"--accum", setting_text(o.accum), SettingChange::global_batch},
          {"--optimizer-state", o.optimizer_state, SettingChange::refuse},
          {"--lr", setting_text(o.lr), SettingChange::note},
          {"--min-lr", setting_text(o.min_lr), SettingChange::note},
          {"--warmup", setting_text(o.warmup), SettingChange::note},
          {"--steps", setting_text(o.steps), SettingChange::note},
          {"--weight-decay", setting_text(o.weight_decay), SettingChange::note},
          {"--clip", setting_text(o.clip), SettingChange::note},
          {"--precision", o.precision, SettingChange::note},
          {"--zero1", o.zero1 ? "on" : "off", SettingChange::note}};
}

}  // namespace stoker::program
