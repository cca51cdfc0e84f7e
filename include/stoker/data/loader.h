// Loader: batches of decoded, augmented, normalized images from an LMDB dataset, prepared ahead
// of the training step by a pool of threads (docs/architecture.md#data-loading).
//
//   opener thread ── takes a free pinned slot, gives it the next batch position (epoch, batch)
//     and that batch's sample indices ─► open batches (in position order)
//   N worker threads ── pull single samples from the oldest open batch: LMDB read → crop-before-
//     decode → resize → flip → u8 HWC written straight into its row of the slot; the worker that
//     finishes a batch's last sample enqueues the host-to-device copy on the copy stream (GPU)
//   next(): waits for the oldest batch, makes the current stream wait on its copy event,
//     normalizes u8 → dtype/layout on the device (one kernel) and hands the slot back; the
//     slot's next H2D copy waits for that kernel on the device (an event, no host wait).
//
// Why plain threads and a sample queue rather than one oneTBB parallel_for per batch: workers
// move on to the next open batch while a batch's last samples finish (no per-batch barrier),
// the number of active workers can change between samples (the autotuner below), they persist
// for the Loader's life (across epochs), and ThreadSanitizer sees every synchronization (the
// data tests run under it).
//
// Epoch boundaries overlap: the order of epoch e+1 is known in advance (Sampler), so after the
// last batch of epoch e the opener carries on with batches 0, 1, ... of epoch e+1 while the
// consumer finishes epoch e. start_epoch(e+1) keeps those batches; any other start_epoch/
// restore position drops what does not belong to it. A loader whose batches do not depend on
// the epoch (no shuffle, eval transform) keeps them whatever epoch is started, so an evaluation
// loader re-run every epoch starts warm too. Set prefetch_next_epoch = false to stop at epoch
// ends (then at most `prefetch` batches of work are never wasted when training stops).
//
// Autotuning (threads = 0 and/or prefetch = 0): the loader starts with max_threads workers
// (default: all hardware threads) and a depth of kAutoPrefetchStart batches, then after each
// measurement window (kTuneWindowBatches consumed batches and at least kTuneWindowSeconds)
// applies autotune_policy() below to what it measured: the consumer's demand (samples per
// second of its own time, waits excluded) against the workers' cost (thread-seconds per sample).
// Workers beyond the chosen count sleep; the depth grows only within the pinned-memory budget.
// The chosen values are in tuning() and summary(), and on stderr when `verbose`.
//
// Elastic resume: epoch_progress() and continue_epoch() are the Sampler's (data/sampler.h): a
// continued epoch's batches are the epoch's last batch indices, the next epoch a plain one, so
// the overlap above carries on across a continued epoch's end. A continuation is kept with the
// position under the lock and handed to the opener's plan with each batch it opens; batches
// prepared under another plan of their epoch are dropped, never delivered.
//
// Determinism: the sample order is the Sampler's (seed, epoch, rank) permutation and the
// augmentation of sample i in epoch e is a pure function of (seed, e, i): the same seed gives
// the same batches bit for bit, whatever the thread count, depth, autotuning or overlap.
// Robustness: a bad sample (a malformed record, a payload checksum mismatch, a JPEG that does not
// decode) either fails next() with an error naming its key and the reason and a hint naming the
// skip policy (policy fail), or is replaced by the next valid sample so the batch stays full
// (policy skip): counted once per epoch in counters().skipped, the first
// kLoggedSkipsPerEpoch (5) of an epoch named with their reasons on stderr, then one line with
// the rest's count at the epoch's end (prefixed with the rank when world_size > 1). No wait is
// unbounded: no batch for stall_timeout_s makes next() throw. The destructor stops the threads
// (it waits only for the samples being decoded).
//
// Options are checked at construction (each error names the LoaderOptions field): batch_size
// >= 1, prefetch >= 0, threads and max_threads in [0, dataset.reader_slots()] (every decode
// thread holds an LMDB reader slot; the autotuner's default bound is min(hardware threads,
// reader slots)).
//
// Ownership: the dataset is borrowed and must outlive the Loader; slots (pinned host and device
// buffers) are the Loader's. Thread-safety: one consumer thread calls next/start_epoch/restore;
// counters(), tuning() and summary() may be called from any thread. Not copyable.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/data/batch_source.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/sampler.h"
#include "stoker/data/decode.h"
#include "stoker/ops/layout.h"

namespace stoker::data {

struct LoaderOptions {
  int64_t batch_size = 256;
  int threads = 0;   // decode threads; 0 = autotuned (up to max_threads)
  int prefetch = 0;  // batches prepared ahead of the consumer; 0 = autotuned
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
  // Keep preparing batches of the next epoch when an epoch's last batch is made.
  bool prefetch_next_epoch = true;
  // Autotuning bounds: most worker threads (0 = hardware threads) and most pinned bytes for the
  // prefetched batches (the depth never exceeds budget / batch bytes, nor kMaxPrefetch).
  int max_threads = 0;
  int64_t pinned_budget_bytes = int64_t{1} << 30;
  bool verbose = false;  // one stderr line whenever the autotuner changes threads or depth
};

class Loader : public BatchSource, public InputPipeline {
 public:
  static constexpr int kAutoPrefetchStart = 4;
  static constexpr int kMaxPrefetch = 32;
  static constexpr int64_t kTuneWindowBatches = 8;
  static constexpr double kTuneWindowSeconds = 0.5;
  static constexpr double kWaitHigh = 0.02;
  static constexpr double kWaitLow = 0.005;
  static constexpr double kHeadroom = 1.25;
  static constexpr double kFasterMargin = 1.1;
  // Policy skip: bad samples named on stderr per epoch (then one line with the rest's count).
  static constexpr int kLoggedSkipsPerEpoch = 5;

  Loader(const LmdbImageDataset& dataset, LoaderOptions options);
  ~Loader() override;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  void start_epoch(int64_t epoch) override;
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override;
  int64_t epoch() const override;
  int64_t batch_index() const override;
  void restore(int64_t epoch, int64_t batch_index) override;
  int64_t epoch_progress() const override;
  bool continue_epoch(int64_t epoch, int64_t progress) override;
  // The batch size, the seed (when shuffling or augmenting), the dataset's samples and a
  // fingerprint of its content (sample and class counts, XXH3-64 of the class names and of the
  // first and last records), not its path: a moved database still matches. Computed once at
  // construction, before the workers start (it needs a read transaction, hence a reader slot,
  // which a checkpoint taken mid-epoch could not get when every slot is busy).
  SourceIdentity identity() const override;

  std::string kind() const override { return "Loader"; }
  const InputPipeline* pipeline() const override { return this; }

  // InputPipeline (data/input_pipeline.h).
  LoaderCounters counters() const override;
  LoaderTuning tuning() const override;
  int max_threads() const override;
  bool threads_fixed() const override;
  int64_t ready_batches() const override;
  int output_size() const override;
  std::string summary() const override;
  int threads() const { return tuning().threads; }  // tuning().threads
  const LoaderOptions& options() const;

 private:
  struct Impl;  // loader.cpp: the slots, the opener and worker threads, the autotuner's state
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::data
