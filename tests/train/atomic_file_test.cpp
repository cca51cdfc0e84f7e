// util::write_file_atomically (src/util/atomic_file.h), which every checkpoint and weight file
// goes through: a SIGINT/SIGTERM in the middle of a write leaves no temporary behind, the
// process still ends by that signal, and a program's own handlers are left alone.
#include "util/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
namespace util = stoker::util;

namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Death tests fork: the child writes into the same folder the parent then inspects.
    GTEST_FLAG_SET(death_test_style, "fast");
    dir_ = fs::temp_directory_path() /
           ("stoker_atomic_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Names in the folder (the files a write left).
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    return out;
  }

  // Writes half a file, then raises `sig` inside the write.
  void write_and_raise(int sig) {
    util::write_file_atomically(dir_ / "ckpt.safetensors", [&](int fd) {
      const std::string half(1 << 16, 'x');
      util::write_all(fd, half.data(), half.size(), dir_ / "ckpt.safetensors");
      ::raise(sig);
      util::write_all(fd, half.data(), half.size(), dir_ / "ckpt.safetensors");
    });
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, ASignalDuringTheWriteRemovesTheTemporary) {
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig);
    EXPECT_EXIT(write_and_raise(sig), ::testing::KilledBySignal(sig), "");
    EXPECT_EQ(files(), std::vector<std::string>{}) << "a temporary survived the signal";
  }
  // Outside a write the signals keep their default disposition.
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

extern "C" void exit_42(int) { ::_exit(42); }

// A program that handles SIGTERM itself keeps its handler during writes.
TEST_F(AtomicFileTest, AProgramsOwnHandlerIsKept) {
  const auto handle_then_write = [&] {
    struct sigaction own {};
    own.sa_handler = exit_42;
    sigemptyset(&own.sa_mask);
    ::sigaction(SIGTERM, &own, nullptr);
    write_and_raise(SIGTERM);
  };
  EXPECT_EXIT(handle_then_write(), ::testing::ExitedWithCode(42), "");
  // Its handler ran instead of ours: the temporary is there, for remove_stale_temporaries.
  EXPECT_EQ(files().size(), 1u);
}

TEST_F(AtomicFileTest, AWriteLeavesOnlyTheFile) {
  util::write_file_atomically(dir_ / "a.safetensors",
                              [&](int fd) { util::write_all(fd, "abc", 3, dir_ / "a"); });
  EXPECT_EQ(files(), std::vector<std::string>{"a.safetensors"});
  std::string text;
  std::ifstream(dir_ / "a.safetensors") >> text;
  EXPECT_EQ(text, "abc");
}

}  // namespace
