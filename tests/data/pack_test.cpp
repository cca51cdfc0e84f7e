#include "stoker/data/pack.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include "data_test_util.h"
#include "stoker/core/error.h"
#include "stoker/data/lmdb_dataset.h"
#include "stoker/data/synth.h"

namespace stoker::data {
namespace {

namespace fs = std::filesystem;

const PackOptions kQuiet{.threads = 2, .progress = false, .report_skipped = false};

// A w x h gradient compressed with TurboJPEG (independently of the library's own encoder).
std::vector<uint8_t> make_jpeg(int w, int h, uint8_t tint) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / w);
      p[1] = static_cast<uint8_t>(y * 255 / h);
      p[2] = tint;
    }
  }
  tjhandle h_ = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(h_, px.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_420, 85, 0), 0);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(h_);
  return out;
}

// Decodes with TurboJPEG; returns {width, height} or {0, 0} when it fails.
std::pair<int, int> decode(std::span<const uint8_t> jpeg) {
  tjhandle h = tjInitDecompress();
  int w = 0, hh = 0, sub = 0, cs = 0;
  std::pair<int, int> result{0, 0};
  if (tjDecompressHeader3(h, jpeg.data(), jpeg.size(), &w, &hh, &sub, &cs) == 0) {
    std::vector<uint8_t> px(static_cast<size_t>(w) * hh * 3);
    if (tjDecompress2(h, jpeg.data(), jpeg.size(), px.data(), w, 0, hh, TJPF_RGB, 0) == 0) {
      result = {w, hh};
    }
  }
  tjDestroy(h);
  return result;
}

// Class folders a/ (3 images) and b/ (2 images) plus a corrupt JPEG and a text file in b/.
fs::path make_folder(const test::TempDir& dir) {
  const fs::path root = dir / "images";
  for (int i = 0; i < 3; ++i) {
    test::write_bytes(root / "a" / ("img" + std::to_string(i) + ".jpg"), make_jpeg(40, 24, 10));
  }
  for (int i = 0; i < 2; ++i) {
    test::write_bytes(root / "b" / ("img" + std::to_string(i) + ".jpg"), make_jpeg(20, 30, 200));
  }
  auto corrupt = make_jpeg(40, 24, 99);
  corrupt.resize(corrupt.size() * 2 / 3);  // cut inside the entropy-coded data
  test::write_bytes(root / "b" / "corrupt.jpg", corrupt);
  const std::string text = "not an image\n";
  test::write_bytes(root / "b" / "notes.txt", text.data(), text.size());
  test::write_bytes(root / "b" / ".hidden.jpg", text.data(), text.size());  // ignored
  return root;
}

TEST(Pack, SynthDecodesAndIsBalanced) {
  test::TempDir dir;
  const auto summary =
      pack_synth({.samples = 60, .classes = 3, .size = 32, .seed = 1}, dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 60);
  EXPECT_EQ(summary.classes, 3);
  EXPECT_EQ(summary.skipped, 0);
  EXPECT_GT(summary.bytes, 60 * 100);
  LmdbImageDataset ds(dir / "db");
  auto reader = ds.reader();
  std::vector<int> counts(3, 0);
  for (int64_t i = 0; i < ds.size(); ++i) {
    const SampleView v = reader.read(i);
    ++counts[static_cast<size_t>(v.label)];
    EXPECT_EQ(decode(v.payload), (std::pair<int, int>{32, 32})) << "sample " << i;
  }
  EXPECT_EQ(counts, (std::vector<int>{20, 20, 20}));
  EXPECT_FALSE(fs::exists(dir / ("db.tmp-" + std::to_string(::getpid()))));
}

TEST(Pack, SynthIsDeterministicAndClassesDiffer) {
  SynthOptions o{.classes = 8, .size = 24, .seed = 7};
  int32_t l1 = -1, l2 = -1;
  EXPECT_EQ(synth_image(o, 5, l1), synth_image(o, 5, l2));
  EXPECT_EQ(l1, 5);
  // Shape pixels (bright) cover a plausible share of the image in every class.
  for (int64_t i = 0; i < 8; ++i) {
    int32_t label = -1;
    const auto px = synth_image(o, i, label);
    int bright = 0;
    for (size_t p = 0; p < px.size(); p += 3) bright += (px[p] + px[p + 1] + px[p + 2]) > 3 * 125;
    EXPECT_GT(bright, 24 * 24 / 30) << synth_class_names(8)[static_cast<size_t>(label)];
    EXPECT_LT(bright, 24 * 24 * 9 / 10) << synth_class_names(8)[static_cast<size_t>(label)];
  }
  EXPECT_THROW(synth_class_names(9), Error);
}

TEST(Pack, FolderSkipsAndCountsBadFiles) {
  test::TempDir dir;
  const fs::path root = make_folder(dir);
  const auto summary = pack_folder(root, dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 5);
  EXPECT_EQ(summary.skipped, 2);
  ASSERT_EQ(summary.skipped_inputs.size(), 2u);
  EXPECT_NE(summary.skipped_inputs[0].find("corrupt.jpg"), std::string::npos);
  EXPECT_NE(summary.skipped_inputs[1].find("notes.txt"), std::string::npos);
  LmdbImageDataset ds(dir / "db");
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"a", "b"}));
  auto reader = ds.reader();
  const std::vector<int32_t> labels = {0, 0, 0, 1, 1};
  for (int64_t i = 0; i < 5; ++i) {
    const SampleView v = reader.read(i);
    EXPECT_EQ(v.label, labels[static_cast<size_t>(i)]);
    EXPECT_EQ(decode(v.payload), v.label == 0 ? std::pair(40, 24) : std::pair(20, 30));
  }
}

