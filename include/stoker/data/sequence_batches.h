// SequenceBatches: language-model batches from one or several TokenSequences (a mixture), each
// sequence of an epoch delivered once, in an order fixed by the seed alone.
//
// The global order. A source s of N_s sequences visits them in source epochs: source epoch f is
// IndexPermutation(N_s, seed, key(s, f)) (identity without shuffle), so the source's c-th
// sequence overall is sequence perm_f(c mod N_s) with f = floor(c / N_s). The mixture's global
// stream assigns slot g = 0, 1, 2, ... to a source by a smooth weighted round-robin: weights are
// quantized to quotas Q_s of a period P = 2^20 (largest remainders, every positive weight at least
// one) and slot g goes to the source with the largest deficit (g + 1) Q_s - c_s P (c_s: slots
// given to s before g; ties to the lower index), so after any g slots every source has had
// within one sequence of g Q_s / P (the period repeats exactly: at g = P every deficit is 0).
// So any 1,000 consecutive slots hold within one of 1000 w_s for two sources, and within two
// for more (measured: up to 1.26; no schedule keeps every window of three or more distinct rates
// within one).
// Slot g is the source's c_s(g)-th sequence. One source is the mixture of weight 1. The epoch of
// this BatchSource is the M = sequences_per_epoch slots [e M, (e + 1) M) of the stream (default:
// the sum of the sources' N_s, so that one source is read once per epoch, and a mixture whose
// weights follow the sources' sizes reads each once); a source whose weight asks for more than its
// N_s per epoch is repeated (its next source epoch, reshuffled), one that asks for fewer continues
// where it stopped in the next epoch. source_epochs() says how far each source has gone.
//
// Ranks and batches: batch b of an epoch on rank r of world W holds the B consecutive slots
// (b W + r) B + j, j in [0, B), of the epoch — ranks take disjoint slices of one global order,
// the same for any W, thread count or accumulation (which only calls next() more often). The
// epoch has ceil(M / (W B)) batches (tail pad: slots past M repeat the epoch's first slots, as
// data::Sampler pads) or floor(M / (W B)) (tail drop: the last M mod (W B) slots are not visited).
//
// Elastic resume (BatchSource): epoch_progress() is the slots of the epoch the whole job has
// consumed, min(start + d W B, M) after d batches of a run that started the epoch at `start`;
// continue_epoch(e, k) serves slots [k, M) of epoch e sliced the same way on this source's world
// size, as the epoch's last batch indices (pad: past M it repeats the epoch's first slots). Since
// every source's position is a function of the global slot e M + k, the one number the Trainer
// checkpoints restores the position of every source of a mixture.
//
// Delivery: `threads` worker threads fill the next `prefetch` batches' host buffers ahead of
// next(), row by row in any order; each row is a pure function of its slot, so the batches are
// the same bits for any thread count. threads = 0 assembles each batch inside next(). On the CPU
// next() hands the oldest host batch over. To a GPU, as the image Loader: the batches are
// assembled in a ring of pinned slots; the worker that finishes a batch queues its host-to-device
// copy on the device's copy stream into the slot's device buffers (after the consumer's last read
// of them, an event) and records an event; next() makes the consumer's current stream wait for
// that event (on the device, no host sync), copies the buffers into fresh tensors of its own
// stream and records when it read them. A slot's pinned rows are rewritten only after its last
// copy has run.
//
// Batch: input [B, T], target [B * T] (the next tokens, ignore_index at padding), and with
// `document_masks` positions [B, T] and documents [B, T] (TokenSequences::fill), in `dtype`.
//
// identity(): the batch size, the seed, M as samples, and a fingerprint of every source (tokens,
// sequences, context and cut, weight quota, XXH3-64 of the first and last 4096 tokens).
//
// Ownership: borrows the TokenSequences, which must outlive it; a delivered batch is the caller's
// (its tensors are never reused by the source). The destructor stops the workers and waits for
// the copies still in flight. Thread-safety: one consumer thread calls every method; the workers
// are internal.
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
