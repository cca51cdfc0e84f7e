// Integrity of whole checkpoints (train/safetensors.h, header checksum): every byte of a real
// checkpoint's header is covered, an edited position is refused naming the file, resume falls
// back past such a file, and files without a header checksum (PyTorch's, older stoker's) still
// open while a stripped one does not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>

#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"
#include "stoker/train/trainer.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
namespace nn = stoker::nn;
namespace data = stoker::data;
namespace train = stoker::train;
using train::SafetensorsReader;
using train::Trainer;

namespace {

using stoker::train_test::Blobs;
using stoker::train_test::make_blobs;

std::unique_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 16));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(16, 3));
  return m;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t header_length(const std::string& file) {
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return n;
}

// The file with its JSON header's `from` replaced by `to` (the length and padding follow, as an
// editor that rewrites the header would leave them).
std::string edit_header(const std::string& file, const std::string& from, const std::string& to) {
  const uint64_t n = header_length(file);
  std::string header = file.substr(8, n);
  const size_t at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return file;
  header.replace(at, from.size(), to);
  while (!header.empty() && header.back() == ' ') header.pop_back();
  while (header.size() % 8 != 0) header += ' ';
  const uint64_t len = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + header + file.substr(8 + n);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const stoker::Error& e) {
    return e.what();
  }
  return "(no error)";
}

class CheckpointIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_ckpt_integrity_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A run of 6 steps (AdamW) writing step_2, step_4, step_6 and last into dir_.
  void run() {
    const Blobs d = make_blobs(60, 3);
    auto model = make_mlp(5);
    stoker::optim::AdamW opt(model->named_parameters());
    nn::CrossEntropyLoss loss;
    Trainer t(
        *model, loss, opt,
        {.progress_bar = false, .checkpoint_dir = dir_, .checkpoint_interval = 2, .quiet = true});
    data::TensorBatches b(d.x, d.y, {.batch_size = 10, .seed = 1});
    ASSERT_EQ(t.fit(b, 1).steps, 6);
  }

  // resume() of `file` into a fresh Trainer: the error, or "(no error)".
  std::string resume_error(const fs::path& file, int64_t* step = nullptr) {
    auto model = make_mlp(9);
    stoker::optim::AdamW opt(model->named_parameters());
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
    const std::string e = error_of([&] { t.resume(file); });
    if (step) *step = t.step();
    return e;
  }

  fs::path dir_;
};

// Every byte of the header of a real checkpoint (length, JSON, padding), changed in two ways,
// makes the file refused, naming it; the intact file opens and resumes.
TEST_F(CheckpointIntegrityTest, EveryHeaderByteOfARealCheckpointIsCovered) {
  run();
  const fs::path ckpt = dir_ / "step_4.safetensors";
  const std::string good = read_all(ckpt);
  {
    const SafetensorsReader r(ckpt);
    EXPECT_TRUE(r.has_header_checksum());
    EXPECT_EQ(r.metadata().at(train::kSafetensorsVersionKey), "2");
    EXPECT_EQ(r.metadata().at(train::kHeaderChecksumKey).size(), 16u);
  }
  const size_t end = 8 + header_length(good);
  const fs::path edited = dir_ / "edited.safetensors";
  size_t refused = 0, by_checksum = 0;
  for (size_t i = 0; i < end; ++i) {
    for (const unsigned char x : {0x01, 0x20}) {
      std::string bytes = good;
      bytes[i] = static_cast<char>(bytes[i] ^ x);
      write_all(edited, bytes);
      try {
        const SafetensorsReader r(edited);
        ADD_FAILURE() << "byte " << i << " ^ " << int{x} << " ('" << good[i] << "') opened";
      } catch (const stoker::Error& e) {
        const std::string msg = e.what();
        ++refused;
        EXPECT_NE(msg.find(edited.string()), std::string::npos) << i << ": " << msg;
        by_checksum += msg.find("the header fails its checksum") != std::string::npos;
      }
    }
  }
  EXPECT_EQ(refused, 2 * end);
  EXPECT_GT(by_checksum, end / 2);  // most edits leave valid JSON: only the checksum sees them
  EXPECT_EQ(resume_error(ckpt), "(no error)");
}

