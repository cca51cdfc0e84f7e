// Early output-path checks (core/output_path.h): what passes, what is created, and that every
// refusal names the input, the path and the fix. The unwritable places are ones that refuse
// root too (a path below a regular file, procfs), since CI runs as root.
#include "stoker/core/output_path.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace stoker::core {
namespace {

namespace fs = std::filesystem;

class OutputPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_output_path_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  size_t entries(const fs::path& d) const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(d), fs::directory_iterator()));
  }

  fs::path dir_;
};

// The error `f` throws, with its message and hint; fails the test when it does not throw.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no stoker::Error thrown";
  return Error("", "");
}

TEST_F(OutputPathTest, AcceptsAFileInAWritableFolderAndLeavesNothingBehind) {
  const fs::path file = dir_ / "weights.safetensors";
  EXPECT_NO_THROW(check_output_path(file, "--save"));
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(entries(dir_), 0u);  // the probe file is gone
  std::ofstream(file) << "old";  // an existing file is replaced later: fine
  EXPECT_NO_THROW(check_output_path(file, "--save"));
  EXPECT_NO_THROW(check_output_dir(dir_, "--checkpoint-dir"));
  EXPECT_EQ(entries(dir_), 1u);
}

TEST_F(OutputPathTest, CreatesMissingFolders) {
  const fs::path file = dir_ / "a" / "b" / "weights.safetensors";
  EXPECT_NO_THROW(check_output_path(file, "--save"));
  EXPECT_TRUE(fs::is_directory(dir_ / "a" / "b"));
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(entries(dir_ / "a" / "b"), 0u);
  EXPECT_NO_THROW(check_output_dir(dir_ / "c" / "d", "checkpoint_dir"));
  EXPECT_TRUE(fs::is_directory(dir_ / "c" / "d"));
  EXPECT_EQ(entries(dir_ / "c" / "d"), 0u);
}

TEST_F(OutputPathTest, RejectsAFolderWhereAFileGoes) {
  const Error e = error_of([&] { check_output_path(dir_, "--save"); });
  EXPECT_NE(e.message().find("--save " + dir_.string()), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("is a folder"), std::string::npos) << e.message();
  EXPECT_NE(e.hint().find((dir_ / "out").string()), std::string::npos) << e.hint();
  // A trailing slash names a folder even when it does not exist yet.
  const Error slash = error_of([&] { check_output_path(dir_.string() + "/new/", "--save"); });
  EXPECT_NE(slash.message().find("is a folder"), std::string::npos) << slash.message();
  EXPECT_FALSE(fs::exists(dir_ / "new"));
}

TEST_F(OutputPathTest, RejectsAPathBelowARegularFile) {
  const fs::path file = dir_ / "plain";
  std::ofstream(file) << "x";
  for (const fs::path& p : {file / "w.safetensors", file / "deeper" / "w.safetensors"}) {
    const Error e = error_of([&] { check_output_path(p, "--save"); });
    EXPECT_NE(e.message().find("--save " + p.string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(file.string() + " is not a folder"), std::string::npos)
        << e.message();
    EXPECT_FALSE(e.hint().empty());
  }
  const Error d = error_of([&] { check_output_dir(file, "TrainerOptions::checkpoint_dir"); });
  EXPECT_NE(d.message().find("TrainerOptions::checkpoint_dir " + file.string()), std::string::npos)
      << d.message();
  EXPECT_TRUE(fs::is_regular_file(file));  // untouched
}

TEST_F(OutputPathTest, RejectsAFolderThatTakesNoFiles) {
  // procfs takes no new files, not even from root.
  if (!fs::is_directory("/proc/self")) GTEST_SKIP() << "no procfs";
  const Error e = error_of([&] { check_output_path("/proc/stoker-weights", "--save"); });
  EXPECT_NE(e.message().find("--save /proc/stoker-weights: cannot create a file in /proc"),
            std::string::npos)
      << e.message();
  EXPECT_FALSE(e.hint().empty());
  const Error d = error_of([&] { check_output_dir("/proc/stoker-ckpt/a", "--checkpoint-dir"); });
  EXPECT_NE(d.message().find("--checkpoint-dir /proc/stoker-ckpt/a: cannot create the folder"),
            std::string::npos)
      << d.message();
}

TEST_F(OutputPathTest, RejectsAnEmptyPath) {
  EXPECT_NE(error_of([] { check_output_path("", "--save"); }).message().find("--save"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_output_dir("", "--cache"); }).message().find("--cache"),
            std::string::npos);
}

}  // namespace
}  // namespace stoker::core
