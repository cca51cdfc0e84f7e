
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "stoker/nn/activation.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/pool.h"
#include "stoker/train/checkpoint_files.h"
#include "stoker/train/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
namespace nn = stoker::nn;
using stoker::DType;
using stoker::Tensor;

namespace {

std::unique_ptr<nn::Sequential> small_cnn(uint64_t seed, int64_t hidden = 8) {
  nn::manual_seed(seed);
  return std::make_unique<nn::Sequential>(
      nn::make<nn::Conv2d>(3, hidden, 3, 1, 1), nn::make<nn::BatchNorm2d>(hidden),
      nn::make<nn::ReLU>(), nn::make<nn::GlobalAvgPool>(), nn::make<nn::Linear>(hidden, 4));
}

std::vector<std::vector<float>> all_values(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value().to_floats());
  m.visit_buffers("", [&](const std::string&, Tensor& t) { out.push_back(t.to_floats()); });
  return out;
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_weights_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(WeightsTest, RoundTripIntoAFreshModelWithPyTorchNames) {
  auto a = small_cnn(1), b = small_cnn(2);
  // Make the BatchNorm running statistics non-trivial.
  a->visit_buffers(
      "", [](const std::string&, Tensor& t) { stoker::ops::random_uniform(t, 0.5f, 1.5f, 77, 0); });
  ASSERT_NE(all_values(*a), all_values(*b));
  stoker::train::save_weights(*a, dir_ / "w.safetensors");
  const stoker::train::SafetensorsReader r(dir_ / "w.safetensors");
  const std::vector<std::string> want = {"0.bias",        "0.weight", "1.bias", "1.running_mean",
                                         "1.running_var", "1.weight", "4.bias", "4.weight"};
  std::vector<std::string> names = r.names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, want);
  EXPECT_TRUE(stoker::train::load_weights(*b, dir_ / "w.safetensors").empty());
  EXPECT_EQ(all_values(*a), all_values(*b));
}

TEST_F(WeightsTest, MismatchesNameFileAndTensorAndChangeNothing) {
  auto a = small_cnn(1, 8), b = small_cnn(2, 16);
  stoker::train::save_weights(*a, dir_ / "w8.safetensors");
  const auto before = all_values(*b);
  try {
    stoker::train::load_weights(*b, dir_ / "w8.safetensors");
    FAIL() << "shape mismatch not detected";
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("w8.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'0.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("F32[8, 3, 3, 3]"), std::string::npos) << msg;
  }
  EXPECT_EQ(before, all_values(*b));  // nothing was copied

  // A file missing one tensor.
  std::vector<stoker::train::NamedTensor> partial;
  for (auto& [n, p] : a->named_parameters())
    if (n != "4.bias") partial.push_back({n, p->value()});
  stoker::train::save_safetensors(dir_ / "partial.safetensors", partial);
  try {
    stoker::train::load_weights(*a, dir_ / "partial.safetensors");
    FAIL();
  } catch (const stoker::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor '4.bias'"), std::string::npos) << e.what();
  }
}

TEST_F(WeightsTest, ExtraTensorsStrictAndPyTorchBatchNormCounter) {
  auto a = small_cnn(3);
  std::vector<stoker::train::NamedTensor> ts;
  for (auto& [n, p] : a->named_parameters()) ts.push_back({n, p->value()});
  a->visit_buffers("", [&](const std::string& n, Tensor& t) { ts.push_back({n, t}); });
  // What torch's state_dict adds for BatchNorm2d: an int64 scalar counter.
  ts.push_back({"1.num_batches_tracked", Tensor::from_vector<int64_t>({12}, {})});
  stoker::train::save_safetensors(dir_ / "torch_like.safetensors", ts);
  auto b = small_cnn(4);
  const auto ignored = stoker::train::load_weights(*b, dir_ / "torch_like.safetensors");
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_EQ(ignored[0], "1.num_batches_tracked");
  EXPECT_EQ(all_values(*a), all_values(*b));

  ts.push_back({"head.extra", Tensor::zeros({2}, DType::f32)});
  stoker::train::save_safetensors(dir_ / "extra.safetensors", ts);
  EXPECT_THROW(stoker::train::load_weights(*b, dir_ / "extra.safetensors"), stoker::Error);
  EXPECT_EQ(stoker::train::load_weights(*b, dir_ / "extra.safetensors", {.strict = false}).size(),
            2u);
}

}  // namespace

