// ZeRO-1 on the GPU over NCCL with one rank (the path must run on one GPU): the sync's
// reduce-scatter and the weights' all-gather go through NCCL, the slices are updated by the
// multi-tensor kernels, and the Trainer's global norm and overflow flag stay on the device.
// Checked against the unsharded data-parallel run on the same communicator (same buckets and
// gradient views, so the same GEMMs): equal within 1e-6 relative (fp32 bit-identity is expected
// but GEMM autotuning may pick another algorithm for a new plan key), and no host sync inside a
// step. Multi-GPU comparisons: tests/dist/multi_rank_gpu_test.cpp (DistMultiRank.ZeroOne*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/graph.h"
#include "dist_test_util.h"
#include "stoker/dist/env.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/dist/sharded_optimizer.h"
#include "stoker/nn/loss.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace dist = stoker::dist;
namespace nn = stoker::nn;
namespace optim = stoker::optim;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;

namespace {

const Device kGpu = Device::cuda(0);

dist::DistContext init_world_one() {
  const std::map<std::string, std::string> vars{
      {"RANK", "0"},
      {"WORLD_SIZE", "1"},
      {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "1"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(stoker::test::free_port())}};
  std::map<std::string, std::optional<std::string>> saved;
  for (const auto& [k, v] : vars) {
    const char* old = std::getenv(k.c_str());
    saved[k] = old ? std::optional<std::string>(old) : std::nullopt;
    setenv(k.c_str(), v.c_str(), 1);
  }
  dist::DistContext ctx = dist::init_from_env({.backend = dist::Backend::nccl, .timeout_s = 30});
  for (const auto& [k, v] : saved) {
    if (v)
      setenv(k.c_str(), v->c_str(), 1);
    else
      unsetenv(k.c_str());
  }
  return ctx;
}

struct ZeroRun {
  std::unique_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
  nn::CrossEntropyLoss loss;
  std::unique_ptr<dist::GradSync> sync;
  std::unique_ptr<stoker::train::Trainer> trainer;
};

// Odd widths (509, 251) so buckets are padded.
std::unique_ptr<ZeroRun> make_run(dist::Communicator& comm, bool zero1,
                                  stoker::amp::Precision precision, optim::StateFormat state = {}) {
  auto r = std::make_unique<ZeroRun>();
  nn::manual_seed(3);
  r->model = std::make_unique<nn::Sequential>(nn::make<nn::Linear>(64, 509), nn::make<nn::GELU>(),
                                              nn::make<nn::Linear>(509, 251), nn::make<nn::GELU>(),
                                              nn::make<nn::Linear>(251, 10));
  r->model->to(kGpu);
  const dist::GradSyncOptions so{.bucket_bytes = 256 << 10, .first_bucket_bytes = 16 << 10};
  const optim::AdamWOptions o{.lr = 1e-3f, .state = state};
  if (zero1) {
    auto sharded = std::make_unique<dist::ShardedGradSync>(comm, *r->model, so);
    r->opt = std::make_unique<dist::ShardedOptimizer>(*sharded, [&](optim::NamedParameters p) {
      return std::make_unique<optim::AdamW>(std::move(p), o);
    });
    r->sync = std::move(sharded);
  } else {
    r->sync = std::make_unique<dist::ReplicatedGradSync>(comm, *r->model, so);
    r->opt = std::make_unique<optim::AdamW>(r->model->named_parameters(), o);
  }
  r->trainer = std::make_unique<stoker::train::Trainer>(
      *r->model, r->loss, *r->opt,
      stoker::train::TrainerOptions{.precision = precision,
                                    .clip_grad_norm = 1.0f,
                                    .progress_bar = false,
                                    .quiet = true,
                                    .grad_sync = r->sync.get()});
  return r;
}

}  // namespace

