// JpegDecoder and the resizer: decode against TurboJPEG, crop-before-decode against
// (full decode -> same resize), DCT scaling tolerance, colour spaces, and every bad input.
#include "stoker/data/decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "data/jpeg_test_util.h"
#include "data/resize.h"
#include "test_util.h"

namespace stoker::data {
namespace {

using test::Diff;

std::vector<uint8_t> crop_reference(const Image& full, const CropRect& c, int ow, int oh,
                                    bool flip = false) {
  std::vector<uint8_t> out(static_cast<size_t>(ow) * oh * 3);
  const RgbView view{
      full.pixels.data(), full.width, full.height, static_cast<size_t>(full.width) * 3, 0, 0};
  resize_rgb(view, c.x, c.y, c.width, c.height, ow, oh, out.data(), flip);
  return out;
}

// Offset of the SOFn marker's height field (FF C0..C2, length, precision, height, width).
size_t sof_height_offset(const std::vector<uint8_t>& jpeg) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && (jpeg[i + 1] == 0xC0 || jpeg[i + 1] == 0xC1 || jpeg[i + 1] == 0xC2)) {
      return i + 5;
    }
  }
  return 0;
}

template <typename F>
DecodeError expect_decode_error(F&& f) {
  try {
    f();
  } catch (const DecodeError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a DecodeError";
  return DecodeError("", "", "", "", "");
}

TEST(JpegDecoder, FullDecodeMatchesTurboJpegAndSource) {
  JpegDecoder dec;
  for (auto [w, h] : {std::pair{97, 61}, {300, 200}, {640, 480}}) {
    const auto rgb = test::synthetic_rgb(w, h, w);
    const auto jpeg = test::encode_rgb(rgb, w, h, 95);
    const JpegInfo info = dec.read_header(jpeg, "k");
    EXPECT_EQ(info.width, w);
    EXPECT_EQ(info.height, h);
    EXPECT_EQ(info.components, 3);
    const Image img = dec.decode_full(jpeg, "k");
    ASSERT_EQ(img.width, w);
    ASSERT_EQ(img.height, h);
    int tw = 0, th = 0;
    const auto ref = test::tj_decode_rgb(jpeg, tw, th);
    const Diff same = test::diff(img.pixels, ref);
    EXPECT_EQ(same.max, 0) << w << "x" << h << " differs from tjDecompress2";
    const Diff src = test::diff(img.pixels, rgb);
    EXPECT_LT(src.mean, 3.0) << w << "x" << h;
  }
}

TEST(JpegDecoder, GrayscaleBecomesRgb) {
  const int w = 300, h = 200;
  const auto rgb = test::synthetic_rgb(w, h);
  std::vector<uint8_t> gray(static_cast<size_t>(w) * h);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = rgb[3 * i + 1];
  const auto jpeg = test::tj_encode(gray, w, h, TJPF_GRAY, TJSAMP_GRAY, 95);
  JpegDecoder dec;
  EXPECT_EQ(dec.read_header(jpeg).components, 1);
  const Image img = dec.decode_full(jpeg);
  ASSERT_EQ(img.pixels.size(), static_cast<size_t>(w) * h * 3);
  double err = 0;
  for (size_t i = 0; i < gray.size(); ++i) {
    ASSERT_EQ(img.pixels[3 * i], img.pixels[3 * i + 1]);
    ASSERT_EQ(img.pixels[3 * i], img.pixels[3 * i + 2]);
    err += std::abs(int(img.pixels[3 * i]) - int(gray[i]));
  }
  EXPECT_LT(err / gray.size(), 2.0);
  // Crop path too.
  std::vector<uint8_t> out(64 * 48 * 3);
  dec.decode_crop(jpeg, {10, 20, 200, 150}, 64, 48, out.data(), "gray");
  EXPECT_LE(test::diff(out, crop_reference(img, {10, 20, 200, 150}, 64, 48)).mean, 1.0);
}

TEST(JpegDecoder, CmykBecomesRgb) {
  // Adobe (inverted) CMYK: stored K' = max(R,G,B), C' = R*255/K' ..., so R = C'K'/255.
  const int w = 160, h = 120;
  const auto rgb = test::synthetic_rgb(w, h, 7);
  std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
    const int k = std::max({rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2], uint8_t{1}});
    for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = static_cast<uint8_t>(rgb[3 * i + c] * 255 / k);
    cmyk[4 * i + 3] = static_cast<uint8_t>(k);
  }
  const auto jpeg = test::tj_encode(cmyk, w, h, TJPF_CMYK, TJSAMP_444, 98);
  JpegDecoder dec;
  EXPECT_EQ(dec.read_header(jpeg).components, 4);
  const Image img = dec.decode_full(jpeg, "cmyk");
  const Diff d = test::diff(img.pixels, rgb);
  EXPECT_LT(d.mean, 3.0) << "max " << d.max;
  // Plain CMYK through the libjpeg compress API: with the Adobe marker (inverted values, as
  // above) and without it (straight values: C = 255 - stored inverted C).
  const auto adobe = test::encode_cmyk_libjpeg(cmyk, w, h, true);
  EXPECT_LT(test::diff(dec.decode_full(adobe, "adobe").pixels, rgb).mean, 3.0);
  std::vector<uint8_t> straight(cmyk.size());
  for (size_t i = 0; i < cmyk.size(); ++i) straight[i] = static_cast<uint8_t>(255 - cmyk[i]);
  const auto plain = test::encode_cmyk_libjpeg(straight, w, h, false);
  EXPECT_LT(test::diff(dec.decode_full(plain, "plain").pixels, rgb).mean, 3.0);

  std::vector<uint8_t> out(50 * 40 * 3);
  JpegDecoder exact({.dct_scaling = false});
  exact.decode_crop(jpeg, {8, 4, 100, 80}, 50, 40, out.data(), "cmyk");
  EXPECT_EQ(test::diff(out, crop_reference(img, {8, 4, 100, 80}, 50, 40)).max, 0);
  dec.decode_crop(jpeg, {8, 4, 100, 80}, 50, 40, out.data(), "cmyk");  // at 4/8 scale
  EXPECT_EQ(dec.last_scale_num(), 4);
  EXPECT_LT(test::diff(out, crop_reference(img, {8, 4, 100, 80}, 50, 40)).mean, 2.5);
}

