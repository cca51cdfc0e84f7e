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
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/data/batch_source.h"
#include "stoker/data/input_pipeline.h"
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
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  int64_t samples_per_epoch() const override;
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override;
  void restore(int64_t epoch, int64_t batch_index) override;
  int64_t epoch_progress() const override;
  bool continue_epoch(int64_t epoch, int64_t progress) override;
  // The batch size, the seed (when shuffling or augmenting), the dataset's samples and a
  // fingerprint of its content (sample and class counts, XXH3-64 of the class names and of the
  // first and last records), not its path: a moved database still matches. Computed once at
  // construction, before the workers start (it needs a read transaction, hence a reader slot,
  // which a checkpoint taken mid-epoch could not get when every slot is busy).
  SourceIdentity identity() const override { return identity_; }

  std::string kind() const override { return "Loader"; }
  const InputPipeline* pipeline() const override { return this; }

  // InputPipeline (data/input_pipeline.h).
  LoaderCounters counters() const override;
  LoaderTuning tuning() const override;
  int max_threads() const override { return max_threads_; }
  bool threads_fixed() const override { return options_.threads > 0; }
  int64_t ready_batches() const override;
  int output_size() const override { return options_.transform.output_size; }
  std::string summary() const override;
  int threads() const { return tuning().threads; }  // tuning().threads
  const LoaderOptions& options() const { return options_; }

 private:
  struct Slot;
  struct WorkerState;
  void worker_loop(int id);
  void opener_loop();
  void process_sample(Slot& slot, int64_t i, WorkerState& st);
  void finish_batch(Slot& slot);
  // Moves the consumer to (epoch, first_batch) with the continuation (continued_epoch,
  // continued_progress) (-1: none) as the plan.
  void reset_position(int64_t epoch, int64_t first_batch, int64_t continued_epoch,
                      int64_t continued_progress);
  void cancel_locked(Slot* slot);
  void release_if_idle_locked(Slot* slot);
  Slot* find_work_locked() const;
  bool can_open_locked() const;
  void tune_locked(int64_t delivered);
  void count_skipped_locked(const Slot& slot);
  std::unique_ptr<Slot> make_slot() const;
  std::string summary_locked() const;
  SourceIdentity compute_identity() const;

  const LmdbImageDataset& dataset_;
  LoaderOptions options_;
  SourceIdentity identity_;
  int64_t batches_per_epoch_ = 0;
  int64_t samples_per_rank_ = 0;
  size_t batch_bytes_ = 0;        // pinned bytes of one slot
  Sampler plan_;                  // the opener's: indices of the epoch it is preparing
  bool epoch_invariant_ = false;  // batches do not depend on the epoch (no shuffle, eval)
  int max_threads_ = 1;
  int max_prefetch_ = 1;
  AutotuneLimits limits_;

  mutable std::mutex mu_;
  std::condition_variable consumer_cv_, worker_cv_, opener_cv_;
  std::vector<std::unique_ptr<Slot>> slots_;  // every slot ever allocated (grows, never shrinks)
  std::deque<Slot*> free_;
  std::deque<Slot*> outstanding_;  // opened, not yet delivered batches, in position order
  bool started_ = false;           // a start_epoch/restore happened
  int64_t epoch_ = -1;
  int64_t consumer_pos_ = 0;  // position (epoch * batches_per_epoch + batch) next() delivers
  int64_t epoch_end_pos_ = 0;
  int64_t resets_ = 0;        // start_epoch/restore calls: batches opened before are "early"
  int64_t next_to_fill_ = 0;  // position the opener gives the next slot
  // The continuation in force (continue_epoch): its epoch (-1: none) and progress. The opener
  // copies it with each slot it opens and brings plan_ to it outside the lock.
  int64_t continued_epoch_ = -1;
  int64_t continued_progress_ = 0;
  LoaderTuning tuning_;
  std::atomic<bool> stop_{false};
  std::string fatal_error_;  // an error outside any batch (e.g. a failed allocation)
  // Policy skip: per epoch (the consumer's and later ones), the bad samples met so far.
  std::map<int64_t, std::set<int64_t>> bad_seen_;

  // Autotuner state (consumer side, under mu_).
  bool window_open_ = false;
  std::chrono::steady_clock::time_point window_start_;
  LoaderWindow window_;
  double window_worker_s0_ = 0;
  int64_t window_made0_ = 0;
  int64_t tune_windows_ = 0, tune_changes_ = 0;
  std::string last_decision_;

  LoaderCounters counters_;
  std::vector<std::thread> workers_;
  std::thread opener_;
};

}  // namespace stoker::data
