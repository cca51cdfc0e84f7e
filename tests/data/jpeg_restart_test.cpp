// Restart-marker tiles: the pack-time transcode is lossless, a crop decoded from its tiles equals
// the whole-image path byte for byte, and corrupt or truncated tiled files behave exactly like
// the whole-image path (same bytes or a DecodeError naming the key).
#include <turbojpeg.h>

#include <cstdio>

#include "data/jpeg_restart.h"
#include "data/jpeg_test_util.h"
#include "data/resize.h"
#include "stoker/data/decode.h"
#include "test_util.h"

namespace stoker::data {
namespace {

struct Encoding {
  int subsamp;
  int flags;
  const char* name;
};
const Encoding kEncodings[] = {
    {TJSAMP_420, 0, "4:2:0"}, {TJSAMP_422, 0, "4:2:2"},
    {TJSAMP_444, 0, "4:4:4"}, {TJSAMP_440, 0, "4:4:0"},
    {TJSAMP_GRAY, 0, "gray"}, {TJSAMP_420, TJFLAG_PROGRESSIVE, "4:2:0 progressive"}};

std::vector<uint8_t> transcoded(const std::vector<uint8_t>& jpeg) {
  std::vector<uint8_t> out;
  const std::string why = detail::add_restart_markers(jpeg, out);
  EXPECT_EQ(why, "");
  return out;
}

TEST(RestartInterval, DividesTheRowNearFourMcus) {
  EXPECT_EQ(detail::restart_interval_for(32), 4);
  EXPECT_EQ(detail::restart_interval_for(21), 3);
  EXPECT_EQ(detail::restart_interval_for(25), 5);
  EXPECT_EQ(detail::restart_interval_for(14), 2);
  EXPECT_EQ(detail::restart_interval_for(2), 2);
  EXPECT_EQ(detail::restart_interval_for(31), 1);  // prime: one MCU per interval
  EXPECT_EQ(detail::restart_interval_for(1), 1);
}

TEST(RestartMarkers, TranscodeIsLosslessAndTiles) {
  // 509 px: 32 MCUs of 16 (4 per tile); 331 px: 21 MCUs of 16 (3) or 42 of 8 (3).
  for (const auto& [w, h] : {std::pair{509, 326}, std::pair{331, 263}, std::pair{97, 41}}) {
    const auto rgb = test::synthetic_rgb(w, h, 3);
    for (const Encoding& e : kEncodings) {
      const int pf = e.subsamp == TJSAMP_GRAY ? TJPF_GRAY : TJPF_RGB;
      std::vector<uint8_t> pixels = rgb;
      if (pf == TJPF_GRAY) pixels.resize(static_cast<size_t>(w) * h);
      const auto jpeg = test::tj_encode(pixels, w, h, pf, e.subsamp, 90, e.flags);
      const auto tiled = transcoded(jpeg);
      JpegDecoder dec;
      const Image a = dec.decode_full(jpeg);
      const Image b = dec.decode_full(tiled);
      ASSERT_EQ(a.pixels, b.pixels) << e.name << " " << w << "x" << h;
      EXPECT_FALSE(dec.read_header(tiled).progressive);
      detail::RestartTiles plain, tiles;
      EXPECT_FALSE(plain.parse(jpeg)) << e.name << ": no restart markers, no tiles";
      ASSERT_TRUE(tiles.parse(tiled)) << e.name;
      EXPECT_EQ(tiles.width(), w);
      EXPECT_EQ(tiles.height(), h);
      EXPECT_EQ((w + tiles.tile_width() - 1) / tiles.tile_width(), tiles.columns()) << e.name;
      // The whole image as one slice is the same JPEG content.
      std::vector<uint8_t> all;
      ASSERT_TRUE(tiles.slice(tiled, 0, tiles.columns() - 1, 0, tiles.rows() - 1, all));
      EXPECT_EQ(dec.decode_full(all).pixels, a.pixels) << e.name;
      if (w == 509 && e.subsamp == TJSAMP_420 && e.flags == 0) {
        std::printf("  509x326 q90 4:2:0: %zu bytes -> %zu with restart markers (%+.1f %%)\n",
                    jpeg.size(), tiled.size(), 100.0 * tiled.size() / jpeg.size() - 100.0);
      }
    }
  }
}

// CMYK with and without the Adobe marker (which says whether values are inverted): the rewrite
// keeps the marker's presence, so the decoded RGB is unchanged, whole and tiled.
TEST(RestartMarkers, CmykKeepsItsInversionConvention) {
  const int w = 211, h = 97;
  std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>((i * 37 + i / 211) & 255);
  for (bool adobe : {false, true}) {
    const auto jpeg = test::encode_cmyk_libjpeg(cmyk, w, h, adobe, 95);
    const auto tiled = transcoded(jpeg);
    JpegDecoder dec;
    ASSERT_EQ(dec.decode_full(tiled).pixels, dec.decode_full(jpeg).pixels) << "adobe " << adobe;
    JpegDecoder with_tiles({.dct_scaling = false});
    JpegDecoder without({.dct_scaling = false, .restart_tiles = false});
    std::vector<uint8_t> a(64 * 64 * 3), b(a.size());
    with_tiles.decode_crop(tiled, {50, 20, 120, 70}, 64, 64, a.data(), "cmyk");
    without.decode_crop(jpeg, {50, 20, 120, 70}, 64, 64, b.data(), "cmyk");
    EXPECT_EQ(a, b) << "adobe " << adobe;
    EXPECT_EQ(with_tiles.stage_times().tiled, 1);
  }
}

// A slice of tiles decodes to exactly the same pixels as that area of the whole image, away
// from the slice's inner edges (2 pixels: chroma upsampling sees an edge there).
TEST(RestartMarkers, SliceEqualsTheSameAreaOfTheWholeImage) {
  const int w = 509, h = 326;
  const auto rgb = test::synthetic_rgb(w, h, 4);
  for (const Encoding& e : kEncodings) {
    if (e.subsamp == TJSAMP_GRAY) continue;
    const auto tiled = transcoded(test::tj_encode(rgb, w, h, TJPF_RGB, e.subsamp, 85, e.flags));
    JpegDecoder dec;
    const Image whole = dec.decode_full(tiled);
    detail::RestartTiles tiles;
    ASSERT_TRUE(tiles.parse(tiled));
    const int tw = tiles.tile_width(), th = tiles.tile_height();
    for (const auto& [c0, c1, r0, r1] :
         {std::array{1, 2, 1, 3}, std::array{0, 0, 0, 0},
          std::array{tiles.columns() - 2, tiles.columns() - 1, 2, tiles.rows() - 1}}) {
      std::vector<uint8_t> part;
      ASSERT_TRUE(tiles.slice(tiled, c0, c1, r0, r1, part));
      const Image s = dec.decode_full(part);
      ASSERT_EQ(s.width, std::min(w, (c1 + 1) * tw) - c0 * tw);
      ASSERT_EQ(s.height, std::min(h, (r1 + 1) * th) - r0 * th);
      const int x_in = c0 > 0 ? 2 : 0, y_in = r0 > 0 ? 2 : 0;
      const int x_out = c1 + 1 < tiles.columns() ? 2 : 0, y_out = r1 + 1 < tiles.rows() ? 2 : 0;
      for (int y = y_in; y < s.height - y_out; ++y) {
        for (int x = x_in; x < s.width - x_out; ++x) {
          for (int c = 0; c < 3; ++c) {
            ASSERT_EQ(s.pixels[(static_cast<size_t>(y) * s.width + x) * 3 + c],
                      whole.pixels[(static_cast<size_t>(y + r0 * th) * w + x + c0 * tw) * 3 + c])
                << e.name << " tiles " << c0 << ".." << c1 << " x " << r0 << ".." << r1 << " at "
                << x << "," << y;
          }
        }
      }
    }
  }
}

// The decoder's tiled crops against its whole-image path and against full decode -> resize: the
// same bytes, for RandomResizedCrop draws and crops at every edge, flipped or not.
TEST(JpegDecoder, TiledCropEqualsWholeImagePath) {
  int64_t tiled_crops = 0, crops = 0;
  for (const auto& [w, h] : {std::pair{509, 326}, std::pair{331, 500}}) {
    const auto rgb = test::synthetic_rgb(w, h, 6);
    for (const Encoding& e : kEncodings) {
      const int pf = e.subsamp == TJSAMP_GRAY ? TJPF_GRAY : TJPF_RGB;
      std::vector<uint8_t> pixels = rgb;
      if (pf == TJPF_GRAY) pixels.resize(static_cast<size_t>(w) * h);
      const auto tiled = transcoded(test::tj_encode(pixels, w, h, pf, e.subsamp, 92, e.flags));
      JpegDecoder with_tiles({.dct_scaling = false});
      JpegDecoder without({.dct_scaling = false, .restart_tiles = false});
      const Image full = JpegDecoder().decode_full(tiled);
      std::vector<CropRect> rects = {{0, 0, double(w), double(h)},
                                     {0, 0, 37, 29},
                                     {w - 41.0, h - 33.0, 41, 33},
                                     {w - 100.5, 0, 100.5, 60},
                                     {0, h - 70.25, 90, 70.25},
                                     {17.5, 16, 64, 48},
                                     {32, 48, 100, 80},  // starting on iMCU boundaries
                                     {31, 47, 130, 97},  // one pixel before them
                                     {64, 32, 96, 64}};
      for (uint64_t i = 0; i < 40; ++i) rects.push_back(random_resized_crop(w, h, 3, i, {}).rect);
      for (size_t k = 0; k < rects.size(); ++k) {
        const int out = k % 2 == 0 ? 224 : 96;
        const bool flip = k % 3 == 0;
        std::vector<uint8_t> a(static_cast<size_t>(out) * out * 3), b(a.size());
        with_tiles.decode_crop(tiled, rects[k], out, out, a.data(), "k", flip);
        without.decode_crop(tiled, rects[k], out, out, b.data(), "k", flip);
        ASSERT_EQ(a, b) << e.name << " " << w << "x" << h << " crop " << rects[k].x << ","
                        << rects[k].y << " " << rects[k].width << "x" << rects[k].height;
        // Both against the ground truth: the whole image decoded, then the same resize.
        std::vector<uint8_t> truth(a.size());
        resize_rgb({full.pixels.data(), full.width, full.height, size_t(full.width) * 3},
                   rects[k].x, rects[k].y, rects[k].width, rects[k].height, out, out, truth.data(),
                   flip);
        if (a != truth) {
          size_t first = 0;
          while (a[first] == truth[first]) ++first;
          int maxd = 0;
          for (size_t q = 0; q < a.size(); ++q) maxd = std::max(maxd, std::abs(a[q] - truth[q]));
          ADD_FAILURE() << e.name << " crop " << k << " " << rects[k].x << "," << rects[k].y << " "
                        << rects[k].width << "x" << rects[k].height << " out " << out << " flip "
                        << flip << " first diff px " << first / 3 % out << "," << first / 3 / out
                        << " max " << maxd;
        }
        ++crops;
      }
      tiled_crops += with_tiles.stage_times().tiled;
      EXPECT_EQ(without.stage_times().tiled, 0);
    }
  }
  EXPECT_EQ(tiled_crops, crops) << "every crop of a tiled JPEG takes the tiled path";
}

// Corrupt or truncated tiled files: the tiled path gives what the whole-image path gives (the
// same bytes, or a DecodeError naming the key), never a crash or a silently different image.
TEST(JpegDecoder, CorruptTiledJpegBehavesLikeTheWholeImagePath) {
  const int w = 509, h = 326;
  const auto rgb = test::synthetic_rgb(w, h, 8);
  const auto good = transcoded(test::tj_encode(rgb, w, h, TJPF_RGB, TJSAMP_420, 90));
  JpegDecoder with_tiles({.dct_scaling = false});
  JpegDecoder without({.dct_scaling = false, .restart_tiles = false});
  const CropRect crops[] = {{100, 80, 200, 150}, {0, 0, double(w), double(h)}, {400, 250, 100, 70}};
  int errors = 0, cases = 0;
  auto outcome = [](JpegDecoder& dec, const std::vector<uint8_t>& jpeg, const CropRect& c,
                    std::vector<uint8_t>& px) -> std::string {
    try {
      dec.decode_crop(jpeg, c, 64, 64, px.data(), "bad/7");
      return "ok";
    } catch (const DecodeError& e) {
      EXPECT_EQ(e.key(), "bad/7");
      return "error";
    }
  };
  std::vector<std::vector<uint8_t>> variants;
  for (size_t cut : {good.size() / 4, good.size() / 2, good.size() - 40, good.size() - 2}) {
    variants.emplace_back(good.begin(), good.begin() + cut);  // truncated
  }
  for (size_t at = 700; at < good.size(); at += good.size() / 7) {
    auto v = good;  // a restart marker (or data) byte changed
    for (size_t i = at; i + 1 < v.size(); ++i) {
      if (v[i] == 0xFF && v[i + 1] >= 0xD0 && v[i + 1] <= 0xD7) {
        v[i + 1] = static_cast<uint8_t>(0xD0 + ((v[i + 1] - 0xD0 + 3) & 7));
        break;
      }
    }
    variants.push_back(v);
    auto d = good;
    d[at] ^= 0x5A;
    variants.push_back(d);
  }
  for (const auto& v : variants) {
    for (const CropRect& c : crops) {
      std::vector<uint8_t> a(64 * 64 * 3, 1), b(64 * 64 * 3, 2);
      const std::string ra = outcome(with_tiles, v, c, a);
      const std::string rb = outcome(without, v, c, b);
      ++cases;
      if (ra == "error" || rb == "error") ++errors;
      if (ra == "ok" && rb == "ok") {
        EXPECT_EQ(a, b) << "size " << v.size();
      } else if (ra != rb) {
        // Where the two paths may differ: the tiled path decodes fewer bytes, so damage it
        // never reads is not an error there (the whole path decodes every row above the crop).
        EXPECT_EQ(ra, "ok") << "the tiled path failed where the whole path did not";
      }
    }
  }
  std::printf("  %d corrupt/truncated cases, %d raised DecodeError\n", cases, errors);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace stoker::data
