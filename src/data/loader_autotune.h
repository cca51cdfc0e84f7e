// The loader's autotuner as a pure function of one measured window, so that its decisions are
// unit-tested on made-up windows (tests/data/loader_autotune_test.cpp).
#pragma once

#include <string>

#include "stoker/data/batch_source.h"

namespace stoker::data {

// One measurement window of a running loader, the autotuner's input.
struct LoaderWindow {
  double seconds = 0;          // wall time of the window, seen by the consumer
  int64_t samples = 0;         // samples next() delivered in it
  double consumer_wait_s = 0;  // time next() blocked in it
  double worker_s = 0;         // thread-seconds workers spent on the samples they finished
  int64_t samples_made = 0;    // samples the workers finished in it
};

struct AutotuneLimits {
  int max_threads = 1;
  int max_prefetch = 1;
  bool tune_threads = true;  // false: the user fixed `threads`
  bool tune_prefetch = true;
};

// The autotuner's policy, a pure function (unit-tested with made-up windows). With
// cost = worker_s / samples_made (thread-seconds per sample), demand = samples / (seconds -
// consumer_wait_s) (what the consumer would take if it never waited) and capacity =
// threads / cost:
//  - the consumer waits (wait share > kWaitHigh) and capacity < kFasterMargin * demand: the
//    workers are too slow on average → threads = max(needed, threads + 1), where needed =
//    ceil(demand * cost * kHeadroom), up to max_threads (at max_threads it is input-bound at
//    the machine's capacity: nothing changes);
//  - the consumer waits although capacity >= kFasterMargin * demand: production is bursty →
//    prefetch + 1 (up to max_prefetch), or a thread more when the depth is at its bound;
//  - the consumer hardly waits (share < kWaitLow) and needed < threads: shrink gradually,
//    by at most a quarter per window, never below needed (the cores go back to the trainer);
//  - otherwise, or with too little data (no sample made or delivered), nothing changes.
// `reason`, when not null, receives a one-line explanation of the decision.
LoaderTuning autotune_policy(const LoaderWindow& window, LoaderTuning current,
                             const AutotuneLimits& limits, std::string* reason = nullptr);

}  // namespace stoker::data
