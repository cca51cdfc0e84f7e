// Loader: batches of decoded, augmented, normalized images from an LMDB dataset, prepared ahead
// of the training step by a pool of threads (DESIGN.md §6).
//
//   producer thread ── for each batch: oneTBB parallel_for (N threads, one JpegDecoder and one
//   LMDB reader per thread) ── read record → crop-before-decode → resize → flip → u8 HWC
//   written straight into its row of a pinned slot ── (GPU) cudaMemcpyAsync on the copy stream
//   + event ── ready queue
//   next(): waits for the batch in order, makes the current stream wait on the copy event,
//   normalizes u8 → dtype/layout on the device (one kernel), and recycles the slot once that
//   kernel has run (an event, never a host wait on the consumer's side).
//
// Determinism: the sample order is the Sampler's (seed, epoch, rank) permutation and the
// augmentation of sample i in epoch e is a pure function of (seed, e, i): the same seed gives
// the same batches bit for bit, whatever the thread count or scheduling.
// Robustness: a bad sample either fails next() with an error naming its key and the reason
// (policy fail) or is replaced by the next valid sample so the batch stays full (policy skip;
// counted in counters().skipped). No wait is unbounded: a producer that makes no progress for
// stall_timeout_s makes next() throw. The destructor stops the threads (it waits only for the
// batch being decoded).
//
// Thread-safety: one consumer thread calls next(); the Loader is not copyable.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "stoker/core/stream.h"
#include "stoker/data/batch_source.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/sampler.h"
#include "stoker/data/transform.h"
#include "stoker/ops/layout.h"

namespace stoker::data {

enum class CorruptPolicy { fail, skip };

struct LoaderOptions {
  int64_t batch_size = 256;
  int threads = 0;   // decode threads; 0 = all hardware threads
  int prefetch = 3;  // batches prepared ahead of the consumer
  TransformOptions transform;
  // Order and sharding (DistributedSampler semantics); drop_last keeps every batch full.
  bool shuffle = true;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  bool drop_last = true;
  // Output.
  Device device = Device::cpu();
  DType dtype = DType::f32;
  ops::Layout layout = ops::Layout::nchw;
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};  // ImageNet, on the [0, 1] scale
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  CorruptPolicy on_corrupt = CorruptPolicy::fail;
  double stall_timeout_s = 300.0;
};

// Cumulative counters since construction.
struct LoaderCounters {
  double decode_s = 0;         // read + decode + resize + flip, summed over the decode threads
  double copy_s = 0;           // host time to enqueue the host-to-device copies (GPU loaders)
  double consumer_wait_s = 0;  // time next() waited for a batch: the input-bound share
  int64_t batches = 0, samples = 0;
  int64_t skipped = 0;  // bad samples replaced under CorruptPolicy::skip
};

class Loader : public BatchSource {
 public:
  Loader(const LmdbImageDataset& dataset, LoaderOptions options);
  ~Loader() override;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  void start_epoch(int64_t epoch) override;
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override { return sampler_.num_batches(); }
  int64_t samples_per_epoch() const override;
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return consumed_; }
  void restore(int64_t epoch, int64_t batch_index) override;

  LoaderCounters counters() const;
  int threads() const { return threads_; }
  const LoaderOptions& options() const { return options_; }

 private:
  struct Slot;
  struct Workers;
  void produce();
  void fill(Slot& slot, int64_t batch, int64_t epoch);
  void reset_queue(int64_t epoch, int64_t first_batch);

  const LmdbImageDataset& dataset_;
  LoaderOptions options_;
  Sampler sampler_;
  int threads_;
  std::unique_ptr<Workers> workers_;
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Slot*> free_, ready_;
  int64_t generation_ = 0;  // bumped by start_epoch/restore: stale batches are dropped
  int64_t epoch_ = -1, next_to_fill_ = 0, consumed_ = 0;
  Slot* held_ = nullptr;  // the slot of the batch last returned (recycled at the next call)
  bool stop_ = false;
  std::thread producer_;

  LoaderCounters counters_;
  std::atomic<int64_t> skipped_{0};
};

}  // namespace stoker::data
