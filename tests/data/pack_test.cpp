#include "stoker/data/pack.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <set>

#include "data/jpeg_test_util.h"
#include "data_test_util.h"
#include "stoker/core/error.h"
#include "stoker/data/decode.h"
#include "stoker/data/lmdb_dataset.h"

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

// Expects `fn` to throw a stoker::Error whose message holds every one of `parts`.
template <typename F>
void expect_refused(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
    }
    EXPECT_FALSE(e.hint().empty()) << e.message();
  }
}

// The files below `root` (relative paths), to see that nothing was deleted.
std::set<std::string> files_below(const fs::path& root) {
  std::set<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    files.insert(fs::relative(e.path(), root).string());
  }
  return files;
}

// Bad case: `stoker pack photos --out photos --overwrite` deleted the photos, and --overwrite
// deleted whatever was at --out. Now --out may not be an input, lie inside one or contain one
// (by path and by file identity), and --overwrite replaces only a database `stoker pack` wrote.
TEST(Pack, OutputIsNeverAnInputAndOverwriteReplacesOnlyADatabase) {
  test::TempDir dir;
  const fs::path photos = make_folder(dir);
  const std::set<std::string> before = files_below(photos);
  PackOptions overwrite = kQuiet;
  overwrite.overwrite = true;
  expect_refused([&] { pack_folder(photos, photos, overwrite); },
                 {"--out " + photos.string() + " is the input folder"});
  expect_refused([&] { pack_folder(photos, dir / "images/", overwrite); }, {"is the input folder"});
  expect_refused([&] { pack_folder(photos, photos / "a", overwrite); },
                 {"is inside the input folder " + photos.string()});
  expect_refused([&] { pack_folder(photos, photos / "db", kQuiet); }, {"is inside"});
  expect_refused([&] { pack_folder(photos, dir.path(), overwrite); },
                 {"contains the input folder"});
  // Through a symbolic link to the folder, and a `..` detour.
  fs::create_directory_symlink(photos, dir / "link");
  expect_refused([&] { pack_folder(dir / "link", photos, overwrite); }, {"is the input folder"});
  expect_refused([&] { pack_folder(photos, dir / "link" / "a" / ".." / "b", overwrite); },
                 {"is inside"});
  // A class folder that is a link to a folder elsewhere: that folder is an input too.
  test::write_bytes(dir / "elsewhere" / "x.jpg", make_jpeg(16, 16, 1));
  const fs::path linked = dir / "linked";
  fs::create_directories(linked);
  fs::create_directory_symlink(dir / "elsewhere", linked / "cls");
  expect_refused([&] { pack_folder(linked, dir / "elsewhere", overwrite); },
                 {"is the class folder"});

  // A list file: --out is the list, or holds it, or is the folder of a listed image, or holds
  // that folder. (Inside that folder is allowed: the database can never be one of the images.)
  const std::string text = (photos / "a" / "img0.jpg").string() + " 0\n";
  test::write_bytes(dir / "lists" / "train.list", text.data(), text.size());
  expect_refused(
      [&] { pack_list(dir / "lists" / "train.list", dir / "lists" / "train.list", overwrite); },
      {"is the list file"});
  expect_refused([&] { pack_list(dir / "lists" / "train.list", dir / "lists", overwrite); },
                 {"contains the list file"});
  expect_refused([&] { pack_list(dir / "lists" / "train.list", photos / "a", overwrite); },
                 {"is the folder of the input image " + (photos / "a").string()});
  expect_refused([&] { pack_list(dir / "lists" / "train.list", photos, overwrite); },
                 {"contains the folder of the input image " + (photos / "a").string()});
  EXPECT_EQ(pack_list(dir / "lists" / "train.list", photos / "a" / "db", kQuiet).samples, 1);
  fs::remove_all(photos / "a" / "db");
  EXPECT_EQ(files_below(photos), before);
  EXPECT_TRUE(fs::exists(dir / "lists" / "train.list"));

  // --overwrite onto anything but a stoker database: refused, naming it, nothing removed.
  test::write_bytes(dir / "notes.txt", text.data(), text.size());
  expect_refused(
      [&] { pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "notes.txt", overwrite); },
      {"--overwrite replaces only a database written by `stoker pack`",
       (dir / "notes.txt").string() + " is a regular file"});
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  fs::create_directories(dir / "project" / "src");
  expect_refused(
      [&] { pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "project", overwrite); },
      {"is a folder holding src"});
  EXPECT_TRUE(fs::exists(dir / "project" / "src"));
  // An LMDB folder that `stoker pack` did not write.
  test::lmdb_put(dir / "foreign", {{"k", "v"}});
  expect_refused(
      [&] { pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "foreign", overwrite); },
      {"is an LMDB folder that is not a readable stoker database",
       "was not written by `stoker pack`"});
  EXPECT_TRUE(fs::exists(dir / "foreign" / "data.mdb"));
  // A stoker database with one more file inside.
  pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "db", kQuiet);
  test::write_bytes(dir / "db" / "README", text.data(), text.size());
  expect_refused(
      [&] { pack_synth({.samples = 6, .classes = 2, .size = 16}, dir / "db", overwrite); },
      {"is a folder holding README"});
  fs::remove(dir / "db" / "README");
  // A stoker database: replaced.
  pack_synth({.samples = 6, .classes = 2, .size = 16}, dir / "db", overwrite);
  EXPECT_EQ(LmdbImageDataset(dir / "db").size(), 6);
}

