// GradReducer: data-parallel gradient averaging, overlapped with backward
// (docs/architecture.md#data-parallelism).
//
// Buckets: the parameters that require gradients are taken in REVERSE registration order (the
// order backward produces their gradients) and packed into buckets of about `bucket_bytes`
// (the first one `first_bucket_bytes`, so communication starts early); a parameter is never
// split. Each bucket owns one flat f32 buffer and every parameter's gradient becomes a view into
// it (Parameter::set_grad_storage): backward writes straight into the buffer, nothing is copied.
//
// Overlap: each parameter's grad_ready() hook marks it; when every gradient of a bucket is
// ready, and every earlier bucket has been launched, the bucket is launched: an event recorded
// on the compute stream makes the comm stream wait (no host sync), and the average over ranks
// (all_reduce avg) runs on the comm stream while backward goes on. Buckets are launched in index
// order on every rank whatever order their gradients complete in, so all ranks issue the same
// collectives in the same order. finish() launches what is left and makes the compute stream
// wait for the comm stream; call it after the last backward of a step, before unscaling,
// clipping and the optimizer (the Trainer does).
//
// Gradient accumulation: on micro-steps before the last, set_sync(false) (or a no_sync() scope)
// keeps gradients local — they accumulate in the buckets, nothing is sent. If the last backward
// of a step ran without sync (an epoch ending inside an accumulation group), finish() reduces
// every bucket then.
//
// Compression: with `compression` bf16 or fp16, each bucket is cast to a half buffer, averaged
// in that dtype and cast back (half the bytes on the wire; gradients lose precision — fp16 may
// overflow to Inf, which under fp16 loss scaling counts as an overflow and skips the step).
//
// Unused parameters: a parameter that requires a gradient but did not become ready in a
// synchronized backward is an error at finish() that names it (frozen parameters must have
// requires_grad = false before the reducer is built). With `allow_unused_parameters` its
// gradient is reduced as it stands (zero unless earlier micro-steps wrote it); its bucket then
// waits until finish(), which delays every later bucket.
//
// Consistency: the constructor broadcasts rank 0's parameter values (and, when given a Module,
// its buffers) to every rank. Averaged gradients are bit-identical on all ranks, so clipping,
// the fp16 loss scaler's overflow check (found_inf) and the optimizer take the same decisions
// everywhere without further communication.
//
// ZeRO-1 (`shard_optimizer_state`): the optimizer state is split across ranks. Each bucket is
// padded to a multiple of world_size x 16 elements and REDUCE-SCATTERED (avg) instead of
// all-reduced, so after finish() rank r holds the averaged gradient of slice r of every bucket
// (the rest of the buffer keeps this rank's local gradients: read only the slices, through
// shard_gradients()). The parameters' fp32 values also move into one flat buffer per bucket (as
// views, with the gradients' layout), so an optimizer built over shard_parameters() — one
// Parameter per bucket, the rank's slice of values and gradients — updates contiguous slices
// with the usual multi-tensor kernels and keeps state for 1/world_size of the model;
// gather_parameters() then all-gathers the updated slices so every rank holds every weight.
// dist::ShardedOptimizer (dist/sharded_optimizer.h) packages this; the Trainer makes clipping's
// norm and the fp16 overflow flag global (global_grad_norm(), an all-reduce max of found_inf).
// Accumulation (no_sync) is unchanged: the full local gradients accumulate in the buckets.
// Build the reducer after moving the model (to() re-allocates values and gradients).
//
// Ownership: the communicator and the parameters are borrowed and must outlive the reducer;
// the bucket buffers are shared with the parameters' gradients. The hooks the reducer adds to
// the parameters do nothing once it is destroyed. Not thread-safe (one per rank).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/core/tensor.h"
#include "stoker/dist/communicator.h"
#include "stoker/nn/module.h"
#include "stoker/nn/parameter.h"

