// Fuzz target: the JPEG side of the data loader and the packer.
//
// Input: the JPEG file. Each run exercises
//   0. JpegDecoder::decode_full through a new decoder and through a reused one that decoded
//      another JPEG (a primer) just before: both fail, or both give the same pixels (a
//      loader thread reuses its decoder for every image);
//   1. detail::RestartTiles (src/data/jpeg_restart.h): parse, then slice tile ranges, valid ones
//      and out-of-range ones; a slice must be a JPEG whose header gives the slice's size;
//   2. JpegDecoder::read_header, with a pixel budget of 4096 x 4096 (stoker::Error when bad);
//   3. a crop (position and output size picked from a hash of the input) decoded by a decoder
//      that uses restart tiles and by one that does not: when both succeed, the same pixels;
//   4. detail::add_restart_markers (small images only: it holds every DCT coefficient): its
//      output must parse as restart tiles, decode to the same pixels as the input (baseline
//      inputs; both through new decoders) and give the same crop through both decoders.
// The reused decoders of 3 and 4 decode the primers just before, so they start from one state.
// stoker::Error (DecodeError) is the expected outcome of a bad file; any other exception, a
// crash, a sanitizer report or a broken invariant above is a finding.
#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "data/jpeg_restart.h"
#include "fuzz_util.h"
#include "stoker/core/error.h"
#include "stoker/data/decode.h"
#include "util/checksum.h"

namespace {

using stoker::data::CropRect;
using stoker::data::DecoderOptions;
using stoker::data::JpegDecoder;
using stoker::data::detail::RestartTiles;

constexpr int64_t kMaxPixels = int64_t{4096} * 4096;
constexpr int64_t kMaxTranscodePixels = int64_t{512} * 512;
constexpr int64_t kMaxFullPixels = int64_t{1024} * 1024;  // whole-image decodes

// Two small JPEGs with tables of their own in every slot a header can select: quantization
// tables 0-3 and DC/AC Huffman tables 0-3 (quality 37: no input's by chance). `plain` has the
// standard Huffman tables (what TurboJPEG writes, and what a new decoder falls back to when a
// header has none), `fitted` Huffman tables fitted to it by add_restart_markers in slots 0-1.
// A reused decoder decodes them just before the input, so whatever the input's header leaves
// out, the decoder holds these tables, the same for every input: a finding that depends on a
// decoder's state reproduces from the one input.
struct Primers {
  std::vector<uint8_t> plain, fitted;
};

// `jpeg` with a copy of each DQT and DHT table in the slot 2 above its own (0 -> 2, 1 -> 3).
std::vector<uint8_t> with_tables_in_every_slot(const std::vector<uint8_t>& jpeg) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);  // SOI
  size_t i = 2;
  while (i + 4 <= jpeg.size()) {  // segments up to and including SOS (TurboJPEG's own output)
    const uint8_t marker = jpeg[i + 1];
    const size_t end = i + 2 + ((size_t{jpeg[i + 2]} << 8) | jpeg[i + 3]);
    out.insert(out.end(), jpeg.begin() + i, jpeg.begin() + end);
    if (marker == 0xDB || marker == 0xC4) {
      std::vector<uint8_t> copy(jpeg.begin() + i, jpeg.begin() + end);
      for (size_t t = 4; t < copy.size();) {  // each table of the segment: its id + 2
        copy[t] = static_cast<uint8_t>(copy[t] + 2);
        if (marker == 0xDB) {
          t += 1 + ((copy[t] >> 4) != 0 ? 128 : 64);
        } else {
          size_t symbols = 0;
          for (size_t b = 1; b <= 16; ++b) symbols += copy[t + b];
          t += 17 + symbols;
        }
      }
      out.insert(out.end(), copy.begin(), copy.end());
    }
    i = end;
    if (marker == 0xDA) break;
  }
  out.insert(out.end(), jpeg.begin() + static_cast<std::ptrdiff_t>(i), jpeg.end());  // scan, EOI
  return out;
}