TEST(Pack, NothingValidIsAnError) {
  test::TempDir dir;
  const std::string text = "nope";
  test::write_bytes(dir / "in" / "c" / "x.jpg", text.data(), text.size());
  EXPECT_THROW(pack_folder(dir / "in", dir / "db", kQuiet), Error);
  EXPECT_FALSE(fs::exists(dir / "db"));
  EXPECT_THROW(pack_folder(dir / "missing", dir / "db", kQuiet), Error);
}

// The reasons of a pack's skipped inputs whose path ends with `name`.
std::string reason_for(const PackSummary& s, const std::string& name) {
  for (const std::string& line : s.skipped_inputs) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos && colon >= name.size() &&
        line.compare(colon - name.size(), name.size(), name) == 0) {
      return line.substr(colon + 2);
    }
  }
  return "(not skipped)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `jpeg` with its frame header (SOF0) claiming width x height.
std::vector<uint8_t> with_frame_size(std::vector<uint8_t> jpeg, int width, int height) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 5] = static_cast<uint8_t>(height >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(height & 0xFF);
      jpeg[i + 7] = static_cast<uint8_t>(width >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(width & 0xFF);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF0 marker";
  return jpeg;
}

TEST(Pack, HeaderBombIsSkippedByThePixelBudget) {
  // 58 KB in the field; here a few hundred bytes whose header claims 60000 x 60000 pixels:
  // skipped from the header, before a 10.8 GB pixel buffer is asked for.
  test::TempDir dir;
  const fs::path root = dir / "in";
  test::write_bytes(root / "c" / "good.jpg", make_jpeg(16, 16, 50));
  test::write_bytes(root / "c" / "bomb.jpg", with_frame_size(make_jpeg(16, 16, 50), 60000, 60000));
  const auto summary = pack_folder(root, dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 1);
  EXPECT_EQ(summary.skipped, 1);
  const std::string why = reason_for(summary, "bomb.jpg");
  EXPECT_TRUE(contains(why,
                       "header claims 60000x60000 = 3.6e9 pixels, over the budget of "
                       "268435456"))
      << why;
  EXPECT_TRUE(contains(why, "raise --max-pixels")) << why;

  // The budget is PackOptions::max_pixels: a 16 x 16 image is over a budget of 255 pixels and
  // within one of 256.
  PackOptions tight = kQuiet;
  tight.max_pixels = 255;
  const fs::path one = dir / "one";
  test::write_bytes(one / "c" / "a.jpg", make_jpeg(16, 16, 50));
  test::write_bytes(one / "c" / "b.jpg", make_jpeg(8, 8, 50));
  const auto over = pack_folder(one, dir / "db_tight", tight);
  EXPECT_EQ(over.samples, 1);
  EXPECT_TRUE(contains(reason_for(over, "a.jpg"), "16x16 = 256 pixels, over the budget of 255"))
      << reason_for(over, "a.jpg");
  tight.max_pixels = 256;
  EXPECT_EQ(pack_folder(one, dir / "db_fits", tight).samples, 2);
}

// Weak case: the packer read a whole file (a 2 GB sparse .jpg: 10 s, 2.3 GB of memory) before
// looking at its first bytes. Now the first bytes and the size are judged first, and a file
// that cannot be what it claims is skipped unread (tests/cli/pack_cli_test.sh packs 3 GiB files
// under a 2 GiB memory limit).
TEST(Pack, FirstBytesAndSizeAreCheckedBeforeTheFileIsRead) {
  test::TempDir dir;
  const fs::path root = dir / "in";
  const std::vector<uint8_t> good = make_jpeg(16, 16, 50);
  test::write_bytes(root / "c" / "good.jpg", good);
  // 64 MiB of zeros (sparse), and a good 16 x 16 JPEG followed by zeros up to 64 MiB: its
  // decoder stops at the end of the image, so today it was packed with 64 MiB of zeros.
  const uint64_t big = uint64_t{64} << 20;
  test::write_bytes(root / "c" / "zeros.jpg", good.data(), 0);
  fs::resize_file(root / "c" / "zeros.jpg", big);
  test::write_bytes(root / "c" / "padded.jpg", good);
  fs::resize_file(root / "c" / "padded.jpg", big);
  // Just over what a 16 x 16 JPEG can take, and just within it.
  const uint64_t most = 16 * 16 * 16 + (uint64_t{16} << 20);
  test::write_bytes(root / "c" / "over.jpg", good);
  fs::resize_file(root / "c" / "over.jpg", most + 1);
  test::write_bytes(root / "c" / "within.jpg", good);
  fs::resize_file(root / "c" / "within.jpg", good.size() + 1000);

  PackOptions options = kQuiet;
  options.map_size_gib = 1;
  const auto summary = pack_folder(root, dir / "db", options);
  EXPECT_EQ(summary.samples, 2);
  EXPECT_EQ(summary.skipped, 3);
  EXPECT_TRUE(contains(reason_for(summary, "zeros.jpg"), "not a JPEG: starts with 00 00 00 00"))
      << reason_for(summary, "zeros.jpg");
  EXPECT_EQ(reason_for(summary, "padded.jpg"),
            "file of 67108864 bytes is larger than a 16x16 JPEG can be (at most 16781312 bytes): "
            "it holds something else after the image, or is damaged");
  EXPECT_TRUE(contains(reason_for(summary, "over.jpg"), "file of 16781313 bytes is larger"))
      << reason_for(summary, "over.jpg");
  // Nothing stored is larger than the files that fit.
  EXPECT_LT(summary.bytes, static_cast<int64_t>(4 * good.size() + 2000));
}

TEST(Pack, FifoIsSkippedNotOpened) {
  // Opening a FIFO for reading blocks until a writer comes: the pack would hang forever.
  test::TempDir dir;
  const fs::path root = dir / "in";
  test::write_bytes(root / "c" / "good.jpg", make_jpeg(16, 16, 50));
  ASSERT_EQ(::mkfifo((root / "c" / "pipe.jpg").c_str(), 0644), 0) << std::strerror(errno);
  const auto summary = pack_folder(root, dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 1);
  EXPECT_EQ(reason_for(summary, "pipe.jpg"), "not a regular file (a FIFO)");
  // As a list entry, and as the list itself.
  const std::string list = "in/c/good.jpg 0\nin/c/pipe.jpg 0\n";
  test::write_bytes(dir / "list.txt", list.data(), list.size());
  const auto listed = pack_list(dir / "list.txt", dir / "db_list", kQuiet);
  EXPECT_EQ(listed.samples, 1);
  EXPECT_EQ(reason_for(listed, "pipe.jpg"), "not a regular file (a FIFO)");
  try {
    pack_list(root / "c" / "pipe.jpg", dir / "db_pipe", kQuiet);
    ADD_FAILURE() << "a FIFO list file was read";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.message(), "not a regular file (a FIFO)")) << e.message();
  }
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_FALSE(contains(entry.path().filename().string(), ".tmp-")) << entry.path();
  }
}

