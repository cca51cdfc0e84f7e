// GradSync: how a step's gradients become the ones the optimizer applies — the only thing the
// Trainer calls about data parallelism: LocalGradSync (one process), ReplicatedGradSync
// (bucketed all-reduce overlapped with backward) and ShardedGradSync (ZeRO-1 reduce-scatter).
// A step: set_sync(false) on all micro-steps but the last, backward, finish(), then
// step_gradients() (unscale, agree_on_overflow(), clip with total_norm()), then the optimizer.
// Ownership: borrows the parameters and the communicator. Not thread-safe (one per rank).
// Details: docs/distributed.md#gradient-synchronization.
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

namespace stoker::optim {
class Optimizer;
}  // namespace stoker::optim

namespace stoker::dist {

class GradSync {
 public:
  virtual ~GradSync() = default;
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // "local", "replicated over 4 ranks: all-reduce of 3 buckets (25.00 MiB), bf16 on the wire",
  // "sharded (ZeRO-1) over 4 ranks: ...".
  virtual std::string describe() const = 0;

  // The group the gradients are averaged over; nullptr for a single process.
  virtual Communicator* communicator() const = 0;
  // This process's rank and the number of ranks (0 and 1 without a communicator).
  int rank() const;
  int world_size() const;

  // Whether the next backward's gradients are synchronized (true) or only accumulated locally
  // (accumulation micro-steps). finish() turns it back on.
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  // A scope in which backward passes do not communicate.
  class NoSync {
   public:
    explicit NoSync(GradSync& s) : s_(s), previous_(s.sync()) { s_.set_sync(false); }
    ~NoSync() { s_.set_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradSync& s_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // After the last backward of a step: completes the synchronization (the current stream waits
  // for it on the device, no host sync), so that step_gradients() are ready for the optimizer.
  // Resets for the next step (sync on), also when it throws.
  void finish();

  // The gradients this rank unscales, clips and takes the norm of before the optimizer step:
  // every requires_grad parameter's gradient in registration order (local, replicated), or this
  // rank's slice of each bucket (sharded). Views, not copies.
  virtual std::vector<Tensor> step_gradients() const = 0;
  // The L2 norm of the whole gradient given this rank's step_gradients(): a device scalar, no
  // host sync. A collective when sharded (every rank calls it).
  virtual Tensor total_norm(std::span<const Tensor> grads) = 0;
  // Makes the fp16 scaler's overflow flag (a device f32 scalar) the same on every rank before the
  // optimizer reads it: a collective when sharded (max over the ranks), nothing otherwise (the
  // gradients, and so the flags, are already identical everywhere).
  virtual void agree_on_overflow(const Tensor& found_inf) {}

  // Throws, with a hint, when `optimizer` cannot apply this synchronization's gradients: a
  // dist::ShardedOptimizer needs the ShardedGradSync it was built over, and that one needs it.
  virtual void check_optimizer(const optim::Optimizer& optimizer) const;

  // Copies rank `root`'s parameter values (and the model's buffers, when built from a Module)
  // to every rank. Nothing for a single process.
  virtual void broadcast_parameters(int root = 0) = 0;

  // The parameters that require gradients, named, in registration order.
  virtual std::vector<std::pair<std::string, nn::Parameter*>> parameters() const = 0;

 protected:
  GradSync() = default;
  // finish() without the reset of sync().
  virtual void finish_step() = 0;

 private:
  bool sync_ = true;
};

}  // namespace stoker::dist

// Gradient compression: what travels on the wire when a bucketed gradient synchronization
namespace stoker::dist {

class GradCompression {
 public:
  virtual ~GradCompression() = default;

  // "none", "bf16", "fp16": what parse_compression() reads and logs print.
  virtual std::string name() const = 0;
  // The dtype that travels (f32 for none).
  virtual DType wire_dtype() const = 0;
  // The buffer that travels for the f32 bucket `grads`: `grads` itself, or a new buffer of
  // wire_dtype() with as many elements, made once per bucket.
  virtual Tensor make_wire(const Tensor& grads) const = 0;
  // wire = grads (f32 -> wire dtype), on the current stream; a no-op when wire is grads.
  virtual void encode(const Tensor& grads, const Tensor& wire) const = 0;
  // grads = wire (wire dtype -> f32), on the current stream; a no-op when wire is grads. Both may
  // be matching slices of the buffers make_wire() paired (ZeRO-1 decodes its slice only).
  virtual void decode(const Tensor& wire, const Tensor& grads) const = 0;
};

namespace compression {
std::shared_ptr<const GradCompression> none();
std::shared_ptr<const GradCompression> bf16();
std::shared_ptr<const GradCompression> fp16();
}  // namespace compression

// "none", "bf16" or "fp16" (command-line flags); anything else throws naming the value and the
// choices.
std::shared_ptr<const GradCompression> parse_compression(const std::string& name);

}  // namespace stoker::dist

// Gradient buckets: how the parameters of a bucketed gradient synchronization
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

// BucketedGradSync: the machinery that ReplicatedGradSync and ShardedGradSync share — gradient
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

// ReplicatedGradSync: data-parallel gradient averaging, overlapped with backward
namespace stoker::dist {

class ReplicatedGradSync final : public BucketedGradSync {
 public:
  // All parameters of `model` (named as in weight files); also broadcasts its buffers.
  ReplicatedGradSync(Communicator& comm, nn::Module& model, GradSyncOptions options = {});
  ReplicatedGradSync(Communicator& comm, std::vector<std::pair<std::string, nn::Parameter*>> params,
                     GradSyncOptions options = {});

  std::string describe() const override;
  std::vector<Tensor> step_gradients() const override;
  Tensor total_norm(std::span<const Tensor> grads) override;

 protected:
  void reduce(const Bucket& b) override;
};

}  // namespace stoker::dist

// ShardedGradSync: ZeRO-1's gradient synchronization — the optimizer state is split across
namespace stoker::dist {

class ShardedGradSync final : public BucketedGradSync {
 public:
  // All parameters of `model` (named as in weight files); also broadcasts its buffers.
  ShardedGradSync(Communicator& comm, nn::Module& model, GradSyncOptions options = {});
  ShardedGradSync(Communicator& comm, std::vector<std::pair<std::string, nn::Parameter*>> params,
                  GradSyncOptions options = {});

  std::string describe() const override;
  // This rank's gradient slices, one per bucket (averaged over ranks after finish()).
  std::vector<Tensor> step_gradients() const override;
  // sqrt(sum over ranks of local_norm^2); a collective: every rank calls it.
  Tensor total_norm(std::span<const Tensor> grads) override;
  // found_inf = max over ranks (an Inf lands in one rank's slice only); a collective.
  void agree_on_overflow(const Tensor& found_inf) override;
  // Accepts only a dist::ShardedOptimizer built over this sync.
  void check_optimizer(const optim::Optimizer& optimizer) const override;

  // One Parameter per bucket, named "zero1.bucket<b>", whose value and gradient are views of this
  // rank's slice of the bucket's value and gradient buffers (owned by the sync).
  std::vector<std::pair<std::string, nn::Parameter*>> shard_parameters();
  // All-gathers every bucket's value slices so that each rank holds every updated weight, and
  // marks the parameters' half compute copies stale. A collective, on the current stream.
  void gather_parameters();

 protected:
  void reduce(const Bucket& b) override;

 private:
  static BucketLayout sharded_layout(const Communicator& comm);
  void set_shard_sizes();

  std::vector<std::unique_ptr<nn::Parameter>> shards_;  // per bucket, made on demand
};

}  // namespace stoker::dist
