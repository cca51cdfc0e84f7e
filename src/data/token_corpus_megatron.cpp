// Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py), read as its
// _IndexWriter writes it. PREFIX.idx, all little-endian:
//   9 bytes   "MMIDIDX\0\0"
//   u64       version, 1
//   u8        dtype code of the ids in PREFIX.bin: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//             6 float64, 7 float32, 8 uint16
//   u64       sequence count S
//   u64       document count D (the length of the document-index array: documents + 1)
//   S x i32   sequence lengths (tokens)
//   S x i64   sequence pointers (byte offsets into PREFIX.bin)
//   D x i64   document indices: sequence indices, 0 first, S last; document d is sequences
//             [doc[d], doc[d + 1])
//   S x i8    sequence modes, only in multimodal datasets (nothing in the header says so: the
//             reader is told; here the index's size shows it)
// The builder writes the sequences back to back (a pointer is the sum of the lengths before it
// times the dtype's size, also after add_index merges), so the ids of PREFIX.bin are exactly
// the concatenation of the documents: that is what is required here, and what lets the corpus be
// one zero-copy array of ids.
#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <limits>

#include "stoker/core/error.h"
#include "token_corpus_internal.h"

namespace stoker::data::detail {

namespace {

namespace fs = std::filesystem;
using core::detail::throw_error;

constexpr std::array<uint8_t, 9> kMagic = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // 34
constexpr const char* kRebuildHint =
    "rebuild the dataset with Megatron's tools/preprocess_data.py, or copy both PREFIX.idx and "
    "PREFIX.bin again from the same run";

struct DtypeCode {
  const char* name;
  TokenType type;
  bool integer;
};

DtypeCode dtype_of(uint8_t code) {
  switch (code) {
    case 1:
      return {"uint8", TokenType::u8, true};
    case 2:
      return {"int8", TokenType::i8, true};
    case 3:
      return {"int16", TokenType::i16, true};
    case 4:
      return {"int32", TokenType::i32, true};
    case 5:
      return {"int64", TokenType::i64, true};
    case 6:
      return {"float64", TokenType::i64, false};
    case 7:
      return {"float32", TokenType::i32, false};
    case 8:
      return {"uint16", TokenType::u16, true};
    default:
      return {nullptr, TokenType::u8, false};
  }
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += ' ';
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// The index's views (unaligned: the arrays start at byte 34) and the .bin's size in tokens.
class MegatronIndex final : public DocumentIndex {
 public:
  MegatronIndex(const MappedFile& idx, uint64_t sequences, uint64_t documents, int width,
                int64_t tokens)
      : idx_(idx),
        sequences_(static_cast<int64_t>(sequences)),
        documents_(static_cast<int64_t>(documents) - 1),
        width_(width),
        tokens_(tokens) {}

  int64_t length(int64_t s) const { return idx_.load<int32_t>(kHeaderBytes + 4 * uint64_t(s)); }
  int64_t pointer(int64_t s) const {
    return idx_.load<int64_t>(kHeaderBytes + 4 * uint64_t(sequences_) + 8 * uint64_t(s));
  }
  int64_t doc(int64_t d) const {
    return idx_.load<int64_t>(kHeaderBytes + 12 * uint64_t(sequences_) + 8 * uint64_t(d));
  }

  int64_t num_documents() const override { return documents_; }
  int64_t document_begin(int64_t d) const override { return sequence_begin(doc(d)); }
  int64_t num_sequences() const override { return sequences_; }
  int64_t sequence_begin(int64_t s) const override {
    return s < sequences_ ? pointer(s) / width_ : tokens_;
  }
  int64_t document_first_sequence(int64_t d) const override { return doc(d); }

 private:
  const MappedFile& idx_;  // owned by the corpus, which outlives this index
  int64_t sequences_;
  int64_t documents_;
  int width_;
  int64_t tokens_;
};

}  // namespace

CorpusContent open_megatron(const fs::path& prefix) {
  const fs::path idx_path = fs::path(prefix.string() + ".idx");
  const fs::path bin_path = fs::path(prefix.string() + ".bin");
  CorpusContent c;
  c.format = TokenFormat::megatron;
  c.name = prefix.string();
  c.maps.reserve(2);
  c.maps.emplace_back(idx_path);
  const MappedFile& idx = c.maps.back();
  const std::string I = idx_path.string();
  const uint64_t isize = idx.size();

  if (isize < kHeaderBytes)
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: {}{}, shorter than the {}-byte header (truncated?)",
                            I, isize == 0 ? "empty (0 bytes)" : "only ",
                            isize == 0 ? "" : fmt::format("{} bytes", isize), kHeaderBytes),
                kRebuildHint);
  if (!std::equal(kMagic.begin(), kMagic.end(), idx.data()))
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: bad magic (starts with {}, a Megatron index starts "
                            "with \"MMIDIDX\\0\\0\")",
                            I, hex_bytes(idx.data(), 9)),
                "give the .idx written with the .bin by Megatron's preprocess_data.py (older "
                "\"TNTIDX\" indexes of the lazy/cached formats are not read)");
  const uint64_t version = idx.load<uint64_t>(9);
  if (version != 1)
    throw_error(
        __FILE__, __LINE__,
        fmt::format("Megatron index {}: version {}, Megatron's indexed dataset has version 1", I,
                    version),
        kRebuildHint);
  const uint8_t code = idx.load<uint8_t>(17);
  const DtypeCode dtype = dtype_of(code);
  if (dtype.name == nullptr)
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: unknown dtype code {} (Megatron's codes: 1 uint8, "
                            "2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)",
                            I, int(code)),
                kRebuildHint);
  if (!dtype.integer)
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: dtype code {} ({}): the dataset holds "
                            "floating-point values, not token ids",
                            I, int(code), dtype.name),
                "give a dataset of token ids (integer dtypes)");
  c.type = dtype.type;
  const int width = token_type_bytes(c.type);
  const uint64_t sequences = idx.load<uint64_t>(18);
  const uint64_t documents = idx.load<uint64_t>(26);

  // Sizes implied by the counts, without overflow: each count fits in the file first.
  const uint64_t room = isize - kHeaderBytes;
  if (sequences > room / 12 || documents > room / 8 || sequences * 12 + documents * 8 > room)
    throw_error(
        __FILE__, __LINE__,
        fmt::format("Megatron index {}: the header counts {} sequences and {} document indices, "
                    "which need {}; the file has {} bytes (truncated, or a damaged header)",
                    I, sequences, documents,
                    sequences > room / 12 || documents > room / 8
                        ? std::string("more bytes than the file has")
                        : fmt::format("{} bytes", kHeaderBytes + sequences * 12 + documents * 8),
                    isize),
        kRebuildHint);
  const uint64_t expected = kHeaderBytes + sequences * 12 + documents * 8;
  if (isize != expected) {
    if (isize == expected + sequences && sequences > 0)
      throw_error(
          __FILE__, __LINE__,
          fmt::format("Megatron index {}: it holds a sequence mode per sequence ({} bytes after "
                      "the document indices): a multimodal dataset, which is not read as token ids",
                      I, sequences),
          "give a text-only dataset (built without --multimodal)");
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: {} bytes, but its header's counts ({} sequences, "
                            "{} document indices) make {} bytes ({})",
                            I, isize, sequences, documents, expected,
                            isize > expected ? "extra bytes at the end" : "truncated"),
                kRebuildHint);
  }
  if (documents < 1)
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: no document indices (Megatron's start with 0 and "
                            "end with the sequence count)",
                            I),
                kRebuildHint);

  c.maps.emplace_back(bin_path);
  const MappedFile& bin = c.maps.back();
  const std::string B = bin_path.string();
  auto index = std::make_unique<MegatronIndex>(c.maps.front(), sequences, documents, width,
                                               static_cast<int64_t>(bin.size() / width));

  // Document indices: 0 first, never decreasing, the sequence count last.
  const int64_t S = static_cast<int64_t>(sequences);
  const int64_t D = static_cast<int64_t>(documents);
  if (index->doc(0) != 0)
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: the document indices start with {}, not 0", I,
                            index->doc(0)),
                kRebuildHint);
  for (int64_t d = 1; d < D; ++d) {
    const int64_t a = index->doc(d - 1), b = index->doc(d);
    if (b < a || b > S)
      throw_error(__FILE__, __LINE__,
                  fmt::format("Megatron index {}: document index {} is {}{}", I, d, b,
                              b < a ? fmt::format(", below the one before it ({})", a)
                                    : fmt::format(", past the {} sequences", S)),
                  kRebuildHint);
  }
  if (index->doc(D - 1) != S)
    throw_error(__FILE__, __LINE__,
                fmt::format("Megatron index {}: the last document index is {}, not the sequence "
                            "count {} (sequences after the last document)",
                            I, index->doc(D - 1), S),
                kRebuildHint);

  // Sequences: lengths >= 0, each inside PREFIX.bin, back to back from byte 0 to its end.
  const uint64_t bsize = bin.size();
  uint64_t next = 0;  // where the next sequence must start
  for (int64_t s = 0; s < S; ++s) {
    const int64_t len = index->length(s);
    const int64_t ptr = index->pointer(s);
    if (len < 0)
      throw_error(__FILE__, __LINE__,
                  fmt::format("Megatron index {}: sequence {} has a negative length {}", I, s, len),
                  kRebuildHint);
    const uint64_t bytes = static_cast<uint64_t>(len) * uint64_t(width);
    if (ptr < 0 || static_cast<uint64_t>(ptr) > bsize || bytes > bsize - uint64_t(ptr))
      throw_error(
          __FILE__, __LINE__,
          fmt::format("Megatron index {}: sequence {} ({} tokens at byte {}) points outside {} ({} "
                      "bytes): the .bin is truncated or belongs to another index",
                      I, s, len, ptr, B, bsize),
          kRebuildHint);
    if (static_cast<uint64_t>(ptr) != next)
      throw_error(__FILE__, __LINE__,
                  fmt::format("Megatron index {}: sequence {} starts at byte {} of {}, but the "
                              "sequences before it end at byte {} (Megatron writes them back to "
                              "back: the index is damaged or not Megatron's)",
                              I, s, ptr, B, next),
                  kRebuildHint);
    next += bytes;
  }
  if (next != bsize)
    throw_error(
        __FILE__, __LINE__,
        fmt::format(
            "Megatron dataset {}: {} has {} bytes, but the {} sequences of {} cover {} ({}the .bin "
            "and .idx do not belong together)",
            c.name, B, bsize, S, I, next,
            bsize % width != 0 ? fmt::format("not a whole number of {}-byte ids; ", width) : ""),
        kRebuildHint);

  TokenFile f;
  f.path = bin_path;
  f.data = bin.data();
  f.first = 0;
  f.size = static_cast<int64_t>(bsize / width);
  c.files.push_back(f);
  c.documents = std::move(index);
  return c;
}

}  // namespace stoker::data::detail
