// `stoker launch` (dist::launch) end to end on the CPU: shell one-liners check the environment
// and the failure handling; this test binary, launched as 3 processes, trains over TCP
// (the LaunchChild tests, which skip unless the launcher started them).
#include "stoker/dist/launcher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "dist_test_util.h"
#include "stoker/dist/env.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace dist = stoker::dist;
namespace fs = std::filesystem;
using stoker::Tensor;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

dist::LaunchOptions sh(int n, const std::string& script) {
  dist::LaunchOptions o;
  o.nproc_per_node = n;
  o.master_port = 0;
  o.program = "sh";
  o.args = {"-c", script};
  o.kill_grace_s = 1.0;
  o.forward_stderr = false;
  o.quiet = true;
  return o;
}

bool in_child(const char* name) {
  const char* v = std::getenv("STOKER_TEST_LAUNCH_CHILD");
  return v && std::string(v) == name;
}

// This test binary as the launched program, running one LaunchChild test.
dist::LaunchOptions self(int n, const std::string& child) {
  dist::LaunchOptions o;
  o.nproc_per_node = n;
  o.master_port = 0;
  o.program = fs::read_symlink("/proc/self/exe").string();
  o.args = {"--gtest_filter=LaunchChild." + child, "--gtest_brief=1"};
  o.extra_env = {{"STOKER_TEST_LAUNCH_CHILD", child}};
  o.kill_grace_s = 5.0;
  o.forward_stderr = false;
  o.quiet = true;
  return o;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_launch_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace

TEST_F(LauncherTest, GivesEveryRankTorchrunsEnvironment) {
  dist::LaunchOptions o = sh(3,
                             "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                             "$MASTER_PORT $GROUP_RANK $EXTRA\" > \"$DIR/rank_$RANK\"");
  o.extra_env = {{"DIR", dir_.string()}, {"EXTRA", "x"}};
  const dist::LaunchResult r = dist::launch(o);
  EXPECT_EQ(r.exit_code, 0) << r.failure;
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_GT(r.master_port, 0);
  EXPECT_EQ(r.exit_codes, (std::vector<int>{0, 0, 0}));
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream f(dir_ / ("rank_" + std::to_string(rank)));
    std::string line;
    std::getline(f, line);
    EXPECT_EQ(line, std::to_string(rank) + " 3 " + std::to_string(rank) + " 3 127.0.0.1 " +
                        std::to_string(r.master_port) + " 0 x");
  }
}

TEST_F(LauncherTest, NodeRankOffsetsTheGlobalRanks) {
  dist::LaunchOptions o = sh(2, "echo \"$RANK $WORLD_SIZE $LOCAL_RANK\" > \"$DIR/r_$RANK\"");
  o.nnodes = 3;
  o.node_rank = 2;
  o.master_port = 29999;
  o.extra_env = {{"DIR", dir_.string()}};
  const dist::LaunchResult r = dist::launch(o);
  EXPECT_EQ(r.exit_code, 0) << r.failure;
  std::string line;
  std::getline(std::ifstream(dir_ / "r_5"), line);
  EXPECT_EQ(line, "5 6 1");
}

TEST_F(LauncherTest, AFailingRankStopsTheOthersAndIsReported) {
  const auto start = Clock::now();
  const dist::LaunchResult r =
      dist::launch(sh(3,
                      "if [ \"$RANK\" = 1 ]; then sleep 0.2; echo 'loading shard 1' >&2; "
                      "echo 'error: corrupt record 42 in shard 1' >&2; exit 3; fi; sleep 30"));
  EXPECT_LT(seconds_since(start), 10.0);  // not the 30 s of the others
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_NE(r.failure.find("rank 1 (local 1, pid"), std::string::npos) << r.failure;
  EXPECT_NE(r.failure.find("exited with status 3"), std::string::npos) << r.failure;
  EXPECT_EQ(r.failed_stderr_tail,
            (std::vector<std::string>{"loading shard 1", "error: corrupt record 42 in shard 1"}));
  EXPECT_EQ(r.exit_codes, (std::vector<int>{128 + SIGTERM, 3, 128 + SIGTERM}));
}

TEST_F(LauncherTest, ARankThatIgnoresSigtermIsKilled) {
  const auto start = Clock::now();
  // Rank 0 fails once rank 1 ignores SIGTERM (the marker file says so).
  dist::LaunchOptions o = sh(2,
                             "if [ \"$RANK\" = 0 ]; then while [ ! -f \"$DIR/trapped\" ]; do "
                             "sleep 0.02; done; exit 1; fi; trap '' TERM; touch \"$DIR/trapped\"; "
                             "sleep 30 & wait; sleep 30");
  o.extra_env = {{"DIR", dir_.string()}};
  const dist::LaunchResult r = dist::launch(o);
  EXPECT_LT(seconds_since(start), 8.0);
  EXPECT_EQ(r.failed_rank, 0);
  EXPECT_EQ(r.exit_codes[1], 128 + SIGKILL);
}

TEST_F(LauncherTest, ASignalDeathIsReported) {
  const dist::LaunchResult r = dist::launch(sh(1, "kill -SEGV $$"));
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV);
  EXPECT_NE(r.failure.find("killed by signal 11"), std::string::npos) << r.failure;
}