namespace stoker::dist {

enum class GradCompression { none, bf16, fp16 };
const char* compression_name(GradCompression c);

struct GradReducerOptions {
  int64_t bucket_bytes = int64_t{25} << 20;       // 25 MiB
  int64_t first_bucket_bytes = int64_t{1} << 20;  // 1 MiB: the first all-reduce starts early
  GradCompression compression = GradCompression::none;
  bool allow_unused_parameters = false;
  bool broadcast_parameters = true;  // copy rank 0's values to every rank at construction
  // ZeRO-1: reduce-scatter the buckets and keep parameter values in flat per-bucket buffers so
  // that a dist::ShardedOptimizer holds optimizer state for this rank's slices only.
  bool shard_optimizer_state = false;
  // Called on each bucket launch with its index (diagnostics and tests).
  std::function<void(int bucket)> on_bucket_launch;
};

// What one bucket holds, for logs and tests.
struct BucketInfo {
  std::vector<std::string> parameters;  // in bucket order (reverse registration order)
  int64_t elements = 0;                 // including alignment padding
  int64_t bytes = 0;                    // of the f32 buffer
  std::vector<int64_t> offsets;         // of each parameter's first element in the buffer
  std::vector<Shape> shapes;            // of each parameter
  int64_t shard_elements = 0;           // ZeRO-1: elements of each rank's slice (else 0)
};

class GradReducer {
 public:
  // All parameters of `model` (named as in weight files); also broadcasts its buffers.
  GradReducer(Communicator& comm, nn::Module& model, GradReducerOptions options = {});
  GradReducer(Communicator& comm, std::vector<std::pair<std::string, nn::Parameter*>> params,
              GradReducerOptions options = {});
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Whether the next backward's gradients are reduced (true) or only accumulated locally.
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  // A scope in which backward passes do not communicate (accumulation micro-steps).
  class NoSync {
   public:
    explicit NoSync(GradReducer& r) : r_(r), previous_(r.sync()) { r_.set_sync(false); }
    ~NoSync() { r_.set_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradReducer& r_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Launches the buckets not launched yet and makes the current stream wait for all of them:
  // afterwards every gradient holds the average over ranks. Resets for the next step (sync on).
  void finish();

  // Copies rank `root`'s parameter values (and buffers, when built from a Module) to every rank.
  void broadcast_parameters(int root = 0);

  Communicator& communicator() const { return comm_; }
  const GradReducerOptions& options() const { return options_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const BucketInfo& bucket(int i) const;
  // Buckets in the order they were launched since the last finish() (or during it).
  const std::vector<int>& launch_order() const { return launch_order_; }
  // Steps completed by finish().
  int64_t steps() const { return steps_; }

  // The parameters that require gradients, named, in registration order.
  std::vector<std::pair<std::string, nn::Parameter*>> parameters() const;

  // ---- ZeRO-1 (options().shard_optimizer_state) ----
  bool shards_optimizer_state() const { return options_.shard_optimizer_state; }
  // One Parameter per bucket, named "zero1.bucket<b>", whose value and gradient are views of this
  // rank's slice of the bucket's value and gradient buffers (owned by the reducer).
  std::vector<std::pair<std::string, nn::Parameter*>> shard_parameters();
  // This rank's gradient slices, one per bucket (averaged over ranks after finish()).
  std::vector<Tensor> shard_gradients() const;
  // The L2 norm of the whole averaged gradient from every rank's slices (`shard_grads`, this
  // rank's): local norms are all-gathered and reduced again; a device scalar, no host sync.
  // A collective: every rank calls it.
  Tensor global_grad_norm(std::span<const Tensor> shard_grads);
  // All-gathers every bucket's value slices so that each rank holds every updated weight, and
  // marks the parameters' half compute copies stale. A collective, on the current stream.
  void gather_parameters();

 private:
  struct Slot {
    std::string name;
    nn::Parameter* param = nullptr;
    int bucket = -1;
    bool ready = false;
  };
  struct Bucket {
    BucketInfo info;
    std::vector<int> slots;
    Tensor buffer;  // f32, the gradients' storage
    Tensor wire;    // bf16/f16 copy sent instead of buffer under compression
    Tensor values;  // ZeRO-1: f32, the parameters' values (same layout as buffer)
    int pending = 0;
    core::Event ready, done;  // compute -> comm, comm -> compute (GPU)
  };

  void build(std::vector<std::pair<std::string, nn::Parameter*>> params);
  void on_ready(int slot);
  void launch_in_order();
  void launch(int b);
  void reset_step();

  Communicator& comm_;
  GradReducerOptions options_;
  nn::Module* model_ = nullptr;
  Device device_;
  std::vector<nn::Parameter*> all_params_;  // frozen ones too (broadcast)
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<int> launch_order_;
  int next_bucket_ = 0;
  bool sync_ = true;
  bool order_stale_ = false;  // launch_order_ still shows the previous step
  int64_t steps_ = 0;
  std::vector<std::unique_ptr<nn::Parameter>> shards_;  // ZeRO-1: per bucket, made on demand
  std::shared_ptr<GradReducer*> self_;  // what the parameter hooks see; nullptr once destroyed
};

}  // namespace stoker::dist