// The position edited to another valid number, in place or with a longer number (the header
// rewritten, as a JSON editor would): refused by resume, naming the file.
TEST_F(CheckpointIntegrityTest, AnEditedStepOrEpochIsRefused) {
  run();
  const fs::path ckpt = dir_ / "step_4.safetensors";
  const std::string good = read_all(ckpt);
  ASSERT_EQ(SafetensorsReader(ckpt).metadata().at("stoker.step"), "4");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"stoker.step\":\"4\"", "\"stoker.step\":\"5\""},
           {"\"stoker.step\":\"4\"", "\"stoker.step\":\"40\""},
           {"\"stoker.epoch\":\"0\"", "\"stoker.epoch\":\"1\""},
           {"\"stoker.batch_index\":\"4\"", "\"stoker.batch_index\":\"2\""},
           {"\"stoker.epoch_progress\":\"40\"", "\"stoker.epoch_progress\":\"20\""}}) {
    SCOPED_TRACE(to);
    write_all(ckpt, edit_header(good, from, to));
    int64_t step = -1;
    const std::string e = resume_error(ckpt, &step);
    EXPECT_NE(e.find(ckpt.string() + ": the header fails its checksum"), std::string::npos) << e;
    EXPECT_NE(e.find("the file is damaged"), std::string::npos) << e;
    EXPECT_EQ(step, 0);
  }
  write_all(ckpt, good);
  EXPECT_EQ(resume_error(ckpt), "(no error)");
}

// The newest checkpoints with an edited header: resume_latest says so and resumes the one
// before them, as for damaged tensor bytes.
TEST_F(CheckpointIntegrityTest, ResumeLatestFallsBackPastAnEditedHeader) {
  run();
  for (const char* f : {"last.safetensors", "step_6.safetensors"}) {
    const std::string good = read_all(dir_ / f);
    write_all(dir_ / f, edit_header(good, "\"stoker.step\":\"6\"", "\"stoker.step\":\"7\""));
  }
  auto model = make_mlp(9);
  stoker::optim::AdamW opt(model->named_parameters());
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  ::testing::internal::CaptureStderr();
  const auto from = t.resume_latest(dir_);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(from.has_value());
  EXPECT_EQ(*from, dir_ / "step_4.safetensors");
  EXPECT_EQ(t.step(), 4);
  for (const char* f : {"last.safetensors", "step_6.safetensors"})
    EXPECT_NE(err.find((dir_ / f).string() + ": the header fails its checksum"), std::string::npos)
        << err;
}

// A file claiming the header checksum's version without the checksum (the key stripped or its
// name damaged) is refused; one from before header checksums (the per-tensor checksums only, as
// the previous stoker wrote them) still resumes, and so does one without any checksum.
TEST_F(CheckpointIntegrityTest, AStrippedHeaderChecksumIsRefusedOlderFilesStillResume) {
  run();
  const fs::path ckpt = dir_ / "step_4.safetensors";
  const std::string good = read_all(ckpt);
  const std::string sum = SafetensorsReader(ckpt).metadata().at(train::kHeaderChecksumKey);
  // The key renamed (one byte), and the key and value removed.
  write_all(ckpt, edit_header(good, "\"stoker.header_checksum\"", "\"stoker.header_checksun\""));
  std::string e = resume_error(ckpt);
  EXPECT_NE(e.find(ckpt.string() + ": metadata stoker.safetensors_version is \"2\" but there is "
                                   "no stoker.header_checksum: the header is damaged"),
            std::string::npos)
      << e;
  write_all(ckpt, edit_header(good, "\"stoker.header_checksum\":\"" + sum + "\",", ""));
  e = resume_error(ckpt);
  EXPECT_NE(e.find("but there is no stoker.header_checksum"), std::string::npos) << e;
  // As the previous stoker wrote it: no header checksum, no version key.
  {
    write_all(ckpt, good);
    // The metadata with the per-tensor table kept (written as given with .checksums = false).
    auto meta = SafetensorsReader(ckpt).metadata();
    meta.erase(train::kHeaderChecksumKey);
    meta.erase(train::kSafetensorsVersionKey);
    train::save_safetensors(dir_ / "old.safetensors", train::load_safetensors(ckpt), meta,
                            {.checksums = false});
  }
  const SafetensorsReader old(dir_ / "old.safetensors");
  EXPECT_TRUE(old.has_checksums());
  EXPECT_FALSE(old.has_header_checksum());
  int64_t step = -1;
  EXPECT_EQ(resume_error(dir_ / "old.safetensors", &step), "(no error)");
  EXPECT_EQ(step, 4);
}

// A PyTorch-style file (no stoker metadata at all; written by hand, the way Python's
// safetensors lays it out) still loads.
TEST_F(CheckpointIntegrityTest, APyTorchStyleFileStillLoads) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string padded = header;
  while (padded.size() % 8) padded += ' ';
  const uint64_t n = padded.size();
  std::string file(8, '\0');
  std::memcpy(file.data(), &n, 8);
  const float w[2] = {1.5f, -2.0f};
  file += padded + std::string(reinterpret_cast<const char*>(w), sizeof w);
  write_all(dir_ / "torch.safetensors", file);
  const SafetensorsReader r(dir_ / "torch.safetensors");
  EXPECT_FALSE(r.has_header_checksum());
  EXPECT_FALSE(r.has_checksums());
  EXPECT_EQ(r.load("w").to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
}

}  // namespace
