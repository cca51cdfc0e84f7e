// TurboJPEG helpers for packing. Validation decodes every pixel (a header alone does not catch a
// truncated file); libjpeg-turbo's warnings (e.g. "premature end of data") count as failures.
#include "data/pack_jpeg.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "stoker/core/error.h"

namespace stoker::data::detail {

namespace {

struct TjHandle {
  explicit TjHandle(bool compress) : h(compress ? tjInitCompress() : tjInitDecompress()) {
    STOKER_CHECK(h != nullptr, "TurboJPEG: cannot create a ",
                 compress ? "compressor" : "decompressor", ": ", tjGetErrorStr2(nullptr));
  }
  ~TjHandle() { tjDestroy(h); }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  tjhandle h;
};

// A failed call can leave a TurboJPEG 2.x decompressor in a state where the next header read
// reports 0x0 dimensions, so a handle that failed is replaced before its next use.
thread_local std::unique_ptr<TjHandle> t_decompressor;

tjhandle decompressor() {
  if (!t_decompressor) t_decompressor = std::make_unique<TjHandle>(false);
  return t_decompressor->h;
}

std::string decompress_failed(const char* what) {
  std::string why = std::string(what) + tjGetErrorStr2(t_decompressor->h);
  t_decompressor.reset();
  return why;
}

tjhandle compressor() {
  thread_local TjHandle handle(true);
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

std::string decompress_rgb(const uint8_t* jpeg, size_t size, RgbImage& out) {
  if (size == 0) return "empty file";
  if (size < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8 || jpeg[2] != 0xFF) {
    return "not a JPEG (no start-of-image marker)";
  }
  tjhandle h = decompressor();
  int w = 0, h_px = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(h, jpeg, static_cast<unsigned long>(size), &w, &h_px, &subsamp,
                          &colorspace) != 0) {
    return decompress_failed("not a readable JPEG: ");
  }
  if (w <= 0 || h_px <= 0) {
    t_decompressor.reset();
    return "JPEG with empty dimensions";
  }
  out.width = w;
  out.height = h_px;
  out.pixels.resize(static_cast<size_t>(w) * static_cast<size_t>(h_px) * 3);
  if (tjDecompress2(h, jpeg, static_cast<unsigned long>(size), out.pixels.data(), w, 0, h_px,
                    TJPF_RGB, 0) != 0) {
    return decompress_failed("corrupt JPEG: ");
  }
  return {};
}

RgbImage resize_area(const RgbImage& in, int width, int height) {
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
  RgbImage out;
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
