#include "data/exif_orientation.h"

#include <cstring>

#include "data/pack_jpeg.h"
#include "stoker/core/error.h"

namespace stoker::data::detail {

namespace {

// Reads integers of a TIFF block in its byte order; every read is bounds-checked by the caller.
struct Tiff {
  std::span<const uint8_t> b;
  bool little = true;
  uint32_t u16(size_t at) const {
    return little ? b[at] | (b[at + 1] << 8) : (b[at] << 8) | b[at + 1];
  }
  uint32_t u32(size_t at) const {
    return little ? u16(at) | (u16(at + 2) << 16) : (u16(at) << 16) | u16(at + 2);
  }
};

ExifOrientation parse_tiff(std::span<const uint8_t> tiff) {
  ExifOrientation r;
  auto bad = [&](const char* why) {
    r.value = 1;
    r.malformed = why;
    return r;
  };
  if (tiff.size() < 8) return bad("Exif segment too short for a TIFF header");
  Tiff t{tiff};
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    t.little = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    t.little = false;
  } else {
    return bad("Exif TIFF header has no byte order mark (II or MM)");
  }
  if (t.u16(2) != 42) return bad("Exif TIFF header lacks the number 42");
  const uint64_t ifd = t.u32(4);
  if (ifd < 8 || ifd + 2 > tiff.size()) return bad("Exif IFD0 offset points outside the segment");
  const uint64_t entries = t.u16(static_cast<size_t>(ifd));
  if (ifd + 2 + entries * 12 > tiff.size()) return bad("Exif IFD0 entries run past the segment");
  for (uint64_t k = 0; k < entries; ++k) {
    const auto e = static_cast<size_t>(ifd + 2 + k * 12);
    if (t.u16(e) != 0x0112) continue;
    const uint32_t type = t.u16(e + 2), count = t.u32(e + 4);
    uint32_t value = 0;
    if (type == 3 && count == 1) {
      value = t.u16(e + 8);  // a SHORT sits at the start of the value field
    } else if (type == 4 && count == 1) {
      value = t.u32(e + 8);  // not the standard's type, but unambiguous
    } else {
      return bad("Exif orientation tag is not one SHORT");
    }
    if (value < 1 || value > 8) return bad("Exif orientation is not in 1..8");
    r.value = static_cast<int>(value);
    return r;
  }
  return r;  // Exif without an orientation: as stored
}

}  // namespace

ExifOrientation read_exif_orientation(std::span<const uint8_t> jpeg) {
  ExifOrientation r;
  walk_segments(jpeg, [&](uint8_t marker, std::span<const uint8_t> p) {
    if (marker == 0xDA) return false;
    if (marker != 0xE1 || p.size() < 6 || std::memcmp(p.data(), "Exif\0\0", 6) != 0) return true;
    r = parse_tiff(p.subspan(6));
    return false;
  });
  return r;
}

Image apply_orientation(const Image& in, int value) {
  STOKER_CHECK(value >= 1 && value <= 8, "apply_orientation: Exif orientation ", value,
               " is not in 1..8");
  const int w = in.width, h = in.height;
  const bool swap = value >= 5;
  Image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.pixels.resize(in.pixels.size());
  // Each orientation is a mirror of x and / or y after an optional transpose (5..8).
  const bool mirror_x = value == 2 || value == 3 || value == 7 || value == 8;
  const bool mirror_y = value == 3 || value == 4 || value == 6 || value == 7;
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      // The stored pixel (sx, sy) shown at (x, y) of the upright image.
      const int u = swap ? y : x, v = swap ? x : y;
      const int sx = mirror_x ? w - 1 - u : u;
      const int sy = mirror_y ? h - 1 - v : v;
      const uint8_t* s = &in.pixels[(static_cast<size_t>(sy) * w + sx) * 3];
      uint8_t* d = &out.pixels[(static_cast<size_t>(y) * out.width + x) * 3];
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

}  // namespace stoker::data::detail