const Primers& primers() {
  static const Primers p = [] {
    std::vector<uint8_t> rgb(16 * 16 * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 37 % 251);
    tjhandle tj = tjInitCompress();
    unsigned char* out = nullptr;
    unsigned long size = 0;
    const int rc = tjCompress2(tj, rgb.data(), 16, 0, 16, TJPF_RGB, &out, &size, TJSAMP_420, 37, 0);
    STOKER_FUZZ_EXPECT(tj != nullptr && rc == 0, "cannot encode the primer JPEG");
    const std::vector<uint8_t> encoded(out, out + size);
    tjFree(out);
    tjDestroy(tj);
    Primers q;
    q.plain = with_tables_in_every_slot(encoded);
    const std::string why = stoker::data::detail::add_restart_markers(encoded, q.fitted);
    STOKER_FUZZ_EXPECT(why.empty(), "cannot transcode the primer JPEG: " + why);
    return q;
  }();
  return p;
}

JpegDecoder& decoder(bool restart_tiles) {
  static JpegDecoder tiled([] {
    DecoderOptions o;
    o.max_pixels = kMaxPixels;
    return o;
  }());
  static JpegDecoder whole([] {
    DecoderOptions o;
    o.max_pixels = kMaxPixels;
    o.restart_tiles = false;
    return o;
  }());
  return restart_tiles ? tiled : whole;
}

// Decodes the primers with both reused decoders: the same state in both.
void prime_reused_decoders() {
  for (bool tiles : {true, false}) {
    for (const std::vector<uint8_t>* primer : {&primers().plain, &primers().fitted}) {
      try {
        decoder(tiles).decode_full(*primer);
      } catch (const stoker::Error& e) {
        STOKER_FUZZ_EXPECT(false, std::string("a primer JPEG does not decode: ") + e.what());
      }
    }
  }
}

// A new decoder of the fuzz budget, without restart tiles: no state of earlier images.
JpegDecoder fresh_decoder(int64_t max_pixels) {
  DecoderOptions o;
  o.max_pixels = max_pixels;
  o.restart_tiles = false;
  return JpegDecoder(o);
}

// The slices of a few tile ranges; each one that succeeds must be a JPEG of the expected size.
void check_tiles(std::span<const uint8_t> jpeg) {
  RestartTiles tiles;
  if (!tiles.parse(jpeg)) return;
  STOKER_FUZZ_EXPECT(tiles.width() > 0 && tiles.height() > 0 && tiles.columns() > 0 &&
                         tiles.rows() > 0 && tiles.tile_width() > 0 && tiles.tile_height() > 0,
                     "RestartTiles::parse accepted an empty grid");
  STOKER_FUZZ_EXPECT(int64_t{tiles.columns()} * tiles.tile_width() >= tiles.width() &&
                         int64_t{tiles.rows()} * tiles.tile_height() >= tiles.height(),
                     "the tiles do not cover the image");
  const int c = tiles.columns() - 1, r = tiles.rows() - 1;
  const int ranges[][4] = {
      {0, 0, 0, 0},  {c, c, r, r},     {c / 2, c, r / 2, r}, {0, c, 0, std::min(r, 3)},
      {-1, 0, 0, 0}, {0, c + 1, 0, 0}, {0, 0, 0, r + 1},     {1, 0, 0, 0}};
  std::vector<uint8_t> slice;
  for (const auto& [col0, col1, row0, row1] : ranges) {
    const bool valid =
        0 <= col0 && col0 <= col1 && col1 <= c && 0 <= row0 && row0 <= row1 && row1 <= r;
    if (!tiles.slice(jpeg, col0, col1, row0, row1, slice)) continue;
    STOKER_FUZZ_EXPECT(valid, "RestartTiles::slice accepted an out-of-range tile range");
    STOKER_FUZZ_EXPECT(slice.size() >= 4 && slice[0] == 0xFF && slice[1] == 0xD8 &&
                           slice[slice.size() - 2] == 0xFF && slice[slice.size() - 1] == 0xD9,
                       "a slice is not SOI ... EOI");
    const int want_w =
        std::min(tiles.width(), (col1 + 1) * tiles.tile_width()) - col0 * tiles.tile_width();
    const int want_h =
        std::min(tiles.height(), (row1 + 1) * tiles.tile_height()) - row0 * tiles.tile_height();
    try {
      const stoker::data::JpegInfo info = fresh_decoder(kMaxPixels).read_header(slice);
      STOKER_FUZZ_EXPECT(info.width == want_w && info.height == want_h,
                         "a slice's header gives " + std::to_string(info.width) + "x" +
                             std::to_string(info.height) + ", expected " + std::to_string(want_w) +
                             "x" + std::to_string(want_h));
    } catch (const stoker::Error&) {
      // The input's own tables or markers are bad: the loader then decodes the whole image.
    }
  }
}

