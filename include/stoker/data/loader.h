// Loader: batches of decoded, augmented, normalized images from an LMDB dataset, prepared ahead
// of the training step by persistent worker threads (crop-before-decode, pinned slots, the H2D
// copy on the copy stream, one normalize kernel in next()), across epoch boundaries, with
// autotuned threads and depth. The same seed gives the same batches bit for bit; a bad sample
// fails next() or is skipped (on_corrupt); no wait is unbounded (stall_timeout_s).
// Ownership: borrows the dataset (it must outlive the Loader); owns its slots. Not copyable.
// Thread-safety: one consumer thread calls next/start_epoch/restore; counters(), tuning() and
// summary() may be called from any thread.
// Details: docs/data_loader.md#threads-depth-and-autotuning.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/data/batch_source.h"
#include "stoker/data/decode.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/sampler.h"
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