TEST_F(LauncherTest, BadProgramsAndOptionsAreErrors) {
  dist::LaunchOptions o = sh(1, "true");
  o.program = "no-such-program-stoker";
  std::string e = stoker::test::error_of([&] { dist::launch(o); });
  EXPECT_NE(e.find("'no-such-program-stoker' not found in PATH"), std::string::npos) << e;
  o = sh(0, "true");
  e = stoker::test::error_of([&] { dist::launch(o); });
  EXPECT_NE(e.find("--nproc-per-node 0"), std::string::npos) << e;
}

// Three processes of this binary join over the TCP rendezvous and train: their weights must
// match the single-process run on the union of their batches, and one another bit for bit.
TEST_F(LauncherTest, ProcessesTrainTogetherOverTcp) {
  const dist::LaunchResult r = dist::launch(self(3, "TrainOverTcp"));
  EXPECT_EQ(r.exit_code, 0) << r.failure;
}

TEST_F(LauncherTest, AProcessThatFailsMidTrainingFailsTheJob) {
  const auto start = Clock::now();
  const dist::LaunchResult r = dist::launch(self(3, "RankOneDies"));
  EXPECT_LT(seconds_since(start), 15.0);
  EXPECT_EQ(r.failed_rank, 1) << r.failure;
  EXPECT_EQ(r.exit_code, 3);
  ASSERT_FALSE(r.failed_stderr_tail.empty());
  EXPECT_EQ(r.failed_stderr_tail.back(), "rank 1: the disk went away");
}

// ---- What the launched processes run (skipped unless the launcher started them). ----

TEST(LaunchChild, TrainOverTcp) {
  if (!in_child("TrainOverTcp"))
    GTEST_SKIP() << "run by LauncherTest.ProcessesTrainTogetherOverTcp";
  dist::DistContext ctx = dist::init_from_env({.backend = dist::Backend::tcp, .timeout_s = 30});
  dist::Communicator& comm = *ctx.comm;
  ASSERT_EQ(comm.world_size(), 3);
  ASSERT_EQ(ctx.env.source, "torchrun");
  const int world = comm.world_size(), b = 4, k = 2, steps = 2;
  const stoker::test::Blobs d = stoker::test::make_blobs(world * b * k * steps, 61);
  auto row = [&](int s, int m, int r, int i) { return ((s * k + m) * world + r) * b + i; };
  auto batch = [&](const std::vector<int64_t>& rows) {
    return stoker::data::Batch{stoker::test::take_rows(d.x, rows),
                               stoker::test::take_rows(d.y, rows),
                               static_cast<int64_t>(rows.size())};
  };
  // The reference, computed by every process on its own.
  auto ref = stoker::test::make_mlp(7);
  {
    stoker::optim::SGD opt(ref->named_parameters(), {.lr = 0.3f});
    stoker::nn::CrossEntropyLoss loss;
    stoker::train::Trainer t(*ref, loss, opt, {.progress_bar = false, .quiet = true});
    for (int s = 0; s < steps; ++s) {
      std::vector<stoker::data::Batch> micro;
      for (int m = 0; m < k; ++m) {
        std::vector<int64_t> rows;
        for (int r = 0; r < world; ++r)
          for (int i = 0; i < b; ++i) rows.push_back(row(s, m, r, i));
        micro.push_back(batch(rows));
      }
      t.train_step(micro);
    }
  }
  auto model = stoker::test::make_mlp(comm.rank() == 0 ? 7 : 50 + comm.rank());
  dist::ReplicatedGradSync sync(comm, *model, {.first_bucket_bytes = 300});
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.3f});
  stoker::nn::CrossEntropyLoss loss;
  stoker::train::Trainer t(*model, loss, opt,
                           {.progress_bar = false, .quiet = true, .grad_sync = &sync});
  for (int s = 0; s < steps; ++s) {
    std::vector<stoker::data::Batch> micro;
    for (int m = 0; m < k; ++m) {
      std::vector<int64_t> rows;
      for (int i = 0; i < b; ++i) rows.push_back(row(s, m, comm.rank(), i));
      micro.push_back(batch(rows));
    }
    t.train_step(micro);
  }
  const auto got = stoker::test::weights_of(*model), want = stoker::test::weights_of(*ref);
  for (size_t p = 0; p < got.size(); ++p)
    for (size_t i = 0; i < got[p].size(); ++i)
      ASSERT_NEAR(got[p][i], want[p][i], 2e-5f * (1.0f + std::fabs(want[p][i])));
  for (auto* p : model->parameters()) {  // identical on every rank
    const Tensor mine = p->value().clone(), rank0 = p->value().clone();
    comm.broadcast(rank0, 0);
    EXPECT_EQ(mine.to_floats(), rank0.to_floats());
  }
  comm.barrier();
}

TEST(LaunchChild, RankOneDies) {
  if (!in_child("RankOneDies")) GTEST_SKIP() << "run by LauncherTest.AProcessThatFailsMidTraining";
  dist::DistContext ctx = dist::init_from_env({.backend = dist::Backend::tcp, .timeout_s = 30});
  dist::Communicator& comm = *ctx.comm;
  comm.barrier();
  if (comm.rank() == 1) {
    std::fprintf(stderr, "rank 1: the disk went away\n");
    std::exit(3);
  }
  // The others fail in their next collective; they linger so that the launcher sees rank 1's
  // exit first (it stops them with SIGTERM meanwhile).
  try {
    comm.all_reduce(Tensor::zeros({8}, stoker::DType::f32));
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    std::this_thread::sleep_for(std::chrono::seconds(3));
    throw;
  }
}