TEST(Pack, DirectoryListEntryIsSkippedAndNamed) {
  test::TempDir dir;
  test::write_bytes(dir / "in" / "good.jpg", make_jpeg(16, 16, 50));
  const std::string list = "in/good.jpg 0\nin 1\n";
  test::write_bytes(dir / "list.txt", list.data(), list.size());
  const auto summary = pack_list(dir / "list.txt", dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 1);
  EXPECT_EQ(summary.skipped, 1);
  EXPECT_EQ(reason_for(summary, "in"), "not a regular file (a directory)");
}

TEST(Pack, DanglingLinksAndLinkLoopsAreSkippedAndNamed) {
  test::TempDir dir;
  const fs::path c = dir / "in" / "c";
  test::write_bytes(c / "good.jpg", make_jpeg(16, 16, 50));
  fs::create_symlink("nowhere.jpg", c / "dangling.jpg");
  fs::create_symlink("b.jpg", c / "a.jpg");  // a -> b -> a
  fs::create_symlink("a.jpg", c / "b.jpg");
  fs::create_symlink("..", c / "up");                // a folder link back up: never walked into
  fs::create_symlink("good.jpg", c / "z_link.jpg");  // a link to a file is an input
  const auto summary = pack_folder(dir / "in", dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 2);
  EXPECT_EQ(summary.skipped, 4);
  EXPECT_EQ(reason_for(summary, "dangling.jpg"),
            "dangling symbolic link to 'nowhere.jpg' (its target does not exist)");
  EXPECT_TRUE(contains(reason_for(summary, "a.jpg"), "symbolic link loop"))
      << reason_for(summary, "a.jpg");
  EXPECT_TRUE(contains(reason_for(summary, "b.jpg"), "symbolic link loop"));
  EXPECT_EQ(reason_for(summary, "up"), "not a regular file (a symbolic link to a directory)");
  // The same through a list file, and a link loop where a class folder could be.
  const std::string list = "in/c/a.jpg 0\nin/c/good.jpg 0\nin/c/dangling.jpg 0\n";
  test::write_bytes(dir / "list.txt", list.data(), list.size());
  const auto listed = pack_list(dir / "list.txt", dir / "db_list", kQuiet);
  EXPECT_EQ(listed.samples, 1);
  EXPECT_EQ(listed.skipped, 2);
  fs::create_symlink("loop2", dir / "in" / "loop1");
  fs::create_symlink("loop1", dir / "in" / "loop2");
  const auto looped = pack_folder(dir / "in", dir / "db_loop", kQuiet);
  EXPECT_EQ(looped.samples, 2);
  EXPECT_TRUE(contains(reason_for(looped, "loop1"), "not a class folder: symbolic link loop"))
      << reason_for(looped, "loop1");
}

