// Private: the checksum stoker stores beside data it must be able to trust later (packed
// records, checkpoint tensors): XXH3-64 from xxHash. It detects every flipped bit and byte
// of accidental damage (disk, copy, truncation); it is not a cryptographic hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace stoker::util {

uint64_t checksum64(const void* data, size_t size);
// Seeded: checksum64(data, size, checksum64(prefix)) chains a prefix into the value.
uint64_t checksum64(const void* data, size_t size, uint64_t seed);
inline uint64_t checksum64(std::span<const uint8_t> bytes) {
  return checksum64(bytes.data(), bytes.size());
}

// Incremental form for data that arrives in pieces (the same value as one call over the
// concatenation).
class Checksum64 {
 public:
  Checksum64();
  ~Checksum64();
  Checksum64(const Checksum64&) = delete;
  Checksum64& operator=(const Checksum64&) = delete;
  void update(const void* data, size_t size);
  uint64_t value() const;

 private:
  void* state_;
};

// 16 lower-case hex digits, as checkpoints' metadata stores it.
std::string checksum_hex(uint64_t value);

}  // namespace stoker::util
