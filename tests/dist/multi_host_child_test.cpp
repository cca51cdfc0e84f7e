// The program that tests/dist/multi_host_test.py (CTest dist.multi_host) runs under
// `stoker launch`: one node of 4 ranks, or two network-namespace "hosts" of 2 ranks each. It
// trains a small MLP on TensorBatches over the TCP backend (dist::init_from_env) and writes
// this rank's final weights, as the hex bits of every float, to $STOKER_MH_OUT/weights_rank<R>.
// Skipped unless STOKER_TEST_LAUNCH_CHILD=MultiHost (the script sets it).
//   STOKER_MH_STEPS          optimizer steps (default 4)
//   STOKER_MH_STEP_SLEEP_MS  a pause after each step (default 0): the kill check's long run
// After its first step, rank R writes its pid to $STOKER_MH_OUT/started_rank<R>. A failed
// collective is printed on stderr as "rank R: <error>" and ends the process with status 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dist_test_util.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/dist/env.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/step_observer.h"
#include "stoker/train/trainer.h"

namespace dist = stoker::dist;
namespace fs = std::filesystem;

namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

// Writes the started marker after the first step and pauses after every step.
class Pace : public stoker::train::StepObserver {
 public:
  Pace(fs::path marker, int64_t sleep_ms) : marker_(std::move(marker)), sleep_ms_(sleep_ms) {}
  void on_step_done(const stoker::train::StepEnd& s) override {
    if (s.step == 1) {
      const fs::path tmp = marker_.string() + ".tmp";
      std::ofstream(tmp) << ::getpid() << "\n";
      fs::rename(tmp, marker_);
    }
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
  }

 private:
  fs::path marker_;
  int64_t sleep_ms_;
};

void train(const fs::path& out) {
  dist::DistContext ctx = dist::init_from_env({.backend = dist::Backend::tcp, .timeout_s = 30});
  dist::Communicator& comm = *ctx.comm;
  const int rank = comm.rank();
  const int64_t steps = env_int("STOKER_MH_STEPS", 4);
  const stoker::test::Blobs d = stoker::test::make_blobs(256, 61);
  // Different initial weights per rank: the gradient sync's broadcast from rank 0 makes them
  // equal, across hosts too.
  auto model = stoker::test::make_mlp(rank == 0 ? 7 : 50 + static_cast<uint64_t>(rank));
  dist::ReplicatedGradSync sync(comm, *model, {.first_bucket_bytes = 300});
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.3f});
  stoker::nn::CrossEntropyLoss loss;
  stoker::train::Trainer t(
      *model, loss, opt,
      {.progress_bar = false, .max_steps = steps, .quiet = true, .grad_sync = &sync});
  Pace pace(out / ("started_rank" + std::to_string(rank)), env_int("STOKER_MH_STEP_SLEEP_MS", 0));
  t.add_observer(pace);
  stoker::data::TensorBatches batches(
      d.x, d.y, {.batch_size = 8, .seed = 5, .rank = rank, .world_size = comm.world_size()});
  t.fit(batches, 1 << 30);
  std::string hex;
  for (const auto& w : stoker::test::weights_of(*model))
    for (const float f : w) {
      uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof(bits));
      char buf[16];
      std::snprintf(buf, sizeof(buf), "%08" PRIx32 "\n", bits);
      hex += buf;
    }
  const fs::path file = out / ("weights_rank" + std::to_string(rank));
  std::ofstream(file.string() + ".tmp") << hex;
  fs::rename(file.string() + ".tmp", file);
  comm.barrier();
}

}  // namespace

TEST(MultiHostChild, Train) {
  const char* child = std::getenv("STOKER_TEST_LAUNCH_CHILD");
  if (!child || std::string(child) != "MultiHost")
    GTEST_SKIP() << "run by tests/dist/multi_host_test.py (CTest dist.multi_host)";
  const char* out = std::getenv("STOKER_MH_OUT");
  ASSERT_TRUE(out && *out) << "STOKER_MH_OUT is not set";
  try {
    train(out);
  } catch (const std::exception& e) {
    // On stderr, where `stoker launch` keeps each rank's last lines for its report.
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK") ? std::getenv("RANK") : "?",
                 e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}