TEST(Pack, ListFileWithBomCrlfSpacesAndNonAsciiNames) {
  test::TempDir dir;
  test::write_bytes(dir / "with space" / "a b.jpg", make_jpeg(16, 16, 10));
  test::write_bytes(dir / "ünïcödé" / "猫.jpg", make_jpeg(24, 16, 20));
  test::write_bytes(dir / "plain.jpg", make_jpeg(8, 8, 30));
  const std::string list =
      "\xEF\xBB\xBFplain.jpg 1\r\n"
      "with space/a b.jpg\t 0\r\n"
      "  \r\n"
      "ünïcödé/猫.jpg 2\r\n";
  test::write_bytes(dir / "list.txt", list.data(), list.size());
  const auto summary = pack_list(dir / "list.txt", dir / "db", kQuiet);
  EXPECT_EQ(summary.skipped, 0) << (summary.skipped_inputs.empty() ? ""
                                                                   : summary.skipped_inputs[0]);
  ASSERT_EQ(summary.samples, 3);
  LmdbImageDataset ds(dir / "db");
  auto reader = ds.reader();
  EXPECT_EQ(reader.read(0).label, 1);
  EXPECT_EQ(reader.read(1).label, 0);
  EXPECT_EQ(decode(reader.read(1).payload), std::pair(16, 16));
  EXPECT_EQ(reader.read(2).label, 2);
  EXPECT_EQ(decode(reader.read(2).payload), std::pair(24, 16));
}

TEST(Pack, ParseListFileIsPureAndStrict) {
  const fs::path base = "/data";
  const auto items = parse_list_file(
      "\xEF\xBB\xBF# header\r\nx/a b.jpg 3\r\n   \n\t\n/abs/c.jpg\t0\nd.jpg 007", base, "L");
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].path, "/data/x/a b.jpg");
  EXPECT_EQ(items[0].label, 3);
  EXPECT_EQ(items[1].path, "/abs/c.jpg");
  EXPECT_EQ(items[2].path, "/data/d.jpg");
  EXPECT_EQ(items[2].label, 7);
  EXPECT_TRUE(parse_list_file("", base, "L").empty());
  auto error_of = [&](std::string_view text) {
    try {
      parse_list_file(text, base, "list.txt");
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("(no error)");
  };
  // A NUL byte would cut the path short and open another file: refused, naming the line.
  const std::string nul("a.jpg 0\nb.jpg\0junk 1\n", 21);
  EXPECT_TRUE(contains(error_of(nul), "list.txt:2: the line contains a NUL byte")) << error_of(nul);
  EXPECT_TRUE(contains(error_of("a.jpg 99999999999999999999999\n"), "list.txt:1: label"));
  EXPECT_TRUE(contains(error_of("a.jpg 99999999999999999999999\n"), "too large"));
  EXPECT_TRUE(contains(error_of("a.jpg 2147483648\n"), "too large"));
  EXPECT_EQ(parse_list_file("a.jpg 2147483647\n", base, "L").at(0).label, 2147483647);
  EXPECT_TRUE(contains(error_of("a.jpg -1\n"), "list.txt:1: the label"));
  EXPECT_TRUE(contains(error_of("a.jpg +1\n"), "not an integer >= 0"));
  EXPECT_TRUE(contains(error_of("ok.jpg 1\nonly-a-path.jpg\n"), "list.txt:2: expected"));
  EXPECT_TRUE(contains(error_of("   7   \n"), "list.txt:1: expected"));
  EXPECT_TRUE(contains(error_of("a.jpg 1x\n"), "list.txt:1"));
  const std::string long_line = "p " + std::string(100000, '9');
  EXPECT_TRUE(contains(error_of(long_line), "too large"));
  // Any bytes: a list of items or a stoker::Error, nothing else (no crash, no hang).
  std::mt19937 rng(5);
  const std::string alphabet("ab 9\t\n\r#\0\xEF\xBB\xBF-+/.", 17);
  for (int round = 0; round < 3000; ++round) {
    std::string text(rng() % 64, ' ');
    for (char& ch : text) ch = rng() % 4 == 0 ? static_cast<char>(rng()) : alphabet[rng() % 17];
    try {
      for (const PackItem& item : parse_list_file(text, base, "fuzz")) {
        EXPECT_GE(item.label, 0);
        EXPECT_EQ(item.path.find('\0'), std::string::npos);
      }
    } catch (const Error&) {
    }
  }
}

// A list of `labels` (one line each) whose paths all name `jpeg`.
fs::path write_label_list(const test::TempDir& dir, const std::vector<int64_t>& labels) {
  test::write_bytes(dir / "img.jpg", make_jpeg(8, 8, 40));
  std::string list;
  for (int64_t label : labels) list += "img.jpg " + std::to_string(label) + "\n";
  test::write_bytes(dir / "list.txt", list.data(), list.size());
  return dir / "list.txt";
}

