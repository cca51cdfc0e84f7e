// stoker_llm --document-mask: a data::BatchSource that hands each batch's positions
// (data::SequenceBatches with document_masks) to the Llama, Llama::set_positions(positions,
// true), as the batch leaves next(). The Trainer fetches a micro-batch and runs its forward
// before fetching the next (fit and evaluate alike; not with a CUDA graph, which holds a step's
// batches), so the forward sees its own batch's positions without a Trainer hook. Everything
// else is the wrapped source's. Borrows both; not thread-safe (next() runs on the training
// thread).
#pragma once

#include <cstdint>
#include <string>

#include "llama_model.h"
#include "stoker/core/error.h"
#include "stoker/data/batch_source.h"

namespace stoker::llm {

class DocumentPositions : public data::BatchSource {
 public:
  DocumentPositions(data::BatchSource& inner, Llama& model) : inner_(inner), model_(model) {}
  void start_epoch(int64_t epoch) override { inner_.start_epoch(epoch); }
  bool next(data::Batch& batch) override {
    if (!inner_.next(batch)) return false;
    STOKER_CHECK(batch.positions.defined(), "DocumentPositions: a batch of ", inner_.kind(),
                 " without positions (its source must deliver document masks)");
    model_.set_positions(batch.positions, true);
    return true;
  }
  int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return inner_.samples_per_epoch(); }
  int64_t epoch() const override { return inner_.epoch(); }
  int64_t batch_index() const override { return inner_.batch_index(); }
  void restore(int64_t epoch, int64_t index) override { inner_.restore(epoch, index); }
  int64_t epoch_progress() const override { return inner_.epoch_progress(); }
  bool continue_epoch(int64_t epoch, int64_t progress) override {
    return inner_.continue_epoch(epoch, progress);
  }
  data::SourceIdentity identity() const override { return inner_.identity(); }
  std::string kind() const override { return inner_.kind(); }
  const data::InputPipeline* pipeline() const override { return inner_.pipeline(); }

 private:
  data::BatchSource& inner_;
  Llama& model_;
};

}  // namespace stoker::llm