// A crop inside a w x h image and an output size, picked from the input's hash.
struct CropPick {
  CropRect rect;
  int out_w = 1, out_h = 1;
};

CropPick pick_crop(std::span<const uint8_t> bytes, int w, int h) {
  const uint64_t s = stoker::util::checksum64(bytes);
  CropPick p;
  const int cw = 1 + static_cast<int>(s % static_cast<uint64_t>(w));
  const int ch = 1 + static_cast<int>((s >> 16) % static_cast<uint64_t>(h));
  p.rect = {static_cast<double>((s >> 32) % static_cast<uint64_t>(w - cw + 1)),
            static_cast<double>((s >> 48) % static_cast<uint64_t>(h - ch + 1)),
            static_cast<double>(cw), static_cast<double>(ch)};
  p.out_w = 1 + static_cast<int>((s >> 8) % 32);
  p.out_h = 1 + static_cast<int>((s >> 24) % 32);
  return p;
}

// Decodes the crop with (`tiles`) or without restart tiles; false on a stoker::Error.
bool decode_crop(bool tiles, std::span<const uint8_t> jpeg, const CropPick& p,
                 std::vector<uint8_t>& out) {
  out.assign(static_cast<size_t>(p.out_w) * p.out_h * 3, 0);
  try {
    decoder(tiles).decode_crop(jpeg, p.rect, p.out_w, p.out_h, out.data());
    return true;
  } catch (const stoker::Error&) {
    return false;
  }
}

// The restart-tile path decodes the same pixels as the whole-image path (decode.h).
void check_crop(std::span<const uint8_t> jpeg, int w, int h, const char* what) {
  const CropPick p = pick_crop(jpeg, w, h);
  std::vector<uint8_t> a, b;
  const bool ok_tiles = decode_crop(true, jpeg, p, a);
  const bool ok_whole = decode_crop(false, jpeg, p, b);
  if (ok_tiles && ok_whole) {
    STOKER_FUZZ_EXPECT(a == b, std::string(what) + ": the crop decoded from restart tiles " +
                                   "differs from the whole-image decode");
  }
}