TEST(Pack, ClassesOptionBoundsTheLabels) {
  test::TempDir dir;
  const fs::path list = write_label_list(dir, {0, 1, 5, 2});
  PackOptions options = kQuiet;
  options.classes = 5;
  try {
    pack_list(list, dir / "db", options);
    ADD_FAILURE() << "label 5 accepted with 5 classes";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.message(), "list.txt:3: label 5 is not below --classes 5"))
        << e.message();
  }
  EXPECT_FALSE(fs::exists(dir / "db"));
  options.classes = 10;
  const auto summary = pack_list(list, dir / "db", options);
  EXPECT_EQ(summary.classes, 10);
  EXPECT_TRUE(summary.warnings.empty());
  EXPECT_EQ(LmdbImageDataset(dir / "db").num_classes(), 10);
}

TEST(Pack, GrosslySparseLabelsAreAnError) {
  // A typo (1000000 for 100) must not silently make a 1,000,001-class dataset.
  test::TempDir dir;
  const fs::path list = write_label_list(dir, {0, 1, 2, 1000000, 1});
  try {
    pack_list(list, dir / "db", kQuiet);
    ADD_FAILURE() << "a 1000001-class dataset was packed from 3 distinct labels";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.message(), "grossly sparse")) << e.message();
    EXPECT_TRUE(contains(e.message(), "1000000 (1 sample: line 4)")) << e.message();
    EXPECT_TRUE(contains(e.hint(), "--classes")) << e.hint();
  }
  EXPECT_FALSE(fs::exists(dir / "db"));
  // Stating the class count packs it (the labels were right).
  PackOptions options = kQuiet;
  options.classes = 1000001;
  EXPECT_EQ(pack_list(list, dir / "db", options).classes, 1000001);
}

TEST(Pack, SparseLabelsWarnWithTheLargestLabels) {
  test::TempDir dir;
  const fs::path list = write_label_list(dir, {0, 1, 20, 1, 0, 19, 19});
  const auto summary = pack_list(list, dir / "db", kQuiet);
  EXPECT_EQ(summary.classes, 21);
  EXPECT_EQ(summary.samples, 7);
  ASSERT_EQ(summary.warnings.size(), 1u);
  const std::string& w = summary.warnings[0];
  EXPECT_TRUE(contains(w, "sparse")) << w;
  EXPECT_TRUE(contains(w,
                       "4 distinct labels in [0, 20] make 21 classes, 17 of them without a "
                       "sample"))
      << w;
  EXPECT_TRUE(contains(w,
                       "20 (1 sample: line 3), 19 (2 samples: lines 6, 7), 1 (2 samples: "
                       "lines 2, 4)"))
      << w;
  EXPECT_TRUE(contains(w, "--classes N")) << w;
  // Dense labels say nothing.
  const fs::path dense = write_label_list(dir, {0, 1, 2, 1});
  EXPECT_TRUE(pack_list(dense, dir / "db2", kQuiet).warnings.empty());
}

// RGB quadrants: top-left red, top-right green, bottom-left blue, bottom-right white.
constexpr uint8_t kQuadrant[4][3] = {{220, 30, 30}, {30, 200, 30}, {30, 30, 220}, {235, 235, 235}};
enum Quadrant { kRed, kGreen, kBlue, kWhite };

std::vector<uint8_t> quadrant_jpeg(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int q = (y >= h / 2 ? 2 : 0) + (x >= w / 2 ? 1 : 0);
      std::memcpy(&px[(static_cast<size_t>(y) * w + x) * 3], kQuadrant[q], 3);
    }
  }
  return test::encode_rgb(px, w, h, 95, TJSAMP_444);
}

// An APP1 segment "Exif\0\0" + a TIFF block with IFD0 holding one orientation entry.
std::vector<uint8_t> exif_app1(int orientation, bool little_endian) {
  std::vector<uint8_t> tiff;
  auto u16 = [&](unsigned v) {
    if (little_endian) {
      tiff.push_back(v & 0xFF);
      tiff.push_back(v >> 8);
    } else {
      tiff.push_back(v >> 8);
      tiff.push_back(v & 0xFF);
    }
  };
  auto u32 = [&](uint32_t v) {
    if (little_endian) {
      u16(v & 0xFFFF);
      u16(v >> 16);
    } else {
      u16(v >> 16);
      u16(v & 0xFFFF);
    }
  };
  tiff.push_back(little_endian ? 'I' : 'M');
  tiff.push_back(little_endian ? 'I' : 'M');
  u16(42);
  u32(8);       // IFD0 right after the header
  u16(2);       // two entries: XResolution-like filler, then orientation
  u16(0x011A);  // XResolution (RATIONAL), value elsewhere: never read
  u16(5);
  u32(1);
  u32(38);
  u16(0x0112);  // Orientation, SHORT, 1
  u16(3);
  u32(1);
  u16(static_cast<unsigned>(orientation));
  u16(0);
  u32(0);  // no next IFD
  std::vector<uint8_t> seg = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  for (const uint8_t byte : tiff) seg.push_back(byte);
  const size_t length = seg.size() - 2;
  seg[2] = static_cast<uint8_t>(length >> 8);
  seg[3] = static_cast<uint8_t>(length & 0xFF);
  return seg;
}

