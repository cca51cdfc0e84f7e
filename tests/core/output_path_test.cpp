// Early output-path checks (core/output_path.h): what passes, what is created, and that every
// refusal names the input, the path and the fix; inputs that are not regular files refused
// without being opened; PathGuard's clashes of outputs with inputs. The unwritable places are ones
// that refuse root too (a path below a regular file, procfs), since CI runs as root.
#include "stoker/core/output_path.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
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

TEST_F(OutputPathTest, InputsThatAreNotRegularFilesAreRefusedWithoutOpeningThem) {
  const fs::path file = dir_ / "tokens.u16";
  std::ofstream(file) << "abcd";
  EXPECT_NO_THROW(check_input_file(file, "--data"));
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer: opening it for reading would block this test forever.
  Error e = error_of([&] { check_input_file(fifo, "--data"); });
  EXPECT_NE(e.message().find("--data " + fifo.string() + ": is a FIFO"), std::string::npos)
      << e.message();
  EXPECT_NE(e.hint().find("regular file"), std::string::npos) << e.hint();
  e = error_of([&] { (void)open_input_file(fifo, "--val"); });
  EXPECT_NE(e.message().find("--val " + fifo.string() + ": is a FIFO"), std::string::npos)
      << e.message();
  e = error_of([&] { check_input_file(dir_, "--data"); });
  EXPECT_NE(e.message().find("is a folder, not a regular file"), std::string::npos) << e.message();
  e = error_of([&] { check_input_file("/dev/null", "--resume"); });
  EXPECT_NE(e.message().find("--resume /dev/null: is a character device"), std::string::npos)
      << e.message();
  e = error_of([&] { check_input_file(dir_ / "missing", "--data"); });
  EXPECT_NE(e.message().find("No such file"), std::string::npos) << e.message();
  const int fd = open_input_file(file, "--data");
  ASSERT_GE(fd, 0);
  char buf[4];
  EXPECT_EQ(::read(fd, buf, 4), 4);  // blocking again, reads as usual
  ::close(fd);
  // A database folder: a folder whose data.mdb is a regular file.
  const fs::path db = dir_ / "db";
  fs::create_directories(db);
  EXPECT_NO_THROW(check_input_folder(db, "--data", {"data.mdb"}));  // missing: the reader's
  ASSERT_EQ(::mkfifo((db / "data.mdb").c_str(), 0600), 0);
  e = error_of([&] { check_input_folder(db, "--data", {"data.mdb"}); });
  EXPECT_NE(
      e.message().find("--data " + db.string() + ": " + (db / "data.mdb").string() + " is a FIFO"),
      std::string::npos)
      << e.message();
  e = error_of([&] { check_input_folder(file, "--val", {"data.mdb"}); });
  EXPECT_NE(e.message().find("--val " + file.string() + ": is a file, not a folder"),
            std::string::npos)
      << e.message();
  e = error_of([&] { check_input_folder(fifo, "--val"); });
  EXPECT_NE(e.message().find("is a FIFO (named pipe), not a folder"), std::string::npos)
      << e.message();
}

TEST_F(OutputPathTest, ASocketIsNoInputFile) {
  const fs::path sock = dir_ / "s";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (sock.string().size() >= sizeof(addr.sun_path)) GTEST_SKIP() << "path too long";
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const Error e = error_of([&] { check_input_file(sock, "--data"); });
  EXPECT_NE(e.message().find("is a socket"), std::string::npos) << e.message();
  ::close(fd);
}

TEST_F(OutputPathTest, SameFileSeesThroughSymlinksAndHardLinks) {
  const fs::path a = dir_ / "a", b = dir_ / "b";
  std::ofstream(a) << "x";
  std::ofstream(b) << "x";
  fs::create_symlink(a, dir_ / "sym");
  fs::create_hard_link(a, dir_ / "hard");
  EXPECT_TRUE(same_file(a, dir_ / "sym"));
  EXPECT_TRUE(same_file(a, dir_ / "hard"));
  EXPECT_TRUE(same_file(a, dir_ / "." / "sub" / ".." / "a"));
  EXPECT_FALSE(same_file(a, b));                                    // the same bytes, another file
  EXPECT_TRUE(same_file(dir_ / "new", dir_ / "x" / ".." / "new"));  // neither exists
  EXPECT_FALSE(same_file(a, ""));
}

