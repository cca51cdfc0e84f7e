// Private: the Exif orientation tag of a JPEG, and the pixels turned upright by it. The packer
// applies it only when asked (PackOptions::apply_exif_orientation): the loader, like
// torchvision's decode_jpeg by default, never does.
//
// The tag lives in the first APP1 segment that starts with "Exif\0\0": a TIFF header (byte order
// "II" little-endian or "MM" big-endian, 42, the offset of IFD0) and IFD0's entry 0x0112
// (SHORT, count 1). Every offset and count is bounds-checked against the segment: garbage is
// reported as malformed, never read past.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "stoker/data/decode.h"

namespace stoker::data::detail {

struct ExifOrientation {
  int value = 1;  // 1..8 (1: stored upright); 1 also when there is no Exif orientation
  // Why an Exif segment's orientation could not be read ("" when it was read or is absent):
  // the image is then taken as stored (value 1).
  std::string malformed;
};

ExifOrientation read_exif_orientation(std::span<const uint8_t> jpeg);

// `in` turned upright as Exif orientation `value` (1..8) says: 2 mirror left-right, 3 rotate
// 180, 4 mirror top-bottom, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90
// counter-clockwise (5..8 swap width and height).
Image apply_orientation(const Image& in, int value);

}  // namespace stoker::data::detail
