// RunLock (train/run_lock.h): a second process is refused naming the owner, the same process
// shares its lock, a lock left by a dead process is taken over with a line naming it, and the
// Trainer locks its checkpoint folder and metrics file. Other processes are fork()ed children
// that report through their exit status (and never return into the test).
#include "stoker/train/checkpoint_files.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "stoker/core/error.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
using stoker::train::RunLock;

namespace {

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_run_lock_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Runs `body` in a child process; returns its exit status (-1: it did not exit normally).
template <typename Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The child's verdict on an acquire that must be refused naming `owner`: 0 refused as expected,
// 1 not refused, 2 refused with another message.
int refused_naming(const fs::path& lock_file, pid_t owner) {
  try {
    auto lock = RunLock::acquire(lock_file, "--checkpoint-dir run", "--checkpoint-dir");
    return 1;
  } catch (const stoker::Error& e) {
    const std::string m = e.what();
    const bool named = m.find("--checkpoint-dir run is in use by another run: process " +
                              std::to_string(owner)) != std::string::npos &&
                       m.find(" since ") != std::string::npos &&
                       e.hint().find("another --checkpoint-dir") != std::string::npos;
    if (!named) std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
    return named ? 0 : 2;
  }
}

TEST_F(RunLockTest, ASecondProcessIsRefusedNamingTheOwner) {
  const fs::path file = RunLock::dir_lock_path(dir_);
  const auto lock = RunLock::acquire(file, "--checkpoint-dir run", "--checkpoint-dir");
  const stoker::train::LockOwner owner = RunLock::read_owner(file);
  EXPECT_EQ(owner.pid, ::getpid());
  EXPECT_FALSE(owner.host.empty());
  EXPECT_FALSE(owner.since.empty());
  EXPECT_NE(owner.command.find("stoker_train_tests"), std::string::npos) << owner.command;
  const pid_t me = ::getpid();
  EXPECT_EQ(in_child([&] { return refused_naming(file, me); }), 0);
}

TEST_F(RunLockTest, TheSameProcessSharesItsLock) {
  const fs::path file = RunLock::file_lock_path(dir_ / "m.jsonl");
  EXPECT_EQ(file, dir_ / "m.jsonl.lock");
  const auto a = RunLock::acquire(file, "--metrics m.jsonl", "--metrics");
  const auto b = RunLock::acquire(file, "TrainerOptions::metrics_path", "metrics_path");
  EXPECT_EQ(a.get(), b.get());
}

TEST_F(RunLockTest, ReleasingRemovesTheFileAndFreesIt) {
  const fs::path file = RunLock::dir_lock_path(dir_);
  { auto lock = RunLock::acquire(file, "--checkpoint-dir run", "--checkpoint-dir"); }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(in_child([&] {
              try {
                auto lock = RunLock::acquire(file, "--checkpoint-dir run", "--checkpoint-dir");
                return 0;
              } catch (const stoker::Error&) {
                return 1;
              }
            }),
            0);
}

// A process killed while it holds the lock leaves the file, which names it: the next run takes
// it over, saying whose it was.
TEST_F(RunLockTest, AStaleLockOfADeadProcessIsTakenOver) {
  const fs::path file = RunLock::dir_lock_path(dir_);
  int child = 0;
  {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto lock = RunLock::acquire(file, "--checkpoint-dir run", "--checkpoint-dir");
      ::_exit(0);  // no destructor: as a kill -9 leaves it
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    child = pid;
  }
  ASSERT_TRUE(fs::exists(file));
  EXPECT_EQ(RunLock::read_owner(file).pid, child);
  testing::internal::CaptureStderr();
  std::shared_ptr<RunLock> lock;
  EXPECT_NO_THROW(lock = RunLock::acquire(file, "--checkpoint-dir run", "--checkpoint-dir"));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("--checkpoint-dir run: took over the lock " + file.string() + " of process " +
                     std::to_string(child)),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("which no longer holds it"), std::string::npos) << err;
  EXPECT_EQ(RunLock::read_owner(file).pid, ::getpid());
  // ... and holds it now.
  const pid_t me = ::getpid();
  EXPECT_EQ(in_child([&] { return refused_naming(file, me); }), 0);
}

// The Trainer locks TrainerOptions::checkpoint_dir and metrics_path in fit(): a fit on outputs
// that another process holds is refused before its first step, naming that process.
TEST_F(RunLockTest, TheTrainerRefusesOutputsAnotherProcessHolds) {
  for (const bool metrics : {false, true}) {
    const fs::path ck = dir_ / (metrics ? "ck_m" : "ck");
    const fs::path mpath = dir_ / "metrics.jsonl";
    fs::create_directories(ck);
    const fs::path held = metrics ? RunLock::file_lock_path(mpath) : RunLock::dir_lock_path(ck);
    int ready[2], done[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(done), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {  // holds the lock until the parent is done
      auto lock = RunLock::acquire(held, "other run", "--checkpoint-dir");
      char c = 1;
      [[maybe_unused]] ssize_t n = ::write(ready[1], &c, 1);
      n = ::read(done[0], &c, 1);
      ::_exit(0);
    }
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    const auto blobs = stoker::train_test::make_blobs(40, 3);
    stoker::nn::manual_seed(1);
    stoker::nn::Sequential model;
    model.add(stoker::nn::make<stoker::nn::Linear>(8, 3));
    stoker::optim::SGD opt(model.named_parameters(), {.lr = 0.1f});
    stoker::nn::CrossEntropyLoss loss;
    stoker::train::TrainerOptions o{.progress_bar = false, .quiet = true};
    o.checkpoint_dir = ck;
    if (metrics) o.metrics_path = mpath;
    stoker::train::Trainer t(model, loss, opt, o);
    stoker::data::TensorBatches b(blobs.x, blobs.y, {.batch_size = 10});
    std::string error = "(no error)";
    try {
      t.fit(b, 1);
    } catch (const stoker::Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("is in use by another run: process " + std::to_string(pid)),
              std::string::npos)
        << error;
    EXPECT_EQ(t.step(), 0);                             // refused before the first step
    EXPECT_FALSE(fs::exists(ck / "last.safetensors"));  // nothing written
    EXPECT_EQ(fs::exists(mpath), false) << "metrics written by a refused run";
    c = 1;
    [[maybe_unused]] ssize_t n = ::write(done[1], &c, 1);
    ::waitpid(pid, nullptr, 0);
    for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
  }
}

}  // namespace
