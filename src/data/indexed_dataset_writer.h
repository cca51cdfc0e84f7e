// Private: writes Megatron-LM's indexed dataset (PREFIX.bin + PREFIX.idx), one sequence per
// document, as megatron/core/datasets/indexed_dataset.py's IndexedDatasetBuilder writes it:
//
//   PREFIX.bin: the ids of every document, concatenated, little-endian, of the index's dtype.
//   PREFIX.idx: "MMIDIDX\0\0" (9 bytes), version 1 (uint64), dtype code (uint8: 8 = uint16,
//               4 = int32), sequence count S (uint64), document count D + 1 (uint64: the
//               document indices start with 0), S int32 sequence lengths (tokens), S int64
//               sequence byte offsets into .bin, D + 1 int64 document indices (0, 1, ..., S:
//               document d is sequences [idx[d], idx[d + 1])).
//
// dtype: Megatron's DType.optimal_dtype(vocab_size): uint16 when the vocabulary has fewer than
// 65,500 entries, else int32 (so ids 65,500..65,535 never meet a uint16 file).
//
// The .bin is streamed (bounded memory: the lengths stay in memory, 4 bytes a document); the
// .idx is written by finish(). Both files are checksummed (util::checksum64, XXH3-64) as they
// are written and fsync'ed by finish(). A writer that is destroyed unfinished leaves its
// partial files where they are: they live in a temporary folder that the caller removes.
// Thread-safety: one thread per writer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

namespace stoker::data::detail {

inline constexpr char kMegatronIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
inline constexpr uint8_t kMegatronDtypeInt32 = 4;
inline constexpr uint8_t kMegatronDtypeUint16 = 8;
// Megatron's DType.optimal_dtype: uint16 below this cardinality, else int32.
inline constexpr int64_t kMegatronUint16Cardinality = 65500;

inline uint8_t megatron_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < kMegatronUint16Cardinality ? kMegatronDtypeUint16 : kMegatronDtypeInt32;
}

struct IndexedDatasetFiles {
  int64_t documents = 0;
  int64_t tokens = 0;
  uint64_t bin_bytes = 0, idx_bytes = 0;
  uint64_t bin_checksum = 0, idx_checksum = 0;  // util::checksum64 of each file's bytes
};

class IndexedDatasetWriter {
 public:
  // Creates (truncates) `prefix`.bin; `dtype_code` is kMegatronDtypeUint16 or ...Int32.
  IndexedDatasetWriter(const std::filesystem::path& prefix, uint8_t dtype_code);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document (one sequence). Throws when an id does not fit the dtype or the
  // document is empty or longer than an int32 length can say.
  void add_document(std::span<const int32_t> ids);
  // Writes the index, fsyncs and closes both files.
  IndexedDatasetFiles finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace stoker::data::detail