// A decoder is reused for every image of a loader thread: what it decodes must not depend on
// the images it decoded before. The input through a new decoder and through a reused one that
// has just decoded a primer (each of the two): both fail, or both give the same pixels (images
// of at most kMaxFullPixels).
void check_fresh_vs_reused(std::span<const uint8_t> jpeg) {
  auto decode = [&](JpegDecoder& d, stoker::data::Image& out) -> std::string {
    try {
      const stoker::data::JpegInfo info = d.read_header(jpeg);
      if (int64_t{info.width} * info.height > kMaxFullPixels) return "skip";
      out = d.decode_full(jpeg);
      return {};
    } catch (const stoker::Error& e) {
      return e.what();
    }
  };
  JpegDecoder fresh = fresh_decoder(kMaxFullPixels);
  stoker::data::Image a;
  const std::string why_fresh = decode(fresh, a);
  if (why_fresh == "skip") return;
  JpegDecoder& reused = decoder(false);
  for (const std::vector<uint8_t>* primer : {&primers().plain, &primers().fitted}) {
    try {
      reused.decode_full(*primer);
    } catch (const stoker::Error& e) {
      STOKER_FUZZ_EXPECT(false, std::string("a primer JPEG does not decode: ") + e.what());
    }
    stoker::data::Image b;
    const std::string why_reused = decode(reused, b);
    const std::string which = primer == &primers().plain ? "standard" : "fitted";
    STOKER_FUZZ_EXPECT(why_fresh.empty() == why_reused.empty(),
                       "a new decoder and one that decoded another JPEG (" + which +
                           " Huffman tables) before disagree: new: " +
                           (why_fresh.empty() ? std::string("decodes") : why_fresh) + "; reused: " +
                           (why_reused.empty() ? std::string("decodes") : why_reused));
    if (why_fresh.empty()) {
      STOKER_FUZZ_EXPECT(a.width == b.width && a.height == b.height && a.pixels == b.pixels,
                         "a new decoder and one that decoded another JPEG (" + which +
                             " Huffman tables) before decode other pixels");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> jpeg(data, size);
  check_fresh_vs_reused(jpeg);
  check_tiles(jpeg);

  stoker::data::JpegInfo info;
  try {
    info = fresh_decoder(kMaxPixels).read_header(jpeg);
  } catch (const stoker::Error&) {
    return 0;
  }
  STOKER_FUZZ_EXPECT(
      info.width > 0 && info.height > 0 && int64_t{info.width} * info.height <= kMaxPixels,
      "read_header accepted " + std::to_string(info.width) + "x" + std::to_string(info.height));
  prime_reused_decoders();
  check_crop(jpeg, info.width, info.height, "input");

  if (int64_t{info.width} * info.height > kMaxTranscodePixels) return 0;
  std::vector<uint8_t> tiled;
  if (!stoker::data::detail::add_restart_markers(jpeg, tiled).empty()) return 0;
  STOKER_FUZZ_EXPECT(tiled.size() >= 4, "add_restart_markers returned no JPEG");
  check_tiles(tiled);
  // New decoders from here on: the transcode is checked on its own, apart from decoder state.
  stoker::data::JpegInfo info2;
  try {
    info2 = fresh_decoder(kMaxPixels).read_header(tiled);
  } catch (const stoker::Error& e) {
    STOKER_FUZZ_EXPECT(false,
                       std::string("add_restart_markers wrote an unreadable JPEG: ") + e.what());
  }
  STOKER_FUZZ_EXPECT(info2.width == info.width && info2.height == info.height,
                     "add_restart_markers changed the image size");
  if (info2.components <= 4) {
    RestartTiles tiles;
    STOKER_FUZZ_EXPECT(tiles.parse(tiled), "add_restart_markers' output has no restart tiles");
  }
  if (!info.progressive) {  // progressive: libjpeg smooths blocks of incomplete scans
    stoker::data::Image before, after;
    bool ok = true;
    try {
      before = fresh_decoder(kMaxPixels).decode_full(jpeg);
    } catch (const stoker::Error&) {
      ok = false;
    }
    if (ok) {
      try {
        after = fresh_decoder(kMaxPixels).decode_full(tiled);
      } catch (const stoker::Error& e) {
        STOKER_FUZZ_EXPECT(false,
                           std::string("add_restart_markers' output does not decode: ") + e.what());
      }
      STOKER_FUZZ_EXPECT(before.width == after.width && before.height == after.height &&
                             before.pixels == after.pixels,
                         "add_restart_markers changed the pixels");
    }
  }
  prime_reused_decoders();
  check_crop(tiled, info.width, info.height, "add_restart_markers' output");
  return 0;
}
