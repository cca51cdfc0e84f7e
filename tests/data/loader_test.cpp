#include "stoker/data/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "stoker/data/pack.h"
#include "stoker/data/synth.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/pool.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace stoker;
using data::Loader;
using data::LoaderOptions;

namespace {

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("stoker_loader_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const data::SynthOptions synth{.samples = 96, .classes = 4, .size = 40, .seed = 3};
    data::pack_synth(synth, dir_ / "synth", {.threads = 2, .progress = false});
    // The same set with sample 5 replaced by bytes that are not a JPEG.
    data::pack_generated(96,
                         [&](int64_t i, int32_t& label) {
                           std::vector<uint8_t> jpeg = data::synth_jpeg(synth, i, label);
                           if (i == 5) jpeg.assign(100, 0x42);
                           return jpeg;
                         },
                         data::synth_class_names(4), dir_ / "corrupt",
                         {.threads = 1, .progress = false});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static LoaderOptions options(int threads) {
    return {.batch_size = 16,
            .threads = threads,
            .prefetch = 2,
            .transform = {.output_size = 24},
            .seed = 11};
  }

  static std::vector<std::vector<uint8_t>> epoch_bytes(Loader& l, int64_t epoch) {
    std::vector<std::vector<uint8_t>> out;
    l.start_epoch(epoch);
    data::Batch b;
    while (l.next(b)) {
      std::vector<uint8_t> v(b.input.nbytes() + b.target.nbytes());
      std::memcpy(v.data(), b.input.data(), b.input.nbytes());
      std::memcpy(v.data() + b.input.nbytes(), b.target.data(), b.target.nbytes());
      out.push_back(std::move(v));
    }
    return out;
  }

  static fs::path dir_;
};
fs::path LoaderTest::dir_;

TEST_F(LoaderTest, DeliversFullNormalizedBatches) {
  data::LmdbImageDataset ds(dir_ / "synth");
  Loader l(ds, options(2));
  EXPECT_EQ(l.batches_per_epoch(), 6);
  l.start_epoch(0);
  data::Batch b;
  int batches = 0;
  while (l.next(b)) {
    ++batches;
    ASSERT_EQ(b.input.shape(), Shape({16, 3, 24, 24}));
    ASSERT_EQ(b.input.dtype(), DType::f32);
    ASSERT_EQ(b.size, 16);
    for (int64_t y : b.target.to_vector<int64_t>()) ASSERT_TRUE(y >= 0 && y < 4);
    for (float v : b.input.to_floats()) {
      // (u8 / 255 - mean) / std lies within these bounds for ImageNet's mean/std.
      ASSERT_TRUE(std::isfinite(v) && v >= -2.2f && v <= 2.7f) << v;
    }
  }
  EXPECT_EQ(batches, 6);
  EXPECT_FALSE(l.next(b));
  EXPECT_EQ(l.counters().samples, 96);
  EXPECT_EQ(l.counters().skipped, 0);
}

TEST_F(LoaderTest, SameSeedSameBytesWhateverTheThreadCountAndEpochsDiffer) {
  data::LmdbImageDataset ds(dir_ / "synth");
  Loader one(ds, options(1)), two(ds, options(2));
  const auto a = epoch_bytes(one, 0), b = epoch_bytes(two, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "batch " << i;
  EXPECT_NE(epoch_bytes(one, 1), a);
  EXPECT_EQ(epoch_bytes(two, 0), a);  // restarting an epoch replays it
}

TEST_F(LoaderTest, MatchesTheTransformAndNormalizationDoneByHand) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(2);
  o.shuffle = false;
  o.layout = ops::Layout::nhwc;
  Loader l(ds, o);
  l.start_epoch(2);
  data::Batch b;
  ASSERT_TRUE(l.next(b));
  auto reader = ds.reader();
  data::JpegDecoder dec;
  std::vector<uint8_t> px(24 * 24 * 3);
  const auto got = b.input.to_floats();
  for (int64_t i = 0; i < 16; ++i) {
    const auto s = reader.read(i);
    data::augment_into(dec, s.payload, "k", 2, static_cast<uint64_t>(i), o.transform, px.data());
    for (size_t p = 0; p < px.size(); ++p) {
      const int c = static_cast<int>(p % 3);
      const float want =
          std::fmaf(static_cast<float>(px[p]), 1.0f / (255.0f * o.std[c]), -o.mean[c] / o.std[c]);
      ASSERT_EQ(got[i * px.size() + p], want) << "sample " << i << " value " << p;
    }
    EXPECT_EQ(b.target.to_vector<int64_t>()[i], s.label);
  }
}

TEST_F(LoaderTest, CorruptSampleFailsNamingTheKeyOrIsSkipped) {
  data::LmdbImageDataset ds(dir_ / "corrupt");
  LoaderOptions o = options(2);
  o.shuffle = false;
  {
    Loader l(ds, o);
    l.start_epoch(0);
    data::Batch b;
    try {
      l.next(b);
      FAIL() << "a corrupt sample was not reported";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("0000000005"), std::string::npos) << msg;
      EXPECT_NE(msg.find("CorruptPolicy::skip"), std::string::npos) << msg;
    }
    EXPECT_TRUE(l.next(b));  // the loader keeps working after an error
  }
  o.on_corrupt = data::CorruptPolicy::skip;
  Loader l(ds, o);
  l.start_epoch(0);
  data::Batch b;
  int64_t samples = 0;
  while (l.next(b)) {
    ASSERT_EQ(b.size, 16);  // batches stay full
    samples += b.size;
  }
  EXPECT_EQ(samples, 96);
  EXPECT_EQ(l.counters().skipped, 1);
}

TEST_F(LoaderTest, DestructorReturnsPromptlyWhileThreadsAreBusy) {
  data::LmdbImageDataset ds(dir_ / "synth");
  const auto t0 = std::chrono::steady_clock::now();
  {
    LoaderOptions o = options(2);
    o.prefetch = 4;
    Loader l(ds, o);
    l.start_epoch(0);  // the producer starts filling 5 slots; destroy at once
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST_F(LoaderTest, BadOptionsAndUseBeforeStart) {
  data::LmdbImageDataset ds(dir_ / "synth");
  LoaderOptions o = options(1);
  o.batch_size = 0;
  EXPECT_THROW(Loader(ds, o), Error);
  Loader l(ds, options(1));
  data::Batch b;
  EXPECT_THROW(l.next(b), Error);
}

// The Trainer consumes the loader: a small CNN learns the synthetic shapes.
TEST_F(LoaderTest, TrainerLearnsFromTheLoader) {
  data::LmdbImageDataset ds(dir_ / "synth");
  Loader l(ds, options(2));
  nn::manual_seed(5);
  nn::Sequential model(nn::make<nn::Conv2d>(3, 8, 3, 1, 1), nn::make<nn::ReLU>(),
                       nn::make<nn::MaxPool2d>(2), nn::make<nn::Conv2d>(8, 16, 3, 1, 1),
                       nn::make<nn::ReLU>(), nn::make<nn::GlobalAvgPool>(),
                       nn::make<nn::Linear>(16, 4));
  optim::AdamW opt(model.named_parameters(), {.lr = 1e-2f});
  nn::CrossEntropyLoss loss;
  train::Trainer t(model, loss, opt, {.log_interval = 6, .progress_bar = false, .quiet = true});
  const auto r = t.fit(l, 6);
  ASSERT_GE(r.log.size(), 2u);
  EXPECT_LT(r.log.back().loss, r.log.front().loss);
}

}  // namespace
