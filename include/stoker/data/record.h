// The sample record stored by `stoker pack`: one LMDB value per sample (docs/formats.md).
//
// A value is a 16-byte little-endian header followed by the payload bytes:
//   magic "STKR" (4) | version u16 | payload kind u8 | reserved u8 | label i32 | byte count u32
// Keys are the sample index as 10 zero-padded decimal digits; metadata keys start with
// "__stoker__/" and sort after every sample key. `parse_record` validates everything a reader
// can check without decoding the payload and never throws, so a loader can skip bad samples
// without exceptions in its hot path.
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace stoker::data {

inline constexpr char kRecordMagic[4] = {'S', 'T', 'K', 'R'};
inline constexpr uint16_t kRecordVersion = 1;
inline constexpr size_t kRecordHeaderBytes = 16;
inline constexpr int kSampleKeyDigits = 10;

// Metadata keys and the format tag of a database written by `stoker pack`.
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
  std::span<const uint8_t> payload;
};

// The LMDB key of sample `index` ("0000000042").
std::string sample_key(int64_t index);

// Header + payload, ready to store.
std::string encode_record(int32_t label, PayloadKind kind, std::span<const uint8_t> payload);

// Parses and validates `value`. Returns an empty string on success (and fills `out`, except its
// index), otherwise what is wrong with the record. `num_classes` > 0 also checks the label range.
std::string parse_record(std::span<const uint8_t> value, int num_classes, SampleView& out);

}  // namespace stoker::data
