// The packer's JPEG work: first-byte and header checks, validation with the loader's decoder,
// area resize and compression with TurboJPEG.
#include "data/pack_jpeg.h"

#include <turbojpeg.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "stoker/core/error.h"

namespace stoker::data::detail {

namespace {

struct TjCompressor {
  TjCompressor() : h(tjInitCompress()) {
    STOKER_CHECK(h != nullptr, "TurboJPEG: cannot create a compressor: ", tjGetErrorStr2(nullptr));
  }
  ~TjCompressor() { tjDestroy(h); }
  TjCompressor(const TjCompressor&) = delete;
  TjCompressor& operator=(const TjCompressor&) = delete;
  tjhandle h;
};

// This thread's decoder, made again when the budget changes or after a failure that was not a
// DecodeError (an allocation failure can leave it mid-decode; a new one is certainly clean).
thread_local std::unique_ptr<JpegDecoder> t_decoder;

JpegDecoder& decoder(int64_t max_pixels) {
  if (!t_decoder || t_decoder->options().max_pixels != max_pixels) {
    t_decoder = std::make_unique<JpegDecoder>(DecoderOptions{.max_pixels = max_pixels});
  }
  return *t_decoder;
}

// 3600000000 -> "3.6e9"; below a million, the number itself.
std::string short_count(int64_t n) {
  if (n < 1000000) return std::to_string(n);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", static_cast<double>(n));  // "3.6e+09"
  std::string s = buf;
  const size_t e = s.find('e');
  size_t digits = e + 1;
  while (digits < s.size() && (s[digits] == '+' || s[digits] == '0')) ++digits;
  return s.substr(0, e + 1) + s.substr(digits);
}

tjhandle compressor() {
  thread_local TjCompressor handle;
  return handle.h;
}

// For each output position, the input positions it covers and their weights (summing to 1).
struct Tap {
  int index;
  float weight;
};

std::vector<std::vector<Tap>> area_taps(int in, int out) {
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(out));
  const double scale = static_cast<double>(in) / out;
  for (int j = 0; j < out; ++j) {
    const double lo = j * scale, hi = (j + 1) * scale;
    const int first = static_cast<int>(std::floor(lo));
    const int last = std::min(in - 1, static_cast<int>(std::ceil(hi)) - 1);
    for (int i = first; i <= last; ++i) {
      const double w = std::min<double>(hi, i + 1) - std::max<double>(lo, i);
      if (w > 0) taps[j].push_back({i, static_cast<float>(w / scale)});
    }
  }
  return taps;
}

}  // namespace

std::string check_jpeg_start(std::span<const uint8_t> j) {
  if (j.empty()) return "empty file (0 bytes)";
  if (j.size() < 2 || j[0] != 0xFF || j[1] != 0xD8) return {};  // not a JPEG: the decoder says
  if (j.size() == 2) return "JPEG ends right after its start-of-image marker (truncated)";
  if (j[2] != 0xFF) {
    char buf[128];
    std::snprintf(buf, sizeof buf,
                  "garbage after the start-of-image marker: expected a marker (FF xx) at byte 2, "
                  "found 0x%02X",
                  j[2]);
    return buf;
  }
  if (j.size() == 3) {
    return "JPEG ends inside its first marker after the start of image (truncated)";
  }
  return {};
}

bool walk_segments(std::span<const uint8_t> j,
                   const std::function<bool(uint8_t, std::span<const uint8_t>)>& visit) {
  size_t i = 2;
  while (i + 1 < j.size()) {
    if (j[i] != 0xFF) return false;
    const uint8_t marker = j[i + 1];
    if (marker == 0xFF) {  // fill byte before a marker
      ++i;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length, no payload
      i += 2;
      continue;
    }
    if (marker == 0xD9 || marker == 0xD8 || marker == 0x00) return false;  // EOI/SOI: no scan
    if (i + 4 > j.size()) return false;
    const size_t length = (size_t{j[i + 2]} << 8) | j[i + 3];
    if (length < 2 || i + 2 + length > j.size()) return false;
    if (!visit(marker, j.subspan(i + 4, length - 2)) || marker == 0xDA) return true;
    i += 2 + length;
  }
  return false;
}

