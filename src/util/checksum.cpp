#include "util/checksum.h"

#include <cstdio>
#include <new>

// Inline: the header-only form of xxHash, so nothing is linked.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace stoker::util {

uint64_t checksum64(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t checksum64(const void* data, size_t size, uint64_t seed) {
  return XXH3_64bits_withSeed(data, size, seed);
}

Checksum64::Checksum64() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Checksum64::~Checksum64() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Checksum64::update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t Checksum64::value() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

std::string checksum_hex(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace stoker::util
