// BatchSource: what the Trainer pulls batches from, one epoch at a time.
//
// The LMDB/JPEG data loader and the in-memory TensorBatches implement it. A source is
// deterministic given its seed: the order of epoch e is a pure function of (seed, e), and
// `position()`/`restore()` capture where it stands, so a resumed run sees the same batches.
// `identity()` says what it delivers (batch size, seed, the data), so that a training
// checkpoint can refuse to resume into a run that reads other data or reads it differently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "stoker/core/tensor.h"

namespace stoker::data {

class InputPipeline;

// What a source does with a sample it cannot make (a damaged record, a token out of the
// vocabulary): fail stops with an error naming it; skip replaces it and counts it.
enum class CorruptPolicy { fail, skip };

struct Batch {
  Tensor input;   // on the source's device
  Tensor target;  // on the source's device
  int64_t size = 0;
  // Token sources with document masks only (SequenceBatches): each input token's position in
  // its document and its document's index, [B, T]; undefined otherwise.
  Tensor positions;
  Tensor documents;
};

// What a source delivers, as a training checkpoint records it (Trainer::save_checkpoint) and
// the next fit() after a resume compares it. A field left at its default is unknown and is not
// compared. The job's world size is the Trainer's to record (its gradient sync's world size).
struct SourceIdentity {
  int64_t batch_size = -1;       // samples per batch on this rank
  std::optional<uint64_t> seed;  // the seed of the order and augmentation; none: not used
  int64_t samples = -1;          // samples of the whole dataset (every rank's)
  // The data by content, not by location: counts, shapes and a checksum of (part of) the bytes.
  // A dataset moved or copied elsewhere keeps its fingerprint; other data does not.
  std::string fingerprint;
  std::string location;  // where the data is (a path), for messages; never compared
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Begins epoch `epoch` (0-based): reshuffles, rewinds.
  virtual void start_epoch(int64_t epoch) = 0;
  // The next batch of the epoch; false when the epoch is over.
  virtual bool next(Batch& batch) = 0;
  // Batches per epoch, or -1 when unknown (streams).
  virtual int64_t batches_per_epoch() const = 0;
  // Samples per epoch, or -1 when unknown.
  virtual int64_t samples_per_epoch() const = 0;
  // (epoch, batches already delivered in it), for checkpoints.
  virtual int64_t epoch() const = 0;
  virtual int64_t batch_index() const = 0;
  // Continues from a saved position: start_epoch(epoch), then skips `batch_index` batches
  // without producing them.
  virtual void restore(int64_t epoch, int64_t batch_index) = 0;
  // World-size-independent position in the current epoch (elastic resume): how many entries of
  // the epoch's global order the whole job has consumed (every rank's batches together). -1: this
  // source cannot say (it cannot continue an epoch at another world size).
  virtual int64_t epoch_progress() const { return -1; }
  // Continues epoch `epoch` at `progress` (an epoch_progress() of a run of any world size): this
  // rank delivers its share of what that run had not consumed; afterwards batch_index() and
  // epoch_progress() continue from there. Returns false when the source cannot (the default).
  //
  // The continued epoch keeps batches_per_epoch(): its batches are the epoch's last batch
  // indices, so batch_index() jumps to batches_per_epoch() minus the batches left (== it when
  // nothing is left) and positions stay (epoch, batch index). A later start_epoch(), restore()
  // or continue_epoch() replaces the continuation; every other epoch is a plain one of this
  // source's world size. At the world size that reported `progress`, continuing delivers exactly
  // the batches that run had left (an exact resume; for a plain epoch, what restore() of its
  // position delivers).
  virtual bool continue_epoch(int64_t epoch, int64_t progress) {
    (void)epoch;
    (void)progress;
    return false;
  }
  // What this source delivers (default: nothing known, nothing checked).
  virtual SourceIdentity identity() const { return {}; }
  // What kind of source it is, for reports ("Loader", "TensorBatches", ...).
  virtual std::string kind() const { return "BatchSource"; }
  // Its worker pipeline's counters and tuning (data/input_pipeline.h), for diagnostics; nullptr
  // for a source without one.
  virtual const InputPipeline* pipeline() const { return nullptr; }
};

}  // namespace stoker::data

// InputPipeline: what a data source with worker threads reports of itself — cumulative counters
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