struct CropCase {
  int w, h;
  CropRect crop;
  int ow, oh;
};

// Crop-before-decode vs full decode -> the same resize on the same region.
TEST(JpegDecoder, CropMatchesFullDecodeThenResize) {
  const std::vector<CropCase> cases = {
      {97, 61, {0, 0, 97, 61}, 32, 32},           {97, 61, {13, 7, 50, 41}, 64, 64},
      {300, 200, {37, 21, 150, 120}, 224, 224},   {300, 200, {150, 100, 150, 100}, 56, 56},
      {300, 200, {1, 3, 298, 196}, 100, 70},      {640, 480, {0, 0, 640, 480}, 224, 224},
      {640, 480, {203, 117, 333, 251}, 224, 224}, {640, 480, {600, 440, 40, 40}, 224, 224},
      {640, 480, {17, 301, 450, 179}, 112, 64},   {640, 480, {5, 5, 620, 470}, 80, 60},
  };
  double worst_mean_scaled = 0.0;
  int worst_max_scaled = 0, scaled_cases = 0;
  for (bool dct : {false, true}) {
    JpegDecoder dec({.dct_scaling = dct});
    for (const CropCase& c : cases) {
      const auto jpeg = test::encode_rgb(test::synthetic_rgb(c.w, c.h, c.w + c.h), c.w, c.h, 90);
      const Image full = dec.decode_full(jpeg, "full");
      const auto ref = crop_reference(full, c.crop, c.ow, c.oh);
      std::vector<uint8_t> out(ref.size(), 0xAB);
      dec.decode_crop(jpeg, c.crop, c.ow, c.oh, out.data(), "crop");
      const Diff d = test::diff(out, ref);
      const int m = dec.last_scale_num();
      std::printf("  %dx%d crop (%g,%g %gx%g) -> %dx%d scale %d/8: mean %.3f max %d\n", c.w, c.h,
                  c.crop.x, c.crop.y, c.crop.width, c.crop.height, c.ow, c.oh, m, d.mean, d.max);
      if (m == 8) {
        // Same pixels decoded, same resampler: identical.
        EXPECT_EQ(d.max, 0) << "crop decode differs from full decode";
      } else {
        EXPECT_TRUE(dct);
        ++scaled_cases;
        worst_mean_scaled = std::max(worst_mean_scaled, d.mean);
        worst_max_scaled = std::max(worst_max_scaled, d.max);
        // Measured: mean <= 0.74, max <= 25 on these images (q90 4:2:0).
        EXPECT_LT(d.mean, 1.5);
        EXPECT_LE(d.max, 40);
      }
    }
  }
  EXPECT_GE(scaled_cases, 4);
  std::printf("  DCT-scaled crops: worst mean %.3f, worst max %d (u8 levels)\n", worst_mean_scaled,
              worst_max_scaled);
}