namespace {

// The end of a run that cannot write --save (its folder replaced by a regular file): the
// weights go to the next place that works, the error names the flag, the failure and that
// file, and the file holds the trained weights.
TEST_F(WeightsTest, ASaveThatFailsWritesTheWeightsToAFallbackNamedInTheError) {
  auto a = small_cnn(1);
  fs::create_directories(dir_ / "out");
  std::ofstream(dir_ / "out" / "sub") << "a file where the folder was";
  fs::create_directories(dir_ / "ckpt");
  const fs::path target = dir_ / "out" / "sub" / "model.safetensors";
  std::string msg, hint;
  try {
    stoker::train::save_weights_with_fallback(*a, target, "--save", {dir_ / "ckpt"});
    FAIL() << "no error";
  } catch (const stoker::Error& e) {
    msg = e.message();
    hint = e.hint();
  }
  // Beside it fails too (the same missing folder); the checkpoint folder takes it.
  const fs::path written =
      dir_ / "ckpt" / ("model.unsaved-" + std::to_string(::getpid()) + "-0.safetensors");
  EXPECT_NE(msg.find("--save " + target.string() + " could not be written ("), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("it was written to " + written.string() + " instead"), std::string::npos)
      << msg;
  EXPECT_NE(hint.find("move that file to " + target.string()), std::string::npos) << hint;
  auto b = small_cnn(2);
  stoker::train::load_weights(*b, written);
  EXPECT_EQ(all_values(*b), all_values(*a));
  // A second failure never overwrites the first fallback.
  EXPECT_THROW(stoker::train::save_weights_with_fallback(*a, target, "--save", {dir_ / "ckpt"}),
               stoker::Error);
  EXPECT_TRUE(fs::exists(dir_ / "ckpt" /
                         ("model.unsaved-" + std::to_string(::getpid()) + "-1.safetensors")));
}

// Room for the weights is checked before the run: a disk with less room than the weights take
// is refused naming the flag and both numbers.
TEST_F(WeightsTest, TooLittleRoomForTheWeightsIsRefusedWithTheNumbers) {
  auto a = small_cnn(1);
  const uint64_t bytes = stoker::train::weights_file_bytes(*a);
  uint64_t tensors = 0;
  a->visit_parameters("",
                      [&](const std::string&, nn::Parameter& p) { tensors += p.value().nbytes(); });
  a->visit_buffers("", [&](const std::string&, Tensor& t) { tensors += t.nbytes(); });
  EXPECT_EQ(bytes, tensors);
  // The real disk has room for a small model.
  EXPECT_NO_THROW(stoker::train::check_space_for_weights(*a, dir_ / "w.safetensors", "--save"));
  const int64_t free = stoker::train::free_bytes(dir_);
  ASSERT_GT(free, 0);
  try {
    stoker::train::check_free_space(dir_, static_cast<uint64_t>(free) * 4, 0,
                                    "--save " + (dir_ / "w.safetensors").string(), "--save");
    FAIL() << "no error";
  } catch (const stoker::Error& e) {
    const std::string msg = e.message();
    EXPECT_NE(msg.find("--save " + (dir_ / "w.safetensors").string() + ": its disk has "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(std::to_string(static_cast<uint64_t>(free) * 4) + " bytes)"),
              std::string::npos)
        << msg;
    EXPECT_NE(std::string(e.hint()).find("give --save on another disk"), std::string::npos);
  }
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(stoker::train::check_free_space(dir_, 1, static_cast<uint64_t>(free) * 4,
                                              "the checkpoint folder X", "--checkpoint-dir"));
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("warning: the checkpoint folder X: its disk has "), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("--checkpoint-dir on another disk"), std::string::npos) << warning;
}

}  // namespace