std::vector<uint8_t> spliced_after_soi(const std::vector<uint8_t>& jpeg,
                                       const std::vector<uint8_t>& segment) {
  std::vector<uint8_t> out(jpeg.size() + segment.size());
  std::copy(jpeg.begin(), jpeg.begin() + 2, out.begin());
  std::copy(segment.begin(), segment.end(), out.begin() + 2);
  std::copy(jpeg.begin() + 2, jpeg.end(), out.begin() + 2 + static_cast<ptrdiff_t>(segment.size()));
  return out;
}

// Which quadrant colour the pixel at (x, y) of `image` is (-1: none within 40 per channel).
int quadrant_at(const Image& image, int x, int y) {
  const uint8_t* p = &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
  for (int q = 0; q < 4; ++q) {
    bool near = true;
    for (int c = 0; c < 3; ++c) near = near && std::abs(p[c] - kQuadrant[q][c]) < 40;
    if (near) return q;
  }
  return -1;
}

TEST(Pack, ExifOrientationIsAppliedOnlyWhenAsked) {
  // The stored image is 64 x 32; orientation 6 (rotate 90 degrees clockwise to view) makes it
  // 32 x 64 with the stored bottom-left quadrant at the top left.
  const int w = 64, h = 32;
  const std::vector<uint8_t> plain = quadrant_jpeg(w, h);
  // Expected quadrants (top-left, top-right, bottom-left, bottom-right) for orientations 1..8.
  const int expected[9][4] = {{},
                              {kRed, kGreen, kBlue, kWhite},
                              {kGreen, kRed, kWhite, kBlue},
                              {kWhite, kBlue, kGreen, kRed},
                              {kBlue, kWhite, kRed, kGreen},
                              {kRed, kBlue, kGreen, kWhite},
                              {kBlue, kRed, kWhite, kGreen},
                              {kWhite, kGreen, kBlue, kRed},
                              {kGreen, kWhite, kRed, kBlue}};
  test::TempDir dir;
  for (int orientation = 1; orientation <= 8; ++orientation) {
    test::write_bytes(dir / "in" / "c" / (std::to_string(orientation) + ".jpg"),
                      spliced_after_soi(plain, exif_app1(orientation, orientation % 2 == 0)));
  }
  PackOptions upright = kQuiet;
  upright.apply_exif_orientation = true;
  const auto summary = pack_folder(dir / "in", dir / "db", upright);
  ASSERT_EQ(summary.samples, 8);
  EXPECT_EQ(summary.exif_rotated, 7);
  EXPECT_EQ(summary.exif_unreadable, 0);
  LmdbImageDataset ds(dir / "db");
  auto reader = ds.reader();
  JpegDecoder dec;
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const Image img = dec.decode_full(reader.read(orientation - 1).payload);
    const bool swapped = orientation >= 5;
    ASSERT_EQ(img.width, swapped ? h : w) << "orientation " << orientation;
    ASSERT_EQ(img.height, swapped ? w : h) << "orientation " << orientation;
    const int qx[4] = {img.width / 4, img.width * 3 / 4, img.width / 4, img.width * 3 / 4};
    const int qy[4] = {img.height / 4, img.height / 4, img.height * 3 / 4, img.height * 3 / 4};
    for (int q = 0; q < 4; ++q) {
      EXPECT_EQ(quadrant_at(img, qx[q], qy[q]), expected[orientation][q])
          << "orientation " << orientation << ", quadrant " << q;
    }
  }
  // Without the option: the pixels as coded, exactly (the restart-marker rewrite is lossless).
  const auto as_coded = pack_folder(dir / "in", dir / "db_plain", kQuiet);
  EXPECT_EQ(as_coded.exif_rotated, 0);
  LmdbImageDataset plain_ds(dir / "db_plain");
  auto plain_reader = plain_ds.reader();
  const Image original = dec.decode_full(plain);
  for (int64_t i = 0; i < 8; ++i) {
    const Image img = dec.decode_full(plain_reader.read(i).payload);
    EXPECT_EQ(img.width, w);
    EXPECT_EQ(img.pixels, original.pixels) << "sample " << i;
  }
}

