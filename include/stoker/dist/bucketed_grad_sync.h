// BucketedGradSync: the machinery that ReplicatedGradSync and ShardedGradSync share — gradient
// buckets reduced on the comm stream while backward runs (docs/distributed.md). The two differ
// only in how one bucket is reduced (reduce()) and in what the optimizer then reads.
//
// Buckets (dist/bucket_plan.h): the parameters that require gradients, in backward order
// (reverse registration), packed into buckets of about `bucket_bytes`, the first one
// `first_bucket_bytes`. Each bucket owns one flat f32 buffer and every parameter's gradient
// becomes a view into it (Parameter::set_grad_storage): backward writes straight into the
// buffer, nothing is copied. Frozen parameters (requires_grad = false when the sync is built)
// have no bucket.
//
// Overlap: each parameter's grad_ready() hook marks it; when every gradient of a bucket is
// ready, and every earlier bucket has been launched, the bucket is launched: an event recorded
// on the compute stream makes the comm stream wait (no host sync), and the reduction runs on the
// comm stream while backward goes on. Buckets are launched in index order on every rank whatever
// order their gradients complete in, so all ranks issue the same collectives in the same order.
// finish() launches what is left and makes the compute stream wait for the comm stream.
//
// Accumulation: on micro-steps before the last, set_sync(false) (or a no_sync() scope) keeps
// gradients local — they accumulate in the buckets, nothing is sent. If the last backward of a
// step ran without sync (an epoch ending inside an accumulation group), finish() reduces every
// bucket then.
//
// Compression (dist/grad_compression.h): each bucket travels as the strategy's wire buffer.
//
// Unused parameters: a parameter that requires a gradient but did not become ready in a
// synchronized backward is an error at finish() that names it (frozen parameters must have
// requires_grad = false before the sync is built). With `allow_unused_parameters` its gradient is
// reduced as it stands (zero unless earlier micro-steps wrote it); its bucket then waits until
// finish(), which delays every later bucket.
//
// Consistency: the constructor broadcasts rank 0's parameter values (and, when given a Module,
// its buffers) to every rank. Build the sync after moving the model (to() re-allocates values
// and gradients) and after freezing parameters.
//
// Ownership: the communicator and the parameters are borrowed and must outlive the sync; the
// bucket buffers are shared with the parameters' gradients (and values). The hooks the sync adds
// to the parameters do nothing once it is destroyed. Not thread-safe (one per rank).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/core/tensor.h"
#include "stoker/dist/bucket_plan.h"
#include "stoker/dist/communicator.h"
#include "stoker/dist/grad_compression.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/module.h"
#include "stoker/nn/parameter.h"

namespace stoker::dist {

struct GradSyncOptions {
  int64_t bucket_bytes = int64_t{25} << 20;       // 25 MiB
  int64_t first_bucket_bytes = int64_t{1} << 20;  // 1 MiB: the first reduction starts early
  // What travels on the wire: compression::none() (f32), bf16() or fp16().
  std::shared_ptr<const GradCompression> compression = compression::none();
  bool allow_unused_parameters = false;
  bool broadcast_parameters = true;  // copy rank 0's values to every rank at construction
};

class BucketedGradSync : public GradSync {
 public:
  ~BucketedGradSync() override;

  Communicator* communicator() const override { return &comm_; }
  const GradSyncOptions& options() const { return options_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const BucketInfo& bucket(int i) const;

  void broadcast_parameters(int root = 0) override;
  std::vector<std::pair<std::string, nn::Parameter*>> parameters() const override;

 protected:
  // What the implementations see of a bucket.
  struct Bucket {
    BucketInfo info;
    Tensor grads;   // f32, the gradients' storage
    Tensor wire;    // what travels: grads itself, or its compressed copy
    Tensor values;  // with values_in_buckets: f32, the parameters' values (same layout)
  };
  struct BucketLayout {
    // Every bucket's length is a multiple of this (plan_buckets' bucket_multiple).
    int64_t bucket_multiple = kBucketAlignElements;
    // The parameters' values move into flat per-bucket buffers too (ZeRO-1's slices).
    bool values_in_buckets = false;
  };

  // `kind` names the implementation in errors ("ReplicatedGradSync"); `model` (may be null)
  // adds its buffers to broadcast_parameters().
  BucketedGradSync(const char* kind, Communicator& comm, nn::Module* model,
                   std::vector<std::pair<std::string, nn::Parameter*>> params,
                   GradSyncOptions options, BucketLayout layout);

  // Reduces bucket `b` across the ranks, on the comm stream (current while it runs), after its
  // gradients were written.
  virtual void reduce(const Bucket& b) = 0;

  void finish_step() override;

  const std::vector<Bucket>& buckets() const { return buckets_; }
  BucketInfo& mutable_info(int i) { return buckets_[static_cast<size_t>(i)].info; }
  const GradCompression& compression() const { return *options_.compression; }
  Communicator& comm() const { return comm_; }
  // "all-reduce of 3 buckets (25.00 MiB), bf16 on the wire", for describe().
  std::string describe_buckets(const std::string& collective) const;

 private:
  friend class GradSyncProbe;  // src/dist/grad_sync_probe.h: tests watch the launches

  struct Slot {
    std::string name;
    nn::Parameter* param = nullptr;
    int bucket = -1;
    bool ready = false;
  };
  // A bucket's progress through one step.
  struct Progress {
    std::vector<int> slots;
    int pending = 0;
    core::Event ready, done;  // compute -> comm, comm -> compute (GPU)
  };

  void build(std::vector<std::pair<std::string, nn::Parameter*>> params, BucketLayout layout);
  void broadcast_from(int root);
  void on_ready(int slot);
  void launch_in_order();
  void launch(int b);
  void reset_step();

  const char* kind_;
  Communicator& comm_;
  GradSyncOptions options_;
  nn::Module* model_ = nullptr;
  Device device_;
  std::vector<nn::Parameter*> all_params_;  // frozen ones too (broadcast)
  std::vector<Slot> slots_;                 // backward order
  std::vector<Bucket> buckets_;
  std::vector<Progress> progress_;  // one per bucket
  int next_bucket_ = 0;
  std::shared_ptr<BucketedGradSync*> self_;  // what the parameter hooks see; nullptr once gone

  // Watched by tests (GradSyncProbe).
  std::vector<int> launch_order_;  // since the last finish() (or during it)
  bool order_stale_ = false;       // launch_order_ still shows the previous step
  int64_t steps_ = 0;              // completed by finish()
  std::function<void(int bucket)> on_bucket_launch_;
};

}  // namespace stoker::dist