TEST(ZeroGpuTest, WorldOneOverNcclEqualsTheUnshardedStepWithoutHostSyncs) {
  STOKER_REQUIRE_GPU();
  dist::DistContext ctx = init_world_one();
  const auto batches = stoker::test::blob_batches(8, 23, kGpu);
  for (auto precision :
       {stoker::amp::Precision::fp32, stoker::amp::Precision::bf16, stoker::amp::Precision::fp16}) {
    SCOPED_TRACE(static_cast<int>(precision));
    auto plain = make_run(*ctx.comm, false, precision);
    auto zero = make_run(*ctx.comm, true, precision);
    for (int s = 0; s < 4; ++s) {
      const std::vector<stoker::data::Batch> micro{batches[2 * s], batches[2 * s + 1]};
      plain->trainer->train_step(micro);
      const uint64_t syncs = stoker::core::host_sync_count();
      zero->trainer->train_step(micro);
      // Step 0 may tune GEMM plans with host syncs; later steps must not sync.
      if (s > 0) EXPECT_EQ(stoker::core::host_sync_count(), syncs) << "ZeRO-1 synchronized";
    }
    stoker::core::synchronize_device(kGpu);
    const auto w0 = stoker::test::weights_of(*zero->model);
    // Not bit-identical: the sharded run's weight-gradient GEMMs write into other buffers
    // (other alignments, so other autotuned kernels and fp32 summation orders), and AdamW's
    // normalized step turns ~1e-7 gradient differences of tiny elements into ~1e-6 weight
    // differences (2.4e-6 measured in fp32 on the H200).
    EXPECT_LE(stoker::test::max_rel_diff(w0, stoker::test::weights_of(*plain->model)), 1e-5);
    nn::manual_seed(3);
    auto untouched = make_run(*ctx.comm, false, precision);
    EXPECT_GT(stoker::test::max_rel_diff(stoker::test::weights_of(*untouched->model), w0), 1e-4)
        << "nothing trained";
  }
}

// 8-bit state on the slices through the CUDA kernel: trains, holds u8 codes, and tracks the f32
// run (both ZeRO-1): the two end much closer to each other than to where they started.
TEST(ZeroGpuTest, Int8StateOnSlicesTracksF32State) {
  STOKER_REQUIRE_GPU();
  dist::DistContext ctx = init_world_one();
  const auto batches = stoker::test::blob_batches(6, 29, kGpu);
  auto f32 = make_run(*ctx.comm, true, stoker::amp::Precision::bf16);
  auto int8 = make_run(*ctx.comm, true, stoker::amp::Precision::bf16,
                       {.dtype = optim::StateDType::int8_blockwise, .block = 256});
  for (int s = 0; s < 3; ++s) {
    const std::vector<stoker::data::Batch> micro{batches[2 * s], batches[2 * s + 1]};
    f32->trainer->train_step(micro);
    int8->trainer->train_step(micro);
  }
  bool codes = false;
  for (auto& [n, t] : int8->opt->state()) codes |= t.dtype() == DType::u8 && n != "step_state";
  EXPECT_TRUE(codes);
  EXPECT_LT(int8->opt->state_bytes() * 3, f32->opt->state_bytes());
  const auto w8 = stoker::test::weights_of(*int8->model);
  for (const auto& t : w8)
    for (float v : t) ASSERT_TRUE(std::isfinite(v));
  // The 8-bit run stays much closer to the f32 run than either is to the start: mean distances.
  auto mean_abs = [](const std::vector<std::vector<float>>& a,
                     const std::vector<std::vector<float>>& b) {
    double sum = 0.0;
    int64_t n = 0;
    for (size_t t = 0; t < a.size(); ++t)
      for (size_t i = 0; i < a[t].size(); ++i, ++n) sum += std::abs(a[t][i] - b[t][i]);
    return sum / static_cast<double>(n);
  };
  const auto w32 = stoker::test::weights_of(*f32->model);
  const auto w_init =
      stoker::test::weights_of(*make_run(*ctx.comm, false, stoker::amp::Precision::bf16)->model);
  EXPECT_LT(mean_abs(w8, w32), 0.25 * mean_abs(w32, w_init));
}

// A whole ZeRO-1 step — reduce-scatter on the comm stream, the slices' update, the global norm
// and the weights' all-gather — captured into a CUDA graph: nothing in it waits for the host.
TEST(ZeroGpuTest, AZeroOneStepCapturesIntoACudaGraph) {
  STOKER_REQUIRE_GPU();
  dist::DistContext ctx = init_world_one();
  const auto batches = stoker::test::blob_batches(2, 37, kGpu);
  auto graphed = make_run(*ctx.comm, true, stoker::amp::Precision::bf16);
  auto eager = make_run(*ctx.comm, true, stoker::amp::Precision::bf16);
  graphed->trainer->train_step(batches);  // warm-up: optimizer state, GEMM plans, half copies
  eager->trainer->train_step(batches);
  const stoker::Stream stream = stoker::core::compute_stream(kGpu);
  const stoker::CudaGraph graph =
      stoker::CudaGraph::capture(stream, [&] { graphed->trainer->train_step(batches); });
  graph.launch(stream);
  eager->trainer->train_step(batches);
  stoker::core::synchronize_device(kGpu);
  EXPECT_LE(stoker::test::max_rel_diff(stoker::test::weights_of(*graphed->model),
                                       stoker::test::weights_of(*eager->model)),
            1e-6);
}