TEST(Pack, MalformedExifIsPackedUnrotatedAndCounted) {
  const std::vector<uint8_t> plain = quadrant_jpeg(64, 32);
  test::TempDir dir;
  const fs::path c = dir / "in" / "c";
  std::vector<uint8_t> garbage = {0xFF, 0xE1, 0x00, 0x0C, 'E', 'x',  'i',
                                  'f',  0,    0,    'X',  'Y', 0x2A, 0x00};
  test::write_bytes(c / "garbage.jpg", spliced_after_soi(plain, garbage));
  std::vector<uint8_t> far = exif_app1(6, true);
  far[10 + 4] = 0xF0;  // IFD0 offset 0xF0 + 8: outside the segment
  test::write_bytes(c / "far.jpg", spliced_after_soi(plain, far));
  test::write_bytes(c / "nine.jpg", spliced_after_soi(plain, exif_app1(9, false)));
  std::vector<uint8_t> many = exif_app1(6, true);
  many[10 + 8] = 0xFF;  // 65535 IFD entries in a 40-byte segment
  many[10 + 9] = 0xFF;
  test::write_bytes(c / "many.jpg", spliced_after_soi(plain, many));
  PackOptions upright = kQuiet;
  upright.apply_exif_orientation = true;
  const auto summary = pack_folder(dir / "in", dir / "db", upright);
  EXPECT_EQ(summary.samples, 4);
  EXPECT_EQ(summary.skipped, 0);
  EXPECT_EQ(summary.exif_rotated, 0);
  EXPECT_EQ(summary.exif_unreadable, 4);
  EXPECT_EQ(summary.warnings.size(), 4u);
  EXPECT_TRUE(contains(format_summary(summary), "4 unreadable (packed unrotated)"));
  LmdbImageDataset ds(dir / "db");
  auto reader = ds.reader();
  JpegDecoder dec;
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(dec.read_header(reader.read(i).payload).width, 64);
}

TEST(Pack, CmykAndYcckJpegsArePackedAndDecodeAsRgb) {
  const int w = 48, h = 40;
  const auto rgb = test::synthetic_rgb(w, h, 3);
  // Adobe (inverted) CMYK values of `rgb`: K' = max(R, G, B), C' = R * 255 / K' ...
  std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
    const int k = std::max({rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2], uint8_t{1}});
    for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = static_cast<uint8_t>(rgb[3 * i + c] * 255 / k);
    cmyk[4 * i + 3] = static_cast<uint8_t>(k);
  }
  test::TempDir dir;
  const fs::path c = dir / "in" / "c";
  test::write_bytes(c / "a_ycck.jpg", test::tj_encode(cmyk, w, h, TJPF_CMYK, TJSAMP_444, 98));
  test::write_bytes(c / "b_cmyk.jpg", test::encode_cmyk_libjpeg(cmyk, w, h, true));
  JpegDecoder dec;
  for (const PackOptions& options :
       {kQuiet,
        PackOptions{
            .threads = 2, .resize_shorter = 1000, .progress = false, .report_skipped = false}}) {
    const bool reencoded = options.resize_shorter > 0;
    const fs::path db = dir / (reencoded ? "db_rgb" : "db");
    const auto summary = pack_folder(dir / "in", db, options);
    EXPECT_EQ(summary.skipped, 0) << (summary.skipped_inputs.empty() ? ""
                                                                     : summary.skipped_inputs[0]);
    ASSERT_EQ(summary.samples, 2);
    LmdbImageDataset ds(db);
    auto reader = ds.reader();
    for (int64_t i = 0; i < 2; ++i) {
      const auto payload = reader.read(i).payload;
      // As given (4 components, the loader converts) or, re-encoded, RGB.
      EXPECT_EQ(dec.read_header(payload).components, reencoded ? 3 : 4) << "sample " << i;
      const Image img = dec.decode_full(payload);
      ASSERT_EQ(img.width, w);
      // Re-encoding adds 4:2:0 q90 error on this noisy image; a wrong CMYK conversion would be
      // off by ~100.
      EXPECT_LT(test::diff(img.pixels, rgb).mean, reencoded ? 8.0 : 3.0) << "sample " << i;
    }
  }
}

TEST(Pack, BadStartsAreNamedForWhatTheyAre) {
  test::TempDir dir;
  const fs::path c = dir / "in" / "c";
  test::write_bytes(c / "good.jpg", make_jpeg(16, 16, 50));
  test::write_bytes(c / "empty.jpg", "", 0);
  test::write_bytes(c / "soi.jpg", "\xFF\xD8", 2);
  test::write_bytes(c / "garbage.jpg", "\xFF\xD8\x12\x34\x56\x78", 6);
  test::write_bytes(c / "png.jpg", "\x89PNG\r\n\x1A\n", 8);
  const auto summary = pack_folder(dir / "in", dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 1);
  EXPECT_EQ(reason_for(summary, "empty.jpg"), "empty file (0 bytes)");
  EXPECT_EQ(reason_for(summary, "soi.jpg"),
            "JPEG ends right after its start-of-image marker (truncated)");
  EXPECT_EQ(reason_for(summary, "garbage.jpg"),
            "garbage after the start-of-image marker: expected a marker (FF xx) at byte 2, "
            "found 0x12");
  EXPECT_TRUE(contains(reason_for(summary, "png.jpg"), "it looks like a PNG"))
      << reason_for(summary, "png.jpg");
}