// The same exactness for 4:4:4, 4:2:2, 4:4:0 and progressive files (different iMCU sizes and
// jpeg_skip_scanlines paths).
TEST(JpegDecoder, CropMatchesAcrossSubsamplingAndProgressive) {
  const int w = 333, h = 251;
  const auto rgb = test::synthetic_rgb(w, h, 9);
  const std::vector<CropRect> crops = {
      {0, 0, 333, 251}, {41, 77, 120, 90}, {200, 150, 133, 101}, {17, 3, 300, 240}};
  double worst_mean = 0.0;
  int worst_max = 0;
  for (int subsamp : {TJSAMP_444, TJSAMP_422, TJSAMP_440, TJSAMP_420}) {
    for (int flags : {0, TJFLAG_PROGRESSIVE}) {
      const auto jpeg = test::tj_encode(rgb, w, h, TJPF_RGB, subsamp, 90, flags);
      for (bool dct : {false, true}) {
        JpegDecoder dec({.dct_scaling = dct});
        EXPECT_EQ(dec.read_header(jpeg).progressive, flags != 0);
        const Image full = dec.decode_full(jpeg);
        for (const CropRect& c : crops) {
          for (int out : {40, 64, 150}) {
            const auto ref = crop_reference(full, c, out, out);
            std::vector<uint8_t> got(ref.size(), 0xCD);
            dec.decode_crop(jpeg, c, out, out, got.data(), "s");
            const Diff d = test::diff(got, ref);
            if (dec.last_scale_num() == 8) {
              ASSERT_EQ(d.max, 0) << "subsamp " << subsamp << " flags " << flags << " crop " << c.x
                                  << "," << c.y << " out " << out;
            } else {
              // Scaled IDCT vs full decode + area filter; worst measured: 4:4:0 at 2/8,
              // mean 1.80, max 35 (40x40 from the whole 333x251 image).
              worst_mean = std::max(worst_mean, d.mean);
              worst_max = std::max(worst_max, d.max);
              ASSERT_LT(d.mean, 2.5) << "subsamp " << subsamp << " flags " << flags << " scale "
                                     << dec.last_scale_num() << " out " << out;
              ASSERT_LE(d.max, 48);
            }
          }
        }
      }
    }
  }
  std::printf("  DCT-scaled crops over subsampling modes: worst mean %.3f, worst max %d\n",
              worst_mean, worst_max);
}

TEST(JpegDecoder, ChoosesLargestUsefulDctScale) {
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(640, 480), 640, 480);
  JpegDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  dec.decode_crop(jpeg, {0, 0, 640, 480}, 224, 224, out.data());
  EXPECT_EQ(dec.last_scale_num(), 4);  // 480*4/8 = 240 >= 224; 3/8 gives 180
  dec.decode_crop(jpeg, {0, 0, 400, 400}, 224, 224, out.data());
  EXPECT_EQ(dec.last_scale_num(), 8);  // < 2x: no scaling
  std::vector<uint8_t> small(32 * 32 * 3);
  dec.decode_crop(jpeg, {0, 0, 640, 480}, 32, 32, small.data());
  EXPECT_EQ(dec.last_scale_num(), 1);  // 480/8 = 60 >= 32
}

