// InputPipeline: what a data source with worker threads reports of itself — cumulative counters
// (stage times, samples, waits, skips), the autotuner's current choice and a one-line summary —
// so that diagnostics and logs read any such source through BatchSource::pipeline(), not by
// knowing its class. data::Loader is one.
//
// Thread-safety: every method may be called from the training thread while the workers run.
#pragma once

#include <cstdint>
#include <string>

namespace stoker::data {

// Cumulative counters since construction. Stage times are summed over the worker threads
// (thread-seconds): divided by the samples they are each sample's cost on one core.
struct LoaderCounters {
  double read_s = 0;         // LMDB lookups (the value bytes are faulted in later, during decode)
  double header_s = 0;       // JPEG header parsing (twice per sample: crop draw, then decode)
  double decode_s = 0;       // entropy decode + IDCT + colour conversion of the crop window
  double resize_s = 0;       // resize + flip into the pinned slot
  double worker_s = 0;       // all of a sample's work (the above + augmentation draws, bookkeeping)
  double copy_s = 0;         // host time to enqueue the host-to-device copies (GPU loaders)
  double copy_device_s = 0;  // device time of those copies, from timing events (GPU loaders)
  double slot_wait_s = 0;    // time the opener waited for a slot's previous copy to finish
  double normalize_s = 0;    // consumer host time in normalization (CPU) or its launch (GPU)
  double consumer_wait_s = 0;        // time next() waited for a batch: the input-bound share
  int64_t batches = 0, samples = 0;  // delivered by next()
  int64_t samples_decoded = 0;       // finished by the workers (includes discarded batches)
  // Bad samples replaced under CorruptPolicy::skip in delivered batches: each counts once per
  // epoch (however many replacement walks meet it), so an epoch adds the bad samples it met.
  int64_t skipped = 0;
  int64_t early_batches = 0;      // delivered batches prepared before their start_epoch (overlap)
  int64_t discarded_batches = 0;  // prepared but dropped by a start_epoch/restore elsewhere
};

// What the autotuner chose (or what the user fixed).
struct LoaderTuning {
  int threads = 0;   // active worker threads
  int prefetch = 0;  // batches prepared ahead
};

class InputPipeline {
 public:
  virtual ~InputPipeline() = default;
  virtual LoaderCounters counters() const = 0;
  // Current worker count and depth (autotuned or fixed).
  virtual LoaderTuning tuning() const = 0;
  // Worker threads started (the autotuner's upper bound), and whether the user fixed the count.
  virtual int max_threads() const = 0;
  virtual bool threads_fixed() const = 0;
  // Batches finished and waiting right now.
  virtual int64_t ready_batches() const = 0;
  // The side of the images it makes (0: not an image pipeline), for advice on resolution.
  virtual int output_size() const = 0;
  // One line: threads/depth (auto or fixed), tuning windows and changes, the last decision.
  virtual std::string summary() const = 0;
};

}  // namespace stoker::data