TEST(Pack, ListFileWithResizeAndShuffle) {
  test::TempDir dir;
  const fs::path root = make_folder(dir);
  const std::string list =
      "# path label\n"
      "images/a/img0.jpg 2\n"
      "\n"
      "images/a/img1.jpg\t0\n" +
      (root / "b/img0.jpg").string() + " 1\n" +
      "images/b/missing.jpg 1\n"
      "images/b/notes.txt 0\n";
  test::write_bytes(dir / "list.txt", list.data(), list.size());
  PackOptions options = kQuiet;
  options.resize_shorter = 12;
  const auto summary = pack_list(dir / "list.txt", dir / "db", options);
  EXPECT_EQ(summary.samples, 3);
  EXPECT_EQ(summary.skipped, 2);
  LmdbImageDataset ds(dir / "db");
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"0", "1", "2"}));
  auto reader = ds.reader();
  EXPECT_EQ(reader.read(0).label, 2);
  EXPECT_EQ(decode(reader.read(0).payload), std::pair(20, 12));  // 40x24 -> shorter side 12
  EXPECT_EQ(decode(reader.read(2).payload), std::pair(12, 18));  // 20x30 -> 12x18

  // Shuffling is seeded: same seed, same order; the labels are a permutation of the input's.
  auto labels_of = [&](const fs::path& db) {
    LmdbImageDataset d(db);
    auto r = d.reader();
    std::vector<int32_t> labels;
    for (int64_t i = 0; i < d.size(); ++i) labels.push_back(r.read(i).label);
    return labels;
  };
  PackOptions shuffled = kQuiet;
  shuffled.shuffle = true;
  shuffled.seed = 11;
  pack_folder(root, dir / "s1", shuffled);
  pack_folder(root, dir / "s2", shuffled);
  EXPECT_EQ(labels_of(dir / "s1"), labels_of(dir / "s2"));
  auto sorted = labels_of(dir / "s1");
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int32_t>{0, 0, 0, 1, 1}));
}

TEST(Pack, MalformedListLineNamesTheLine) {
  test::TempDir dir;
  const std::string list = "a.jpg 0\nb.jpg cat\n";
  test::write_bytes(dir / "list.txt", list.data(), list.size());
  try {
    pack_list(dir / "list.txt", dir / "db", kQuiet);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("list.txt:2"), std::string::npos) << e.message();
  }
  EXPECT_FALSE(fs::exists(dir / "db"));
}

TEST(Pack, InterruptedPackLeavesNoDatabase) {
  test::TempDir dir;
  PackOptions options = kQuiet;
  options.fail_after = 30;
  EXPECT_THROW(pack_synth({.samples = 100, .classes = 2, .size = 16}, dir / "db", options), Error);
  EXPECT_FALSE(fs::exists(dir / "db"));
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ADD_FAILURE() << "left behind: " << entry.path();
  }
  // Even a temporary folder left by a killed pack is refused by readers: the format tag is
  // written in the last transaction only. Simulate one with raw records but no metadata.
  test::lmdb_put(dir / "db.tmp-1",
                 {{sample_key(0), encode_record(0, PayloadKind::jpeg, make_jpeg(8, 8, 0))}});
  EXPECT_THROW(LmdbImageDataset ds(dir / "db.tmp-1"), Error);
}

TEST(Pack, BadOutputPathAndExistingOutput) {
  test::TempDir dir;
  const std::string text = "x";
  test::write_bytes(dir / "file", text.data(), text.size());
  EXPECT_THROW(pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "file" / "db", kQuiet),
               Error);
  EXPECT_FALSE(fs::exists(dir / "file" / "db"));
  pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "db", kQuiet);
  try {
    pack_synth({.samples = 6, .classes = 2, .size = 16}, dir / "db", kQuiet);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("--overwrite"), std::string::npos);
  }
  PackOptions overwrite = kQuiet;
  overwrite.overwrite = true;
  pack_synth({.samples = 6, .classes = 2, .size = 16}, dir / "db", overwrite);
  EXPECT_EQ(LmdbImageDataset(dir / "db").size(), 6);
  // A trailing separator names the same folder; the temporary folder is still a sibling.
  pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "slash/", kQuiet);
  EXPECT_EQ(LmdbImageDataset(dir / "slash").size(), 4);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "slash"), fs::directory_iterator()), 2);
}

TEST(Pack, NothingValidIsAnError) {
  test::TempDir dir;
  const std::string text = "nope";
  test::write_bytes(dir / "in" / "c" / "x.jpg", text.data(), text.size());
  EXPECT_THROW(pack_folder(dir / "in", dir / "db", kQuiet), Error);
  EXPECT_FALSE(fs::exists(dir / "db"));
  EXPECT_THROW(pack_folder(dir / "missing", dir / "db", kQuiet), Error);
}

}  // namespace
}  // namespace stoker::data
