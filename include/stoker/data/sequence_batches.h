// SequenceBatches: language-model batches from one or several TokenSequences (a mixture), each
// sequence of an epoch delivered once, in a global order fixed by the seed alone (a smooth
// weighted round-robin over the sources); ranks take consecutive slices of it, so batches are the
// same for any world size, thread count or accumulation, and an epoch continues elastically at
// another world size. Batch: input [B, T], target [B * T], optional positions and documents.
// Ownership: borrows the TokenSequences (they must outlive it); a delivered batch is the caller's.
// Thread-safety: one consumer thread calls every method; the workers are internal.
// Details: docs/data_loader.md#token-data-sequences-epochs-mixtures.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stoker/core/device.h"
#include "stoker/core/stream.h"
#include "stoker/data/batch_source.h"
#include "stoker/data/sampler.h"
#include "stoker/data/token_sequences.h"

namespace stoker::data {

struct SequenceSource {
  const TokenSequences* sequences = nullptr;
  double weight = 1;  // > 0; normalized over the sources
  std::string name;   // for messages and reports (default: the corpus's name)
};

struct SequenceBatchesOptions {
  int64_t batch_size = 8;           // B: sequences per batch on this rank
  int64_t sequences_per_epoch = 0;  // M; 0: the sum of the sources' sequences
  uint64_t seed = 0;
  bool shuffle = true;
  ShardTail tail = ShardTail::pad;
  DType dtype = DType::i64;     // i64 or i32
  bool document_masks = false;  // also deliver positions and documents
  Device device = Device::cpu();
  int rank = 0;
  int world_size = 1;
  int threads = 2;   // worker threads (0: assemble in next())
  int prefetch = 4;  // batches prepared ahead (threads > 0)
};

// Where a source stands: sequences taken since the stream began and the source epochs that is.
struct SourceProgress {
  std::string name;
  double weight = 0;      // normalized
  int64_t sequences = 0;  // N_s
  int64_t taken = 0;      // c_s at the current position
  double epochs() const { return sequences > 0 ? static_cast<double>(taken) / sequences : 0; }
};

class SequenceBatches : public BatchSource {
 public:
  SequenceBatches(std::vector<SequenceSource> sources, SequenceBatchesOptions options);
  ~SequenceBatches() override;
  SequenceBatches(const SequenceBatches&) = delete;
  SequenceBatches& operator=(const SequenceBatches&) = delete;

  void start_epoch(int64_t epoch) override;
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override { return batches_; }
  int64_t samples_per_epoch() const override { return batches_ * options_.batch_size; }
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return batch_; }
  void restore(int64_t epoch, int64_t batch_index) override;
  int64_t epoch_progress() const override;
  bool continue_epoch(int64_t epoch, int64_t progress) override;
  SourceIdentity identity() const override;
  std::string kind() const override { return "SequenceBatches"; }

  // The stream's slot g: its source and that source's sequence index.
  struct Slot {
    int source = 0;
    int64_t sequence = 0;
  };
  Slot slot(int64_t g) const;
  // The global slots (e M + i, padding wrapped) of batch b of `epoch` on this rank, as next()
  // would deliver them under the current continuation (tests, evaluation).
  std::vector<int64_t> batch_slots(int64_t epoch, int64_t b) const;
  int64_t sequences_per_epoch() const { return m_; }
  int num_sources() const { return static_cast<int>(sources_.size()); }
  // Every source's position at the current epoch progress.
  std::vector<SourceProgress> source_progress() const;
  // One line per source: "NAME: weight 0.70, 1.25 epochs (12,345 of 9,876 sequences)".
  std::string report() const;

 private:
  struct Ring;
  int64_t taken(int s, int64_t g) const;  // c_s(g): slots given to s before g
  Batch empty_batch() const;              // host buffers of one batch (pinned for a GPU)
  // Row `row` of batch b of `epoch`, an epoch that starts at slot `start` with batch `first`
  // (passed, not read from the continuation: workers may still fill a batch of a dropped plan).
  void fill_row(int64_t epoch, int64_t start, int64_t first, int64_t b, int64_t row,
                Batch& host) const;
  Batch assemble(int64_t epoch, int64_t b) const;
  int64_t first_batch(int64_t epoch) const;
  int64_t start_of(int64_t epoch) const;

  std::vector<SequenceSource> sources_;
  SequenceBatchesOptions options_;
  int64_t m_ = 0;
  int64_t batches_ = 0;
  // The schedule's period: its source per slot, and the slot's rank among its source's slots.
  std::vector<int64_t> quota_;
  std::vector<uint8_t> period_source_;
  std::vector<uint32_t> period_rank_;
  int64_t period_ = 1;
  int64_t epoch_ = -1;
  int64_t batch_ = 0;
  int64_t cont_epoch_ = -1;  // the continued epoch (-1: none) and its progress
  int64_t cont_progress_ = 0;
  // GPU delivery: pinned and device buffers of one batch, with the events ordering their use.
  struct Staging;
  Staging* acquire_slot();  // a free slot (the least recently used), or a new one; consumer thread
  void release_slot(Staging* slot);
  void queue_copy(Staging& slot) const;  // host -> device on the copy stream
  Batch deliver(Staging& slot) const;    // device buffers -> fresh tensors on the current stream
  std::unique_ptr<Ring> ring_;
  std::mutex slot_mu_;  // guards free_slots_ (the ring's workers release slots)
  std::vector<std::unique_ptr<Staging>> slots_;
  std::deque<Staging*> free_slots_;
};

}  // namespace stoker::data
