// LmdbImageDataset: the encoded images of a database written by `stoker pack`, read zero-copy
// through per-thread Readers (RAII read transactions; a view lives until its Reader is reset).
// Opening refuses a truncated data.mdb or a foreign database; every LMDB call runs under a guard
// that turns a damaged page's SIGSEGV/SIGBUS into that record's error (try_read: no exception).
// Ownership: the dataset owns the environment and must outlive its Readers.
// Thread-safety: the dataset's const methods are thread-safe; a Reader is not.
// Details: docs/formats.md#image-dataset-lmdb-written-by-stoker-pack.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

// The sample record stored by `stoker pack`: one LMDB value per sample (docs/formats.md).
namespace stoker::data {

inline constexpr char kRecordMagic[4] = {'S', 'T', 'K', 'R'};
inline constexpr uint16_t kRecordVersion = 2;    // written by encode_record
inline constexpr uint16_t kRecordVersionV1 = 1;  // no checksum; still accepted
inline constexpr size_t kRecordHeaderBytesV1 = 16;
inline constexpr size_t kRecordHeaderBytes = 24;  // version 2: v1's 16 bytes + the checksum
inline constexpr int kSampleKeyDigits = 10;

// Metadata keys and the format tag of a database written by `stoker pack`. The tag did not
// change with record version 2: the database layout is the same and each record says its
// version.
inline constexpr const char* kMetaFormatKey = "__stoker__/format";
inline constexpr const char* kMetaClassesKey = "__stoker__/classes";  // names, one per line
inline constexpr const char* kMetaSamplesKey = "__stoker__/samples";  // decimal count
inline constexpr const char* kImageFormatTag = "stoker-image-lmdb/1";

enum class PayloadKind : uint8_t { jpeg = 1 };

const char* payload_kind_name(PayloadKind kind);

// One sample as stored; `payload` points into the value it was parsed from (for an LMDB read,
// valid while the read transaction that produced it is held).
struct SampleView {
  int64_t index = -1;
  int32_t label = -1;
  PayloadKind kind = PayloadKind::jpeg;
  uint16_t version = 0;  // the record's format version
  std::span<const uint8_t> payload;
};

// A record's header fields, as parse_record_header read them.
struct RecordHeader {
  uint16_t version = 0;
  PayloadKind kind = PayloadKind::jpeg;
  int32_t label = -1;
  uint32_t payload_bytes = 0;
  size_t header_bytes = 0;    // 16 (v1) or 24 (v2): where the payload starts
  bool has_checksum = false;  // v2
  uint64_t checksum = 0;      // the stored record_checksum (v2)
};

// The LMDB key of sample `index` ("0000000042").
std::string sample_key(int64_t index);

// The checksum a version-2 record stores: XXH3-64 of the payload, seeded with the XXH3-64 of
// the record's first 16 bytes (magic, version, kind, label, byte count), so damage to the label
// or the kind is caught as surely as damage to the payload.
uint64_t record_checksum(std::span<const uint8_t> first16, std::span<const uint8_t> payload);

// Version-2 header + payload, ready to store.
std::string encode_record(int32_t label, PayloadKind kind, std::span<const uint8_t> payload);

// Validates the header of `value` and that its byte count matches the value's size, without
// reading the payload. Returns an empty string on success (and fills `out`), otherwise what is
// wrong with the record. `num_classes` > 0 also checks the label range.
std::string parse_record_header(std::span<const uint8_t> value, int num_classes, RecordHeader& out);

// parse_record_header and, for version 2, the record's checksum. Returns an empty string on
// success (and fills `out`, except its index), otherwise what is wrong with the record.
std::string parse_record(std::span<const uint8_t> value, int num_classes, SampleView& out);

}  // namespace stoker::data

struct MDB_env;
struct MDB_txn;

namespace stoker::data {

struct LmdbOptions {
  bool read_ahead = false;  // false: MDB_NORDAHEAD (random access on local disk); true for NFS
  bool no_lock = false;     // MDB_NOLOCK: only when no process writes the database
  int max_readers = 0;      // reader slots; 0: max(126, 4 * hardware threads + 16)
};

class LmdbImageDataset {
 public:
  explicit LmdbImageDataset(std::filesystem::path path, LmdbOptions options = {});
  ~LmdbImageDataset();
  LmdbImageDataset(const LmdbImageDataset&) = delete;
  LmdbImageDataset& operator=(const LmdbImageDataset&) = delete;

  int64_t size() const { return size_; }
  int num_classes() const { return static_cast<int>(class_names_.size()); }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const std::filesystem::path& path() const { return path_; }
  // Size of data.mdb in bytes (checked at open to hold every page in use).
  uint64_t file_bytes() const { return file_bytes_; }
  // Reader slots of the environment: at most this many Readers may exist at once, in all the
  // processes that share the database's lock file (a Loader holds one per worker thread). LMDB
  // may round LmdbOptions::max_readers up, or take a larger table from an existing lock file;
  // with no_lock it keeps no table and this is max_readers as configured.
  int reader_slots() const { return reader_slots_; }

  // A read transaction for one thread at a time.
  class Reader {
   public:
    explicit Reader(const LmdbImageDataset& dataset);
    ~Reader();
    Reader(Reader&& other) noexcept;
    Reader& operator=(Reader&&) = delete;
    Reader(const Reader&) = delete;

    // Sample `index`; throws stoker::Error (naming key, database and fix) when it is bad.
    SampleView read(int64_t index);
    // Sample `index`, or std::nullopt with the reason in *error (when error is not null).
    std::optional<SampleView> try_read(int64_t index, std::string* error = nullptr);
    // The stored value of sample `index` (record header + payload, not parsed), or
    // std::nullopt with the reason. try_read is try_value + parse_record. An LMDB error (a
    // damaged page) leaves the transaction unusable; try_value then renews it, so views from
    // earlier reads of this Reader must not be used after a failed read.
    std::optional<std::span<const uint8_t>> try_value(int64_t index, std::string* error = nullptr);
    // Releases the snapshot (views die) but keeps the reader slot; renew() takes a new one.
    void reset();
    void renew();

   private:
    const LmdbImageDataset* dataset_;
    MDB_txn* txn_ = nullptr;
    bool active_ = false;
  };

  Reader reader() const { return Reader(*this); }

 private:
  std::filesystem::path path_;
  LmdbOptions options_;
  MDB_env* env_ = nullptr;
  const uint8_t* map_ = nullptr;  // where data.mdb is mapped (null: unknown; sizes checked only)
  unsigned dbi_ = 0;
  int64_t size_ = 0;
  uint64_t file_bytes_ = 0;
  int reader_slots_ = 0;
  std::vector<std::string> class_names_;
};

}  // namespace stoker::data
