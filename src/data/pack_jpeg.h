// Private: the TurboJPEG work of the packer (validate, decompress, area resize, compress).
// Handles are per thread (thread_local), created on first use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::data::detail {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // HWC, RGB
};

// Decodes the header and every pixel; returns an empty string or the reason it failed.
std::string decompress_rgb(const uint8_t* jpeg, size_t size, RgbImage& out);

// Area (box-filter) resize to width x height; meant for shrinking.
RgbImage resize_area(const RgbImage& in, int width, int height);

// Compresses RGB pixels (4:2:0) at `quality`; throws stoker::Error on failure.
std::vector<uint8_t> compress_rgb(const uint8_t* pixels, int width, int height, int quality);

}  // namespace stoker::data::detail