TEST(JpegDecoder, FlipMirrorsExactly) {
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(300, 200), 300, 200);
  JpegDecoder dec;
  const int ow = 67, oh = 45;
  std::vector<uint8_t> a(ow * oh * 3), b(ow * oh * 3);
  dec.decode_crop(jpeg, {20, 30, 200, 150}, ow, oh, a.data(), "", false);
  dec.decode_crop(jpeg, {20, 30, 200, 150}, ow, oh, b.data(), "", true);
  for (int y = 0; y < oh; ++y) {
    for (int x = 0; x < ow; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(a[(y * ow + x) * 3 + c], b[(y * ow + (ow - 1 - x)) * 3 + c]);
      }
    }
  }
}

TEST(JpegDecoder, RejectsEmptyInputNamingKey) {
  JpegDecoder dec;
  const std::vector<uint8_t> empty;
  const DecodeError e = expect_decode_error([&] { dec.decode_full(empty, "sample-000042"); });
  EXPECT_EQ(e.key(), "sample-000042");
  EXPECT_NE(std::string(e.what()).find("sample-000042"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  EXPECT_FALSE(e.hint().empty());
}

TEST(JpegDecoder, RejectsNonJpeg) {
  JpegDecoder dec;
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13};
  DecodeError e = expect_decode_error([&] { dec.read_header(png, "img7.png"); });
  EXPECT_NE(std::string(e.what()).find("not a JPEG"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("PNG"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("img7.png"), std::string::npos) << e.what();
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  e = expect_decode_error([&] { dec.decode_full(text, "txt"); });
  EXPECT_NE(std::string(e.what()).find("not a JPEG"), std::string::npos) << e.what();
  // FF D8 and then garbage: libjpeg's own error, still a DecodeError.
  const std::vector<uint8_t> fake = {0xFF, 0xD8, 0x00, 0x01, 0x02, 0x03, 0x04};
  e = expect_decode_error([&] { dec.decode_full(fake, "fake"); });
  EXPECT_NE(std::string(e.what()).find("fake"), std::string::npos) << e.what();
}

TEST(JpegDecoder, TruncatedJpegIsAnErrorNotPadding) {
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(300, 200), 300, 200);
  JpegDecoder dec;
  for (double keep : {0.3, 0.6, 0.95}) {
    std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() * keep));
    const DecodeError e = expect_decode_error([&] { dec.decode_full(cut, "trunc"); });
    EXPECT_NE(e.reason().find("truncated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("trunc"), std::string::npos);
    // A crop reaching the bottom rows sees it too.
    std::vector<uint8_t> out(64 * 64 * 3);
    expect_decode_error([&] { dec.decode_crop(cut, {0, 0, 300, 200}, 64, 64, out.data(), "t"); });
  }
  // With warnings tolerated libjpeg pads silently (documenting why the default is strict).
  JpegDecoder lenient({.warnings_are_errors = false});
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() * 0.6));
  EXPECT_NO_THROW(lenient.decode_full(cut, "lenient"));
}

TEST(JpegDecoder, HugeHeaderRejectedBeforeAllocation) {
  auto jpeg = test::encode_rgb(test::synthetic_rgb(97, 61), 97, 61);
  const size_t at = sof_height_offset(jpeg);
  ASSERT_GT(at, 0u);
  jpeg[at] = 60000 >> 8;  // height
  jpeg[at + 1] = 60000 & 0xFF;
  jpeg[at + 2] = 60000 >> 8;  // width
  jpeg[at + 3] = 60000 & 0xFF;
  JpegDecoder dec;
  const auto t0 = std::chrono::steady_clock::now();
  DecodeError e = expect_decode_error([&] { dec.decode_full(jpeg, "huge"); });
  EXPECT_NE(std::string(e.what()).find("60000x60000"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("huge"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("max_pixels"), std::string::npos);
  std::vector<uint8_t> out(224 * 224 * 3);
  e = expect_decode_error([&] {
    dec.decode_crop(jpeg, {0, 0, 100, 100}, 224, 224, out.data(), "huge");
  });
  e = expect_decode_error([&] { dec.read_header(jpeg, "huge"); });
  // A 10.8 GB output buffer was never touched: all three calls return at once.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // The budget is configurable.
  JpegDecoder small({.max_pixels = 1000});
  const auto ok = test::encode_rgb(test::synthetic_rgb(97, 61), 97, 61);
  expect_decode_error([&] { small.read_header(ok, "budget"); });
}

TEST(JpegDecoder, CorruptEntropyDataNeverCrashes) {
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(300, 200), 300, 200);
  JpegDecoder dec;
  int errors = 0;
  for (int trial = 0; trial < 40; ++trial) {
    auto bad = jpeg;
    for (int k = 0; k < 8; ++k) {
      const size_t at =
          bad.size() / 3 + (static_cast<size_t>(trial) * 7919 + k * 104729) % (bad.size() / 2);
      bad[at] ^= static_cast<uint8_t>(0x5A + trial);
    }
    try {
      dec.decode_full(bad, "bad");
    } catch (const DecodeError& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos);
    }
  }
  std::printf("  %d of 40 corrupted files raised DecodeError (the rest decode with garbage)\n",
              errors);
  // And the decoder still works after all of that.
  const Image img = dec.decode_full(jpeg, "good");
  EXPECT_EQ(img.width, 300);
}