TEST_F(OutputPathTest, PathGuardRefusesAnOutputOnAnInputFile) {
  const fs::path tokens = dir_ / "tokens.u16";
  std::ofstream(tokens) << "abcd";
  fs::create_symlink(tokens, dir_ / "link.u16");
  fs::create_hard_link(tokens, dir_ / "hard.u16");
  PathGuard guard;
  guard.input("--data", tokens);
  for (const fs::path& out :
       {tokens, dir_ / "link.u16", dir_ / "hard.u16", dir_ / "sub" / ".." / "tokens.u16"}) {
    const Error e = error_of([&] { guard.output("--metrics", out, PathGuard::Kind::file); });
    EXPECT_NE(
        e.message().find("--metrics " + out.string() + " is the input --data " + tokens.string()),
        std::string::npos)
        << e.message();
    EXPECT_NE(e.hint().find("write --metrics somewhere else"), std::string::npos) << e.hint();
  }
  EXPECT_NO_THROW(guard.output("--metrics", dir_ / "m.jsonl", PathGuard::Kind::file));
  EXPECT_NO_THROW(guard.output("--save", dir_ / "w.safetensors", PathGuard::Kind::file));
  // Two outputs on one file.
  const Error e =
      error_of([&] { guard.output("--json", dir_ / "m.jsonl", PathGuard::Kind::file); });
  EXPECT_NE(e.message().find("--json " + (dir_ / "m.jsonl").string() + " is also --metrics"),
            std::string::npos)
      << e.message();
  std::ifstream in(tokens);
  std::string bytes;
  in >> bytes;
  EXPECT_EQ(bytes, "abcd");  // nothing was opened for writing
  EXPECT_FALSE(fs::exists(dir_ / "m.jsonl"));
}

TEST_F(OutputPathTest, PathGuardRefusesAnOutputInsideAnInputFolder) {
  const fs::path db = dir_ / "db";
  fs::create_directories(db);
  std::ofstream(db / "data.mdb") << "pages";
  fs::create_directory_symlink(db, dir_ / "dblink");
  fs::create_hard_link(db / "data.mdb", dir_ / "elsewhere.mdb");
  PathGuard guard;
  guard.input("--data", db);
  for (const fs::path& out : {db / "data.mdb", db / "new.json", db / "a" / "b.json",
                              dir_ / "dblink" / "data.mdb", dir_ / "elsewhere.mdb"}) {
    const Error e = error_of([&] { guard.output("--save", out, PathGuard::Kind::file); });
    EXPECT_NE(e.message().find("--save " + out.string() + " is inside the input folder --data " +
                               db.string()),
              std::string::npos)
        << e.message();
  }
  for (const fs::path& out : {db, db / "ck", dir_ / "dblink"}) {
    const Error e =
        error_of([&] { guard.output("--checkpoint-dir", out, PathGuard::Kind::folder); });
    EXPECT_NE(e.message().find("--checkpoint-dir " + out.string()), std::string::npos)
        << e.message();
  }
  EXPECT_NO_THROW(guard.output("--save", dir_ / "dbx" / "w.safetensors", PathGuard::Kind::file));
  EXPECT_FALSE(fs::exists(db / "new.json"));
}

TEST_F(OutputPathTest, PathGuardRefusesAnOutputFolderThatHoldsAnInput) {
  fs::create_directories(dir_ / "run" / "data");
  const fs::path tokens = dir_ / "run" / "data" / "tokens.u16";
  const fs::path resume = dir_ / "run" / "step_10.safetensors";
  std::ofstream(tokens) << "abcd";
  std::ofstream(resume) << "ckpt";
  PathGuard guard;
  guard.input("--data", tokens);
  guard.input("--resume", resume);
  const Error e = error_of([&] {
    guard.output("--checkpoint-dir", dir_ / "run", PathGuard::Kind::folder, {"--resume"});
  });
  EXPECT_NE(e.message().find("--checkpoint-dir " + (dir_ / "run").string() +
                             " holds the input --data " + tokens.string()),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.hint().find("a folder of its own"), std::string::npos) << e.hint();
  // The checkpoint folder may hold the checkpoint a run resumes from.
  PathGuard resuming;
  resuming.input("--resume", resume);
  EXPECT_NO_THROW(
      resuming.output("--checkpoint-dir", dir_ / "run", PathGuard::Kind::folder, {"--resume"}));
  EXPECT_NO_THROW(resuming.output("--save", dir_ / "run" / "w.safetensors", PathGuard::Kind::file));
}

}  // namespace
}  // namespace stoker::core