bool frame_size(std::span<const uint8_t> jpeg, int& width, int& height) {
  bool found = false;
  walk_segments(jpeg, [&](uint8_t marker, std::span<const uint8_t> p) {
    const bool sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (!sof) return marker != 0xDA;
    if (p.size() >= 5) {
      height = (p[1] << 8) | p[2];
      width = (p[3] << 8) | p[4];
      found = true;
    }
    return false;
  });
  return found;
}

std::string check_jpeg_head(uint64_t size, std::span<const uint8_t> head, int64_t max_pixels) {
  if (head.size() < 2 || head[0] != 0xFF || head[1] != 0xD8) {
    if (head.empty()) return "empty file (0 bytes)";
    try {
      decoder(max_pixels).read_header(head);  // throws "not a JPEG: starts with ..."
    } catch (const DecodeError& e) {
      return e.reason();
    }
  }
  if (std::string why = check_jpeg_start(head); !why.empty()) return why;
  if (std::string why = check_pixel_budget(head, max_pixels); !why.empty()) return why;
  int w = 0, h = 0;
  if (frame_size(head, w, h)) {
    const uint64_t most =
        static_cast<uint64_t>(w) * static_cast<uint64_t>(h) * kMaxJpegBytesPerPixel +
        kJpegMetadataBytes;
    if (size > most) {
      return fmt::format(
          "file of {} bytes is larger than a {}x{} JPEG can be (at most {} bytes): it holds "
          "something else after the image, or is damaged",
          size, w, h, most);
    }
    return {};
  }
  const uint64_t most =
      static_cast<uint64_t>(max_pixels) * kMaxJpegBytesPerPixel + kJpegMetadataBytes;
  if (size > most) {
    return fmt::format(
        "file of {} bytes is larger than a JPEG within the pixel budget of {} pixels can be (at "
        "most {} bytes); raise --max-pixels if such images are real",
        size, max_pixels, most);
  }
  return {};
}

std::string check_pixel_budget(std::span<const uint8_t> jpeg, int64_t max_pixels) {
  int w = 0, h = 0;
  if (!frame_size(jpeg, w, h)) return {};
  const int64_t pixels = int64_t{w} * h;
  if (pixels <= max_pixels) return {};
  return fmt::format(
      "header claims {}x{} = {} pixels, over the budget of {}{} pixels; raise --max-pixels if such "
      "images are real",
      w, h, short_count(pixels), max_pixels,
      max_pixels >= 1000000 ? " (" + short_count(max_pixels) + ")" : "");
}

std::string decode_rgb(std::span<const uint8_t> jpeg, int64_t max_pixels, Image& out) {
  std::string why = check_jpeg_start(jpeg);
  if (why.empty()) why = check_pixel_budget(jpeg, max_pixels);
  if (!why.empty()) return why;
  try {
    decoder(max_pixels).decode_full_into(jpeg, out);
  } catch (const DecodeError& e) {
    return e.reason();
  } catch (...) {
    t_decoder.reset();
    throw;
  }
  return {};
}

Image resize_area(const Image& in, int width, int height) {
  const auto tx = area_taps(in.width, width);
  const auto ty = area_taps(in.height, height);
  // Horizontal pass into floats, then vertical pass with rounding.
  std::vector<float> mid(static_cast<size_t>(in.height) * width * 3);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* row = in.pixels.data() + static_cast<size_t>(y) * in.width * 3;
    float* dst = mid.data() + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      float acc[3] = {0, 0, 0};
      for (const Tap& t : tx[x]) {
        for (int c = 0; c < 3; ++c) acc[c] += t.weight * row[t.index * 3 + c];
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = acc[c];
    }
  }
  Image out;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width * 3; ++x) {
      float acc = 0;
      for (const Tap& t : ty[y])
        acc += t.weight * mid[static_cast<size_t>(t.index) * width * 3 + x];
      dst[x] = static_cast<uint8_t>(std::clamp(std::lround(acc), 0l, 255l));
    }
  }
  return out;
}

std::vector<uint8_t> compress_rgb(const uint8_t* pixels, int width, int height, int quality) {
  tjhandle h = compressor();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(h, pixels, width, 0, height, TJPF_RGB, &buf, &size, TJSAMP_420,
                             std::clamp(quality, 1, 100), 0);
  if (rc != 0) {
    const std::string why = tjGetErrorStr2(h);
    tjFree(buf);
    STOKER_THROW("TurboJPEG: compressing a ", width, "x", height, " image failed: ", why);
  }
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  return out;
}

}  // namespace stoker::data::detail