TEST(JpegDecoder, ReusableAfterErrors) {
  JpegDecoder dec;
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(97, 61), 97, 61);
  std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  std::vector<uint8_t> out(32 * 32 * 3);
  for (int i = 0; i < 3; ++i) {
    expect_decode_error([&] { dec.decode_full(cut, "cut"); });
    dec.decode_crop(jpeg, {0, 0, 97, 61}, 32, 32, out.data(), "ok");
    EXPECT_EQ(dec.decode_full(jpeg).width, 97);
  }
}

// `jpeg` without its marker segments of type `marker` (FF xx) before the first scan: an
// "abbreviated" JPEG that relies on tables it does not hold.
std::vector<uint8_t> without_segments(const std::vector<uint8_t>& jpeg, uint8_t marker) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);
  size_t i = 2;
  while (i + 4 <= jpeg.size() && jpeg[i] == 0xFF && jpeg[i + 1] != 0xDA) {
    const size_t end = i + 2 + (size_t{jpeg[i + 2]} << 8 | jpeg[i + 3]);
    if (jpeg[i + 1] != marker) out.insert(out.end(), jpeg.begin() + i, jpeg.begin() + end);
    i = end;
  }
  out.insert(out.end(), jpeg.begin() + i, jpeg.end());
  return out;
}

// A decoder reused across images decodes each as a new one would: tables a JPEG does not
// define are not taken from the image decoded before (found by the jpeg fuzz target: a
// JPEG without Huffman tables decoded with the previous image's fitted tables, so its pixels
// depended on what the thread had decoded last).
TEST(JpegDecoder, AReusedDecoderUsesNoTablesOfThePreviousImage) {
  const auto rgb = test::synthetic_rgb(64, 48);
  // Fitted (optimized) Huffman tables in slots 0 and 1: a progressive JPEG.
  const auto fitted = test::tj_encode(rgb, 64, 48, TJPF_RGB, TJSAMP_420, 90, TJFLAG_PROGRESSIVE);
  const auto baseline = test::encode_rgb(rgb, 64, 48);  // the standard Huffman tables
  const auto no_dht = without_segments(baseline, 0xC4);
  const auto no_dqt = without_segments(baseline, 0xDB);
  ASSERT_LT(no_dht.size(), baseline.size());
  ASSERT_LT(no_dqt.size(), baseline.size());

  JpegDecoder fresh;
  const Image expected = fresh.decode_full(baseline);
  EXPECT_EQ(JpegDecoder().decode_full(no_dht).pixels, expected.pixels);  // standard tables
  expect_decode_error([&] { JpegDecoder().decode_full(no_dqt, "no_dqt"); });

  JpegDecoder reused;
  for (int i = 0; i < 2; ++i) {
    reused.decode_full(fitted);
    EXPECT_EQ(reused.decode_full(no_dht).pixels, expected.pixels) << "round " << i;
    reused.decode_full(fitted);
    const DecodeError e = expect_decode_error([&] { reused.decode_full(no_dqt, "no_dqt"); });
    EXPECT_NE(std::string(e.what()).find("quantization table 0"), std::string::npos) << e.what();
    EXPECT_EQ(reused.decode_full(baseline).pixels, expected.pixels);  // still reusable
  }
}

