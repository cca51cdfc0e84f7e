// Synthetic images and JPEG encoders for the decode/transform tests (TurboJPEG's tjCompress2).
#pragma once

#include <turbojpeg.h>

#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace stoker::test {

// Smooth gradients, a disc, a rectangle and a little deterministic texture: photo-like enough
// that JPEG and resampling errors look like they do on real images.
inline std::vector<uint8_t> synthetic_rgb(int w, int h, uint32_t seed = 1) {
  std::vector<uint8_t> img(static_cast<size_t>(w) * h * 3);
  uint32_t s = seed * 2654435761u + 12345u;
  const double cx = w * (0.3 + 0.4 * ((seed * 37) % 100) / 100.0), cy = h * 0.45;
  const double radius = 0.25 * std::min(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      s = s * 1664525u + 1013904223u;
      const int noise = static_cast<int>((s >> 28) & 7) - 3;
      double r = 255.0 * x / std::max(1, w - 1);
      double g = 255.0 * y / std::max(1, h - 1);
      double b = 128.0 + 100.0 * std::sin(0.05 * x + 0.08 * y);
      const double dx = x - cx, dy = y - cy;
      if (dx * dx + dy * dy < radius * radius) {
        r = 230;
        g = 40 + 0.3 * g;
        b = 60;
      }
      if (x > w / 8 && x < w / 3 && y > h * 2 / 3 && y < h * 9 / 10) {
        r = 20;
        g = 200;
        b = 220;
      }
      uint8_t* p = &img[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(std::clamp(r + noise, 0.0, 255.0));
      p[1] = static_cast<uint8_t>(std::clamp(g + noise, 0.0, 255.0));
      p[2] = static_cast<uint8_t>(std::clamp(b + noise, 0.0, 255.0));
    }
  }
  return img;
}

// Compresses `pixels` (pixel format `pf`: TJPF_RGB, TJPF_GRAY, TJPF_CMYK) with tjCompress2.
inline std::vector<uint8_t> tj_encode(const std::vector<uint8_t>& pixels, int w, int h, int pf,
                                      int subsamp, int quality, int flags = 0) {
  tjhandle handle = tjInitCompress();
  if (handle == nullptr) throw std::runtime_error("tjInitCompress failed");
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc =
      tjCompress2(handle, pixels.data(), w, 0, h, pf, &out, &size, subsamp, quality, flags);
  std::string msg = rc != 0 ? tjGetErrorStr2(handle) : "";
  tjDestroy(handle);
  if (rc != 0) throw std::runtime_error("tjCompress2 failed: " + msg);
  std::vector<uint8_t> jpeg(out, out + size);
  tjFree(out);
  return jpeg;
}

inline std::vector<uint8_t> encode_rgb(const std::vector<uint8_t>& rgb, int w, int h,
                                       int quality = 90, int subsamp = TJSAMP_420) {
  return tj_encode(rgb, w, h, TJPF_RGB, subsamp, quality);
}

// 4-component JPEG through the libjpeg compress API, stored as plain CMYK (no YCCK transform),
// with or without the Adobe marker (whose presence means "values are inverted").
inline std::vector<uint8_t> encode_cmyk_libjpeg(const std::vector<uint8_t>& cmyk, int w, int h,
                                                bool adobe_marker, int quality = 98) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);  // test-only: a libjpeg error here exits the test
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, JCS_CMYK);
  cinfo.write_Adobe_marker = adobe_marker ? TRUE : FALSE;
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&cmyk[static_cast<size_t>(cinfo.next_scanline) * w * 4]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> jpeg(out, out + size);
  std::free(out);
  return jpeg;
}

// Decodes with TurboJPEG (an independent path to compare against).
inline std::vector<uint8_t> tj_decode_rgb(const std::vector<uint8_t>& jpeg, int& w, int& h) {
  tjhandle handle = tjInitDecompress();
  int subsamp = 0, cs = 0;
  if (tjDecompressHeader3(handle, jpeg.data(), jpeg.size(), &w, &h, &subsamp, &cs) != 0) {
    tjDestroy(handle);
    throw std::runtime_error("tjDecompressHeader3 failed");
  }
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  const int rc = tjDecompress2(handle, jpeg.data(), jpeg.size(), rgb.data(), w, 0, h, TJPF_RGB, 0);
  tjDestroy(handle);
  if (rc != 0) throw std::runtime_error("tjDecompress2 failed");
  return rgb;
}

// Mean and max absolute difference of two equal-size byte buffers.
struct Diff {
  double mean = 0.0;
  int max = 0;
};
inline Diff diff(const uint8_t* a, const uint8_t* b, size_t n) {
  Diff d;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const int e = std::abs(int(a[i]) - int(b[i]));
    sum += e;
    d.max = std::max(d.max, e);
  }
  d.mean = n ? sum / n : 0.0;
  return d;
}
inline Diff diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) throw std::runtime_error("diff: sizes differ");
  return diff(a.data(), b.data(), a.size());
}

}  // namespace stoker::test
