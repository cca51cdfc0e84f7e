// Fuzz target: data::parse_record and parse_record_header, the checks of every LMDB value a
// loader reads.
//
// Input: byte 0 is num_classes (as int8: negative, zero and positive all occur), the rest is the
// value. Neither function may throw or read outside the value. They must agree: a value whose
// header is refused is refused, and a value with a good header is refused only for its
// checksum (version 2). An accepted record holds what record.h promises (the payload is the
// value after the header, non-empty; the label in range) and survives a round trip through
// encode_record.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "fuzz_util.h"
#include "stoker/data/lmdb_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::data;
  if (size < 1) return 0;
  const int num_classes = static_cast<int8_t>(data[0]);
  const std::span<const uint8_t> value(data + 1, size - 1);

  RecordHeader header;
  const std::string why_header = parse_record_header(value, num_classes, header);
  SampleView view;
  const std::string why = parse_record(value, num_classes, view);
  if (!why_header.empty()) {
    STOKER_FUZZ_EXPECT(why == why_header, "parse_record and parse_record_header disagree: '" + why +
                                              "' vs '" + why_header + "'");
    return 0;
  }
  STOKER_FUZZ_EXPECT(header.header_bytes >= kRecordHeaderBytesV1 &&
                         header.header_bytes + header.payload_bytes == value.size(),
                     "the header's sizes do not add up to the value's");
  if (!why.empty()) {
    STOKER_FUZZ_EXPECT(header.has_checksum, "a good header without a checksum, refused: " + why);
    return 0;
  }

  STOKER_FUZZ_EXPECT(!view.payload.empty(), "accepted an empty payload");
  STOKER_FUZZ_EXPECT(view.payload.data() == value.data() + header.header_bytes &&
                         view.payload.size() == value.size() - header.header_bytes,
                     "the payload is not the value after the header");
  STOKER_FUZZ_EXPECT(
      view.label == header.label && view.kind == header.kind && view.version == header.version,
      "parse_record and parse_record_header read other fields");
  STOKER_FUZZ_EXPECT(view.label >= 0 && (num_classes <= 0 || view.label < num_classes),
                     "accepted label " + std::to_string(view.label) + " with num_classes " +
                         std::to_string(num_classes));
  STOKER_FUZZ_EXPECT(std::strcmp(payload_kind_name(view.kind), "unknown") != 0,
                     "accepted an unknown payload kind");

  // What this build writes for the same sample parses back to the same sample.
  const std::string again = encode_record(view.label, view.kind, view.payload);
  SampleView back;
  const std::string why_back = parse_record(
      std::span(reinterpret_cast<const uint8_t*>(again.data()), again.size()), num_classes, back);
  STOKER_FUZZ_EXPECT(why_back.empty(), "encode_record's output is refused: " + why_back);
  STOKER_FUZZ_EXPECT(
      back.label == view.label && back.kind == view.kind && back.version == kRecordVersion &&
          back.payload.size() == view.payload.size() &&
          std::memcmp(back.payload.data(), view.payload.data(), view.payload.size()) == 0,
      "encode_record -> parse_record changed the sample");
  return 0;
}