TEST(JpegDecoder, CropOutsideImageIsAUserError) {
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(97, 61), 97, 61);
  JpegDecoder dec;
  std::vector<uint8_t> out(32 * 32 * 3);
  EXPECT_THROW(dec.decode_crop(jpeg, {50, 0, 60, 20}, 32, 32, out.data(), "k"), Error);
  EXPECT_THROW(dec.decode_crop(jpeg, {0, 0, 0, 20}, 32, 32, out.data(), "k"), Error);
  dec.decode_crop(jpeg, {37, 1, 60, 60}, 32, 32, out.data(), "k");  // still usable
}

// The resizer alone.
TEST(Resize, IdentityIsACopy) {
  const int w = 37, h = 23;
  const auto rgb = test::synthetic_rgb(w, h);
  std::vector<uint8_t> out(rgb.size());
  resize_rgb({rgb.data(), w, h, size_t(w) * 3}, 0, 0, w, h, w, h, out.data());
  EXPECT_EQ(out, rgb);
  // Integer crop at the same size is a copy of the crop.
  std::vector<uint8_t> crop(10 * 5 * 3);
  resize_rgb({rgb.data(), w, h, size_t(w) * 3}, 3, 4, 10, 5, 10, 5, crop.data());
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 30; ++x) ASSERT_EQ(crop[y * 30 + x], rgb[(y + 4) * w * 3 + 9 + x]);
}

TEST(Resize, AreaHalvingAveragesBlocks) {
  const int w = 8, h = 6;
  const auto rgb = test::synthetic_rgb(w, h, 3);
  std::vector<uint8_t> out(4 * 3 * 3);
  resize_rgb({rgb.data(), w, h, size_t(w) * 3}, 0, 0, w, h, 4, 3, out.data());
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 4; ++x) {
      for (int c = 0; c < 3; ++c) {
        auto at = [&](int yy, int xx) { return int(rgb[(yy * w + xx) * 3 + c]); };
        const double mean = (at(2 * y, 2 * x) + at(2 * y, 2 * x + 1) + at(2 * y + 1, 2 * x) +
                             at(2 * y + 1, 2 * x + 1)) /
                            4.0;
        EXPECT_NEAR(out[(y * 4 + x) * 3 + c], mean, 0.5 + 1e-4);
      }
    }
  }
}

TEST(Resize, NonIntegerShrinkPreservesMeanAndConstants) {
  const int w = 101, h = 77;
  std::vector<uint8_t> flat(size_t(w) * h * 3, 173);
  std::vector<uint8_t> out(30 * 20 * 3);
  resize_rgb({flat.data(), w, h, size_t(w) * 3}, 3.5, 2.25, 90.7, 70.1, 30, 20, out.data());
  for (uint8_t v : out) ASSERT_EQ(v, 173);
  std::vector<uint8_t> up(300 * 250 * 3);
  resize_rgb({flat.data(), w, h, size_t(w) * 3}, 10, 10, 50, 40, 300, 250, up.data());
  for (uint8_t v : up) ASSERT_EQ(v, 173);
  // A horizontal ramp stays a ramp when upscaled (bilinear is exact on linear data).
  std::vector<uint8_t> ramp(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) ramp[(y * w + x) * 3 + c] = static_cast<uint8_t>(2 * x);
  std::vector<uint8_t> r2(40 * 10 * 3);
  resize_rgb({ramp.data(), w, h, size_t(w) * 3}, 10, 10, 20, 5, 40, 10, r2.data());
  for (int x = 1; x < 39; ++x) {
    const double src_x = 10 + (x + 0.5) * 0.5 - 0.5;  // continuous source coordinate
    EXPECT_NEAR(r2[x * 3], 2 * src_x, 0.51) << x;
  }
}

