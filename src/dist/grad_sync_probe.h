// GradSyncProbe: what tests watch of a bucketed gradient synchronization — the order its buckets
// were launched in, the steps it finished, a callback at each launch. Private (not installed):
// the public headers keep no test-only hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "stoker/dist/grad_sync.h"

namespace stoker::dist {

class GradSyncProbe {
 public:
  // Buckets in the order they were launched since the last finish() (or during it).
  static const std::vector<int>& launch_order(const BucketedGradSync& s) { return s.launch_order_; }
  // Steps completed by finish().
  static int64_t steps(const BucketedGradSync& s) { return s.steps_; }
  // Calls `fn` with the bucket's index at each launch (replacing any earlier callback).
  static void on_bucket_launch(BucketedGradSync& s, std::function<void(int bucket)> fn) {
    s.on_bucket_launch_ = std::move(fn);
  }
};

}  // namespace stoker::dist