// A pid that was just used and is now gone.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST(Pack, LeftoversOfDeadPacksAreRemovedOthersLeftAlone) {
  test::TempDir dir;
  const pid_t gone = dead_pid();
  const fs::path stale = dir / ("db.tmp-" + std::to_string(gone));
  test::write_bytes(stale / "data.mdb", "x", 1);
  const fs::path live = dir / ("db.tmp-" + std::to_string(::getppid()));
  fs::create_directories(live);
  // Made on another host (a shared folder): its pid says nothing here.
  const pid_t gone2 = dead_pid();
  const fs::path elsewhere = dir / ("db.tmp-" + std::to_string(gone2));
  test::write_bytes(elsewhere / "stoker-pack-owner", "some-other-host\n", 16);
  const fs::path unrelated = dir / "dbx.tmp-1";  // another output's
  fs::create_directories(unrelated);
  const auto summary = pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "db", kQuiet);
  EXPECT_EQ(summary.samples, 4);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(elsewhere));
  EXPECT_TRUE(fs::exists(unrelated));
  std::string said;
  for (const std::string& w : summary.warnings) said += w + "\n";
  EXPECT_TRUE(contains(said, "removed a leftover of an interrupted pack: " + stale.string()))
      << said;
  EXPECT_TRUE(contains(said, live.string() + " belongs to process")) << said;
  EXPECT_TRUE(contains(said, "made on host some-other-host")) << said;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "db"), fs::directory_iterator()), 2);
}

std::atomic<int> g_test_handler_calls{0};
void test_sigterm_handler(int) { ++g_test_handler_calls; }

TEST(Pack, SigtermStopsThePackAndRestoresTheHandler) {
  struct sigaction mine {
  }, before{};
  mine.sa_handler = test_sigterm_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &mine, &before), 0);
  test::TempDir dir;
  std::atomic<bool> raised{false};
  std::atomic<int64_t> produced{0};
  const SynthOptions synth{.classes = 2, .size = 16};
  try {
    pack_generated(
        5000,
        [&](int64_t i, int32_t& label) {
          ++produced;
          if (i >= 100 && !raised.exchange(true)) ::raise(SIGTERM);
          return synth_jpeg(synth, i, label);
        },
        synth_class_names(2), dir / "db", kQuiet);
    ADD_FAILURE() << "the pack ignored SIGTERM";
  } catch (const PackInterrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_TRUE(contains(e.message(), "interrupted by SIGTERM: nothing written to")) << e.message();
  }
  EXPECT_LT(produced.load(), 5000);           // it stopped, after the chunk
  EXPECT_EQ(g_test_handler_calls.load(), 0);  // the pack's handler had it
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ADD_FAILURE() << "left behind: " << entry.path();
  }
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, test_sigterm_handler);  // restored
  ::raise(SIGTERM);
  EXPECT_EQ(g_test_handler_calls.load(), 1);
  ::sigaction(SIGTERM, &before, nullptr);
  // A later pack is not stopped by the old signal.
  EXPECT_EQ(pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "db2", kQuiet).samples, 4);
}

TEST(Pack, SignalFoundIgnoredStaysIgnored) {
  // A shell starts background jobs with SIGINT ignored: a pack among them must not take it.
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(::sigaction(SIGINT, &ignore, &before), 0);
  test::TempDir dir;
  std::atomic<bool> raised{false};
  const SynthOptions synth{.classes = 2, .size = 16};
  const auto summary = pack_generated(
      300,
      [&](int64_t i, int32_t& label) {
        if (i >= 100 && !raised.exchange(true)) ::raise(SIGINT);
        return synth_jpeg(synth, i, label);
      },
      synth_class_names(2), dir / "db", kQuiet);
  EXPECT_TRUE(raised.load());
  EXPECT_EQ(summary.samples, 300);
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  ::sigaction(SIGINT, &before, nullptr);
}

TEST(Pack, OptionsOutOfRangeAreRejectedNamingTheFlag) {
  test::TempDir dir;
  auto error_of = [&](PackOptions o) {
    try {
      pack_synth({.samples = 4, .classes = 2, .size = 16}, dir / "db", o);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("(no error)");
  };
  PackOptions o = kQuiet;
  o.threads = -1;
  EXPECT_TRUE(contains(error_of(o), "--threads -1")) << error_of(o);
  o = kQuiet;
  o.resize_shorter = -5;
  EXPECT_TRUE(contains(error_of(o), "--resize -5")) << error_of(o);
  o = kQuiet;
  o.map_size_gib = 0;
  EXPECT_TRUE(contains(error_of(o), "--map-size 0")) << error_of(o);
  o = kQuiet;
  o.max_pixels = 0;
  EXPECT_TRUE(contains(error_of(o), "--max-pixels 0")) << error_of(o);
  o = kQuiet;
  o.classes = -1;
  EXPECT_TRUE(contains(error_of(o), "--classes -1")) << error_of(o);
  EXPECT_FALSE(fs::exists(dir / "db"));
}

}  // namespace
}  // namespace stoker::data
