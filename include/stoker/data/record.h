// The sample record stored by `stoker pack`: one LMDB value per sample (docs/formats.md).
//
// A value is a little-endian header followed by the payload bytes. Version 2 (what
// encode_record writes) is 24 bytes:
//   magic "STKR" (4) | version u16 | payload kind u8 | reserved u8 | label i32 | byte count u32
//   | checksum u64 (record_checksum: the first 16 bytes and the payload)
// Version 1 (older packs, still read) is the same without the checksum: 16 bytes.
// Keys are the sample index as 10 zero-padded decimal digits; metadata keys start with
// "__stoker__/" and sort after every sample key. `parse_record` validates everything a reader
// can check without decoding the payload (for v2 that includes the record's checksum) and never
// throws, so a loader can skip bad samples without exceptions in its hot path.
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

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
