// The flags the two decoder trainers (stoker_gpt, stoker_llm) share, declared once so that they
// keep one spelling, one check and one help text: the optimization schedule and the sample
// generated at the end. Registered on any options struct with fields of these names
// (examples/gpt/gpt_program.h, examples/llm/llm_program.h); their defaults stay the program's.
#pragma once

#include <CLI/CLI.hpp>

#include "common/program.h"

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

}  // namespace stoker::program
