// The batch source of a parity run (stoker_gpt and stoker_llm --parity-dir): forwards another
// BatchSource and appends every batch it hands out to a file as int32 little-endian — the B*T
// input ids, then the B*T target ids — so that a PyTorch peer trains on exactly the same tokens.
// Reading the ids back from a GPU costs a host sync per batch, which a parity run does not mind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "stoker/data/batch_source.h"

namespace stoker::program {

class RecordingSource : public data::BatchSource {
 public:
  // `program` names the writer in errors ("stoker_gpt").
  RecordingSource(data::BatchSource& inner, const std::filesystem::path& path, std::string program);
  void start_epoch(int64_t epoch) override { inner_.start_epoch(epoch); }
  bool next(data::Batch& batch) override;
  int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return inner_.samples_per_epoch(); }
  int64_t epoch() const override { return inner_.epoch(); }
  int64_t batch_index() const override { return inner_.batch_index(); }
  void restore(int64_t epoch, int64_t batch_index) override { inner_.restore(epoch, batch_index); }
  // Batches written so far.
  int64_t batches() const { return batches_; }
  // Closes the file; throws when a write failed.
  void close();

 private:
  void write_ids(const Tensor& ids);
  data::BatchSource& inner_;
  std::filesystem::path path_;
  std::string program_;
  std::ofstream out_;
  int64_t batches_ = 0;
};

}  // namespace stoker::program
