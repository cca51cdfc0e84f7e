// Gradient buckets: how the parameters of a bucketed gradient synchronization
// (dist/bucketed_grad_sync.h) are packed into flat buffers. One pure function, shared by the
// replicated and the sharded (ZeRO-1) synchronization, so both lay buckets out the same way.
//
// The parameters come in backward order (the reverse of registration: backward produces the
// last layers' gradients first) and fill buckets of about `bucket_bytes`, the first one
// `first_bucket_bytes` (small, so that communication starts early). A bucket is closed once it
// holds at least its target; a parameter is never split. Each parameter starts on a 16-element
// (64-byte) boundary of its bucket (vectorized kernels, cuBLASLt); the padding is zeros that are
// reduced along. Each bucket's length is then rounded up to a multiple of `bucket_multiple`
// elements: 16 for a replicated bucket (already a multiple), world_size x 16 for ZeRO-1, so that
// every rank's slice has the same length and starts 64-byte aligned.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/core/shape.h"

namespace stoker::dist {

// Each parameter's view starts on a multiple of this many elements of its bucket.
inline constexpr int64_t kBucketAlignElements = 16;

// One parameter to place: its name (for errors and logs) and shape.
struct BucketPlanEntry {
  std::string name;
  Shape shape;
};

// What one bucket holds, for logs, checkpoints of sharded state and tests.
struct BucketInfo {
  std::vector<std::string> parameters;  // in bucket order (backward order)
  int64_t elements = 0;                 // including alignment padding
  int64_t bytes = 0;                    // of the f32 buffer
  std::vector<int64_t> offsets;         // of each parameter's first element in the buffer
  std::vector<Shape> shapes;            // of each parameter
  int64_t shard_elements = 0;           // ZeRO-1: elements of each rank's slice (else 0)
};

struct BucketPlanOptions {
  int64_t bucket_bytes = int64_t{25} << 20;       // 25 MiB
  int64_t first_bucket_bytes = int64_t{1} << 20;  // 1 MiB
  // Every bucket's length is a multiple of this many elements (a positive multiple of
  // kBucketAlignElements).
  int64_t bucket_multiple = kBucketAlignElements;
};

// The buckets for `params` (in backward order), in launch order. shard_elements stays 0: the
// sharded synchronization sets it. Throws on non-positive sizes, a bad multiple or no
// parameters.
std::vector<BucketInfo> plan_buckets(std::span<const BucketPlanEntry> params,
                                     const BucketPlanOptions& options);

}  // namespace stoker::dist
