// Record encoding. The header is written byte by byte (little-endian) so the format does not
// depend on the host's struct layout or endianness.
#include "stoker/data/lmdb_dataset.h"

#include <fmt/format.h>
#include <cstdio>
#include <cstring>

#include "stoker/core/error.h"
#include "util/checksum.h"

namespace stoker::data {

namespace {

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

const char* payload_kind_name(PayloadKind kind) {
  switch (kind) {
    case PayloadKind::jpeg:
      return "jpeg";
  }
  return "unknown";
}

std::string sample_key(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%0*lld", kSampleKeyDigits, static_cast<long long>(index));
  return buf;
}

uint64_t record_checksum(std::span<const uint8_t> first16, std::span<const uint8_t> payload) {
  return util::checksum64(payload.data(), payload.size(),
                          util::checksum64(first16.data(), first16.size()));
}

std::string encode_record(int32_t label, PayloadKind kind, std::span<const uint8_t> payload) {
  STOKER_CHECK(payload.size() <= 0xFFFFFFFFull, "encode_record: payload of ", payload.size(),
               " bytes exceeds the 4 GiB record limit");
  std::string s;
  s.reserve(kRecordHeaderBytes + payload.size());
  s.append(kRecordMagic, 4);
  put_le(s, kRecordVersion, 2);
  put_le(s, static_cast<uint8_t>(kind), 1);
  put_le(s, 0, 1);
  put_le(s, static_cast<uint32_t>(label), 4);
  put_le(s, payload.size(), 4);
  put_le(
      s,
      record_checksum({reinterpret_cast<const uint8_t*>(s.data()), kRecordHeaderBytesV1}, payload),
      8);
  s.append(reinterpret_cast<const char*>(payload.data()), payload.size());
  return s;
}

std::string parse_record_header(std::span<const uint8_t> value, int num_classes,
                                RecordHeader& out) {
  if (value.empty()) return "zero-length value";
  if (value.size() < kRecordHeaderBytesV1) {
    return fmt::format("value of {} bytes is shorter than the {}-byte record header", value.size(),
                       kRecordHeaderBytesV1);
  }
  const uint8_t* p = value.data();
  if (std::memcmp(p, kRecordMagic, 4) != 0) return "bad magic (not a stoker record)";
  const auto version = static_cast<uint16_t>(get_le(p + 4, 2));
  if (version != kRecordVersionV1 && version != kRecordVersion) {
    return fmt::format(
        "unknown record version {} (this build reads versions {} and {}; a newer stoker wrote it, "
        "or the record is damaged: use that stoker or repack with this one)",
        version, kRecordVersionV1, kRecordVersion);
  }
  const size_t header_bytes =
      version == kRecordVersionV1 ? kRecordHeaderBytesV1 : kRecordHeaderBytes;
  if (value.size() < header_bytes) {
    return fmt::format("value of {} bytes is shorter than the {}-byte version {} record header",
                       value.size(), header_bytes, version);
  }
  const auto kind = static_cast<PayloadKind>(p[6]);
  if (kind != PayloadKind::jpeg)
    return fmt::format("unknown payload kind {}", static_cast<int>(p[6]));
  const auto label = static_cast<int32_t>(static_cast<uint32_t>(get_le(p + 8, 4)));
  const uint64_t count = get_le(p + 12, 4);
  const uint64_t available = value.size() - header_bytes;
  if (count > available) {
    return fmt::format("truncated payload: header says {} bytes, value holds {}", count, available);
  }
  if (count < available) {
    return fmt::format("payload of {} bytes followed by {} stray bytes", count, available - count);
  }
  if (count == 0) return "empty payload";
  if (label < 0 || (num_classes > 0 && label >= num_classes)) {
    return fmt::format("label {} out of range [0, {})", label, num_classes);
  }
  out.version = version;
  out.kind = kind;
  out.label = label;
  out.payload_bytes = static_cast<uint32_t>(count);
  out.header_bytes = header_bytes;
  out.has_checksum = version != kRecordVersionV1;
  out.checksum = out.has_checksum ? get_le(p + 16, 8) : 0;
  return {};
}

std::string parse_record(std::span<const uint8_t> value, int num_classes, SampleView& out) {
  RecordHeader header;
  std::string why = parse_record_header(value, num_classes, header);
  if (!why.empty()) return why;
  const std::span<const uint8_t> payload = value.subspan(header.header_bytes);
  if (header.has_checksum) {
    const uint64_t computed = record_checksum(value.first(kRecordHeaderBytesV1), payload);
    if (computed != header.checksum) {
      return fmt::format("record checksum mismatch (stored {}, computed {}): the record is damaged",
                         util::checksum_hex(header.checksum), util::checksum_hex(computed));
    }
  }
  out.label = header.label;
  out.kind = header.kind;
  out.version = header.version;
  out.payload = payload;
  return {};
}

}  // namespace stoker::data