// Fixed point (14-bit weights, 7 fraction bits between the passes) stays within 0.51 of the
// exact weighted sum of the same taps: the rounding's 0.5 plus the quantization.
TEST(Resize, FixedPointWithinRoundingOfExactSum) {
  const int w = 211, h = 97;
  const auto rgb = test::synthetic_rgb(w, h, 7);
  const RgbView view{rgb.data(), w, h, size_t(w) * 3, 0, 0};
  struct Case {
    double x, y, cw, ch;
    int ow, oh;
  };
  const Case cases[] = {{0, 0, 211, 97, 64, 32},     {3.5, 2.25, 150.7, 80.1, 37, 21},
                        {10, 5, 190, 90, 25, 11},    {7, 3, 50, 40, 123, 77},
                        {0.3, 0.6, 200, 96, 28, 12}, {100.4, 20.9, 97.3, 71.2, 224, 224}};
  double worst = 0;
  for (bool simd : {false, true}) {
    Resizer resizer(simd);
    for (const Case& c : cases) {
      std::vector<uint8_t> out(static_cast<size_t>(c.ow) * c.oh * 3);
      resizer.resize(view, w, h, c.x, c.y, c.cw, c.ch, c.ow, c.oh, out.data());
      const AxisWeights& wx = resizer.x_weights();
      const AxisWeights& wy = resizer.y_weights();
      for (int oy = 0; oy < c.oh; ++oy) {
        for (int ox = 0; ox < c.ow; ++ox) {
          for (int ch = 0; ch < 3; ++ch) {
            double exact = 0;
            for (int ky = 0; ky < wy.count[oy]; ++ky) {
              for (int kx = 0; kx < wx.count[ox]; ++kx) {
                const int sy = wy.start[oy] + ky, sx = wx.start[ox] + kx;
                exact += double{wy.weights[wy.offset[oy] + ky]} * wx.weights[wx.offset[ox] + kx] *
                         rgb[(static_cast<size_t>(sy) * w + sx) * 3 + ch];
              }
            }
            const double err =
                std::abs(out[(static_cast<size_t>(oy) * c.ow + ox) * 3 + ch] - exact);
            worst = std::max(worst, err);
            ASSERT_LE(err, 0.51) << c.ow << "x" << c.oh << " at " << ox << "," << oy;
          }
        }
      }
    }
  }
  std::printf("  fixed-point resize: worst |out - exact| = %.4f u8 levels\n", worst);
}

// The AVX2 and AVX-512 passes write the same bytes as the portable loops: shrinking (1..6+ taps)
// and growing, odd and even output widths, flipped or not, windows with an origin.
TEST(Resize, SimdPassEqualsPortableLoop) {
  if (!Resizer::simd_available()) GTEST_SKIP() << "this CPU has no AVX2";
  const int w = 211, h = 97;
  const auto rgb = test::synthetic_rgb(w, h, 5);
  const RgbView view{rgb.data(), w, h, size_t(w) * 3, 0, 0};
  Resizer avx2(true, false), wide(true, true), portable(false);
  std::printf("  SIMD resize checked: AVX2%s\n",
              Resizer::avx512_available() ? " and AVX-512" : " (no AVX-512 on this CPU)");
  struct Case {
    double x, y, cw, ch;
    int ow, oh;
  };
  const Case cases[] = {{0, 0, 211, 97, 64, 32},      {3.5, 2.25, 150.7, 80.1, 37, 21},
                        {10, 5, 190, 90, 25, 11},     {0, 0, 211, 97, 211, 97},
                        {7, 3, 50, 40, 123, 77},      {0.3, 0.6, 200, 96, 28, 12},
                        {100, 20, 111, 77, 15, 9},    {1, 1, 209, 95, 1, 1},
                        {5, 5, 150, 60, 149, 59},     {0, 0, 211, 97, 22, 10},
                        {2.5, 1.5, 200, 90, 203, 95}, {0, 0, 211, 97, 7, 5}};
  for (const Case& c : cases) {
    for (bool flip : {false, true}) {
      const size_t n = static_cast<size_t>(c.ow) * c.oh * 3;
      std::vector<uint8_t> b(n + 8, 0xCD);
      portable.resize(view, w, h, c.x, c.y, c.cw, c.ch, c.ow, c.oh, b.data(), flip);
      for (Resizer* simd : {&avx2, &wide}) {
        std::vector<uint8_t> a(n + 8, 0xAB);
        simd->resize(view, w, h, c.x, c.y, c.cw, c.ch, c.ow, c.oh, a.data(), flip);
        ASSERT_TRUE(std::equal(a.begin(), a.begin() + n, b.begin()))
            << c.ow << "x" << c.oh << " flip " << flip << " taps " << simd->x_weights().taps
            << (simd == &wide ? " (AVX-512)" : " (AVX2)");
        for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(a[i], 0xAB) << "wrote past the output";
      }
    }
  }
}

}  // namespace
}  // namespace stoker::data
