// Private: the JPEG work of the packer. Validation is the loader's own decode (JpegDecoder, one
// per thread), so what the packer accepts the loader reads (CMYK/YCCK included), preceded by
// checks that need no decoder: what is wrong with the first bytes, and the header's pixel count
// against the budget (before anything is allocated). Area resize and compression use
// TurboJPEG's compressor (one handle per thread).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "stoker/data/decode.h"

namespace stoker::data::detail {

// Why the first bytes are not the start of a JPEG, in words that say what is wrong: "empty file
// (0 bytes)", "JPEG ends right after its start-of-image marker (truncated)", "garbage after the
// start-of-image marker: expected a marker (FF xx) at byte 2, found 0x12". "" when the file
// starts with SOI and a marker, or does not start with SOI at all (the decoder names that).
std::string check_jpeg_start(std::span<const uint8_t> jpeg);

// Calls visit(marker, payload) for each marker segment after SOI, up to and including SOS (whose
// payload is its header), bounds-checked; stops early when visit returns false. Returns false
// when the segments cannot be followed (a byte that is not a marker where one is due, a length
// running past the end); libjpeg then judges the file.
bool walk_segments(
    std::span<const uint8_t> jpeg,
    const std::function<bool(uint8_t marker, std::span<const uint8_t> payload)>& visit);

// Width and height from the first frame header (SOF0..SOF15 but DHT, JPG, DAC); false when
// there is none before the scan or the segments cannot be followed.
bool frame_size(std::span<const uint8_t> jpeg, int& width, int& height);

// "header claims 60000x60000 = 3.6e9 pixels, over the budget of 268435456 (2.7e8) pixels; raise
// --max-pixels if such images are real" when the first frame header claims more than
// `max_pixels`, else "".
std::string check_pixel_budget(std::span<const uint8_t> jpeg, int64_t max_pixels);

// The most bytes a JPEG of w x h pixels can take: kMaxJpegBytesPerPixel per pixel (above what
// the entropy coding of 4 components at quality 100 can produce) plus kJpegMetadataBytes of
// markers (Exif, ICC profiles, thumbnails).
inline constexpr uint64_t kMaxJpegBytesPerPixel = 16;
inline constexpr uint64_t kJpegMetadataBytes = uint64_t{16} << 20;

// The packer's look at an input before reading it whole (read_input_file's head check): `head`
// holds its first bytes, `size` its size. Returns "" or why it is skipped unread: not a JPEG
// (the decoder's words for the first bytes), check_jpeg_start, check_pixel_budget, or a file
// larger than a JPEG of its frame size (or, when the frame header is past the head, of
// `max_pixels`) can be.
std::string check_jpeg_head(uint64_t size, std::span<const uint8_t> head, int64_t max_pixels);

// The packer's validation: check_jpeg_start, check_pixel_budget, then every pixel decoded to RGB
// by this thread's JpegDecoder (budget `max_pixels`; libjpeg warnings are errors). Returns "" and
// fills `out`, or the reason.
std::string decode_rgb(std::span<const uint8_t> jpeg, int64_t max_pixels, Image& out);

// Area (box-filter) resize to width x height; meant for shrinking.
Image resize_area(const Image& in, int width, int height);

// Compresses RGB pixels (4:2:0) at `quality`; throws stoker::Error on failure.
std::vector<uint8_t> compress_rgb(const uint8_t* pixels, int width, int height, int quality);

}  // namespace stoker::data::detail
