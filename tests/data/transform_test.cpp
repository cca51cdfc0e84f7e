// RandomResizedCrop parameters (torchvision semantics, Philox draws keyed by seed/epoch/index),
// flip, the eval crop geometry and augment_into.
#include "stoker/data/decode.h"

#include <cmath>
#include <set>
#include <thread>

#include "data/jpeg_test_util.h"
#include "data/resize.h"
#include "test_util.h"

namespace stoker::data {
namespace {

bool same(const CropParams& a, const CropParams& b) {
  return a.rect.x == b.rect.x && a.rect.y == b.rect.y && a.rect.width == b.rect.width &&
         a.rect.height == b.rect.height && a.flip == b.flip;
}

TEST(RandomResizedCrop, AreaAspectAndBoundsInRange) {
  const TransformOptions o;
  for (auto [w, h] : {std::pair{640, 480}, {500, 375}, {97, 61}, {300, 1200}}) {
    double min_area = 1, max_area = 0, min_ratio = 10, max_ratio = 0;
    int flips = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const CropParams p = random_resized_crop(w, h, 3, i, o);
      const CropRect& r = p.rect;
      ASSERT_EQ(r.x, std::floor(r.x));
      ASSERT_EQ(r.width, std::floor(r.width));
      ASSERT_GE(r.x, 0);
      ASSERT_GE(r.y, 0);
      ASSERT_GT(r.width, 0);
      ASSERT_GT(r.height, 0);
      ASSERT_LE(r.x + r.width, w);
      ASSERT_LE(r.y + r.height, h);
      const double area = r.width * r.height / (double(w) * h);
      const double ratio = r.width / r.height;
      // Rounding w and h to integers moves area and ratio a little past the drawn range.
      const double slack_w = 0.5 / r.width + 0.5 / r.height;
      EXPECT_GE(area, 0.08 * (1 - 2 * slack_w)) << w << "x" << h << " #" << i;
      EXPECT_LE(area, 1.0);
      EXPECT_GE(ratio, 0.75 * (1 - 2 * slack_w)) << w << "x" << h << " #" << i;
      EXPECT_LE(ratio, 4.0 / 3.0 * (1 + 2 * slack_w)) << w << "x" << h << " #" << i;
      min_area = std::min(min_area, area);
      max_area = std::max(max_area, area);
      min_ratio = std::min(min_ratio, ratio);
      max_ratio = std::max(max_ratio, ratio);
      flips += p.flip;
    }
    // The whole range is used.
    EXPECT_LT(min_area, 0.1) << w << "x" << h;
    // (300x1200 is too tall for ratio >= 3/4: at most 300x400 = 1/3 of it fits.)
    EXPECT_GT(max_area, h > 2 * w ? 0.3 : 0.7) << w << "x" << h;
    EXPECT_LT(min_ratio, 0.8) << w << "x" << h;
    EXPECT_GT(max_ratio, 1.25) << w << "x" << h;
    EXPECT_NEAR(flips / double(n), 0.5, 0.015) << w << "x" << h;
  }
}

TEST(RandomResizedCrop, PositionIsUniform) {
  // Small crops of a wide image: the left edge should cover [0, W - w] evenly.
  TransformOptions o;
  o.scale_min = o.scale_max = 0.1;
  o.ratio_min = o.ratio_max = 1.0;
  const int w = 1000, h = 100;  // crop ~ 100x100 -> x in [0, 900]
  int low = 0, n = 20000;
  for (int i = 0; i < n; ++i) {
    const CropParams p = random_resized_crop(w, h, 0, i, o);
    ASSERT_EQ(p.rect.width, 100);
    ASSERT_EQ(p.rect.y, 0);
    low += p.rect.x < 450;
  }
  EXPECT_NEAR(low / double(n), 0.5, 0.02);
}

TEST(RandomResizedCrop, DeterministicPerSeedEpochIndex) {
  TransformOptions o;
  o.seed = 1234;
  int epoch_diff = 0, index_diff = 0, seed_diff = 0;
  TransformOptions o2 = o;
  o2.seed = 1235;
  for (int i = 0; i < 1000; ++i) {
    const CropParams a = random_resized_crop(640, 480, 7, i, o);
    // Pure function: same inputs, same result, whatever was drawn in between.
    random_resized_crop(640, 480, 9, i + 1, o);
    EXPECT_TRUE(same(a, random_resized_crop(640, 480, 7, i, o)));
    epoch_diff += !same(a, random_resized_crop(640, 480, 8, i, o));
    index_diff += !same(a, random_resized_crop(640, 480, 7, i + 1000, o));
    seed_diff += !same(a, random_resized_crop(640, 480, 7, i, o2));
  }
  EXPECT_GT(epoch_diff, 990);
  EXPECT_GT(index_diff, 990);
  EXPECT_GT(seed_diff, 990);
}

TEST(RandomResizedCrop, FallbackIsCentreCropClampedToRatio) {
  TransformOptions o;
  o.attempts = 0;  // always the fallback
  // Too wide: h = H, w = round(H * 4/3).
  CropParams p = random_resized_crop(1000, 100, 0, 0, o);
  EXPECT_EQ(p.rect.width, 133);
  EXPECT_EQ(p.rect.height, 100);
  EXPECT_EQ(p.rect.x, (1000 - 133) / 2);
  EXPECT_EQ(p.rect.y, 0);
  // Too tall: w = W, h = round(W / (3/4)).
  p = random_resized_crop(90, 1000, 0, 0, o);
  EXPECT_EQ(p.rect.width, 90);
  EXPECT_EQ(p.rect.height, 120);
  EXPECT_EQ(p.rect.y, (1000 - 120) / 2);
  // In range: the whole image.
  p = random_resized_crop(500, 400, 0, 0, o);
  EXPECT_EQ(p.rect.width, 500);
  EXPECT_EQ(p.rect.height, 400);
  // Extreme aspect with the default 10 attempts still lands inside the image.
  for (int i = 0; i < 200; ++i) {
    const CropRect r = random_resized_crop(3000, 20, 0, i, TransformOptions{}).rect;
    ASSERT_LE(r.x + r.width, 3000);
    ASSERT_LE(r.y + r.height, 20);
  }
}

TEST(EvalCrop, MatchesResizeThenCenterCropGeometry) {
  TransformOptions o;
  o.train = false;
  // 500x375: Resize(256) -> 341x256; CenterCrop(224): top round(16) = 16, left round(58.5) =
  // 58 (half to even, as Python); back in source pixels: scale 500/341 and 375/256.
  CropRect r = eval_crop(500, 375, o);
  EXPECT_NEAR(r.x, 58 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(r.y, 16 * 375.0 / 256, 1e-9);
  EXPECT_NEAR(r.width, 224 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(r.height, 224 * 375.0 / 256, 1e-9);
  // Portrait and square.
  r = eval_crop(300, 600, o);
  EXPECT_NEAR(r.width, 224 * 300.0 / 256, 1e-9);
  EXPECT_NEAR(r.y, 144 * 600.0 / 512, 1e-9);  // resized 256x512, top = 144
  r = eval_crop(256, 256, o);
  EXPECT_DOUBLE_EQ(r.x, 16);
  EXPECT_DOUBLE_EQ(r.width, 224);
  o.eval_resize = 200;
  EXPECT_THROW(eval_crop(500, 375, o), Error);
}

TEST(AugmentInto, TrainIsReproducibleAndMatchesItsParameters) {
  const int w = 500, h = 375;
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(w, h, 5), w, h, 90);
  TransformOptions o;
  o.seed = 99;
  JpegDecoder dec, other;
  const Image full = dec.decode_full(jpeg);
  const size_t n = 224 * 224 * 3;
  std::vector<uint8_t> a(n), b(n), c(n), ref(n);
  bool saw_flip = false, saw_plain = false;
  for (int index = 0; index < 12; ++index) {
    augment_into(dec, jpeg, "s", 2, index, o, a.data());
    augment_into(other, jpeg, "s", 2, index, o, b.data());
    EXPECT_EQ(a, b) << "index " << index;
    const CropParams p = random_resized_crop(w, h, 2, index, o);
    (p.flip ? saw_flip : saw_plain) = true;
    dec.decode_crop(jpeg, p.rect, 224, 224, c.data(), "s", p.flip);
    EXPECT_EQ(a, c);
    // Against full decode -> crop -> resize (-> flip): DCT scaling tolerance when it applied.
    resize_rgb({full.pixels.data(), w, h, size_t(w) * 3}, p.rect.x, p.rect.y, p.rect.width,
               p.rect.height, 224, 224, ref.data(), p.flip);
    const test::Diff d = test::diff(a, ref);
    if (dec.last_scale_num() == 8) {
      EXPECT_EQ(d.max, 0);
    } else {
      EXPECT_LT(d.mean, 1.5);
    }
    augment_into(dec, jpeg, "s", 3, index, o, b.data());
    EXPECT_NE(a, b) << "epoch 3 should draw another crop";
  }
  EXPECT_TRUE(saw_flip && saw_plain);
}

TEST(AugmentInto, FlipIsTheMirrorOfTheSameCrop) {
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(300, 200), 300, 200);
  TransformOptions o;
  JpegDecoder dec;
  int checked = 0;
  for (int index = 0; index < 40 && checked < 3; ++index) {
    const CropParams p = random_resized_crop(300, 200, 0, index, o);
    if (!p.flip) continue;
    std::vector<uint8_t> got(224 * 224 * 3), plain(224 * 224 * 3);
    augment_into(dec, jpeg, "f", 0, index, o, got.data());
    dec.decode_crop(jpeg, p.rect, 224, 224, plain.data(), "f", false);
    for (int y = 0; y < 224; ++y)
      for (int x = 0; x < 224; ++x)
        for (int ch = 0; ch < 3; ++ch)
          ASSERT_EQ(got[(y * 224 + x) * 3 + ch], plain[(y * 224 + 223 - x) * 3 + ch]);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(AugmentInto, EvalIsTheCentredRegion) {
  const int w = 500, h = 375;
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(w, h, 11), w, h, 90);
  TransformOptions o;
  o.train = false;
  JpegDecoder dec;
  const Image full = dec.decode_full(jpeg);
  std::vector<uint8_t> a(224 * 224 * 3), b(a.size()), ref(a.size());
  augment_into(dec, jpeg, "e", 0, 0, o, a.data());
  augment_into(dec, jpeg, "e", 5, 77, o, b.data());
  EXPECT_EQ(a, b);  // no randomness
  const CropRect r = eval_crop(w, h, o);
  resize_rgb({full.pixels.data(), w, h, size_t(w) * 3}, r.x, r.y, r.width, r.height, 224, 224,
             ref.data());
  EXPECT_EQ(test::diff(a, ref).max, 0);  // crop 328x328 < 2x224: no DCT scaling
}

TEST(AugmentInto, IndependentOfThreadAndOrder) {
  const int w = 300, h = 200, n = 48;
  const auto jpeg = test::encode_rgb(test::synthetic_rgb(w, h, 3), w, h, 90);
  TransformOptions o;
  o.seed = 5;
  const size_t bytes = 224 * 224 * 3;
  std::vector<uint8_t> sequential(n * bytes), threaded(n * bytes);
  JpegDecoder dec;
  for (int i = 0; i < n; ++i) augment_into(dec, jpeg, "s", 4, i, o, &sequential[i * bytes]);
  // Two threads, each with its own decoder, in different orders (one backwards).
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      JpegDecoder mine;
      for (int k = 0; k < n; ++k) {
        const int i = t == 0 ? k : n - 1 - k;
        if (i % 2 == t) augment_into(mine, jpeg, "s", 4, i, o, &threaded[i * bytes]);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(sequential, threaded);
}

TEST(AugmentInto, ErrorsNameTheKey) {
  JpegDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  const std::vector<uint8_t> junk = {1, 2, 3, 4};
  try {
    augment_into(dec, junk, "train/000123", 0, 123, TransformOptions{}, out.data());
    FAIL() << "expected DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.key(), "train/000123");
  }
}

}  // namespace
}  // namespace stoker::data
