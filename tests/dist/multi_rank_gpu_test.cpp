// Data parallelism across GPUs over NCCL: these tests need 2+ ranks, one process per GPU, so
// they run under a launcher and skip otherwise (in the gpu suite run as one process, and in CI):
//
//   stoker launch --nproc-per-node 2 build-gpu/tests/stoker_gpu_tests \
//       --gtest_filter='DistMultiRank*'
//   torchrun --nproc-per-node 2 build-gpu/tests/stoker_gpu_tests --gtest_filter='DistMultiRank*'
//
// Every rank runs every test; each collective is checked against values every rank can compute
// alone, and the data-parallel Trainer run (each rank its shard of the batch, gradients averaged
// by the ReplicatedGradSync) is checked against the single-GPU run on the whole batch, which every
// rank also computes on its own GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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
using dist::ReduceOp;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;

namespace {

int launched_world_size() {
  const char* w = std::getenv("WORLD_SIZE");
  return w ? std::atoi(w) : 0;
}

// One NCCL world per process, joined by the first test that needs it (init_from_env reads the
// launcher's variables) and kept until exit, as a training program keeps it.
dist::DistContext& world() {
  static dist::DistContext ctx =
      dist::init_from_env({.backend = dist::Backend::nccl, .timeout_s = 120});
  return ctx;
}

#define STOKER_REQUIRE_RANKS()                                                           \
  do {                                                                                   \
    STOKER_REQUIRE_GPU();                                                                \
    if (launched_world_size() < 2)                                                       \
      GTEST_SKIP() << "needs 2+ ranks: run under `stoker launch --nproc-per-node N` or " \
                      "torchrun (see the top of tests/dist/multi_rank_gpu_test.cpp)";    \
  } while (0)

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_floats(); }

}  // namespace

TEST(DistMultiRank, CollectivesCombineEveryRanksValues) {
  STOKER_REQUIRE_RANKS();
  dist::DistContext& ctx = world();
  dist::Communicator& comm = *ctx.comm;
  const int rank = comm.rank(), n = comm.world_size();
  ASSERT_EQ(n, launched_world_size());
  const Device gpu = ctx.device;
  // Odd length: no collective may rely on a multiple of the rank count or of a vector width.
  const int64_t len = 1000003;
  auto rank_values = [&](int r, DType d) {
    std::vector<float> v(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) v[i] = static_cast<float>((i * 7 + r * 13) % 64 - 32);
    return Tensor::from_floats(v, {len}, d, gpu);
  };
  for (DType d : {DType::f32, DType::bf16}) {
    // Small integers: sums are exact in every dtype, so the result is checked exactly.
    Tensor x = rank_values(rank, d);
    comm.all_reduce(x, ReduceOp::sum);
    std::vector<float> want(static_cast<size_t>(len), 0.0f);
    for (int r = 0; r < n; ++r) {
      const std::vector<float> v = host(rank_values(r, DType::f32));
      for (int64_t i = 0; i < len; ++i) want[i] += v[i];
    }
    EXPECT_EQ(host(x), want) << "all_reduce sum " << std::string(stoker::core::dtype_name(d));
  }
  // Broadcast from the last rank.
  Tensor b = rank_values(rank, DType::f32);
  comm.broadcast(b, n - 1);
  EXPECT_EQ(host(b), host(rank_values(n - 1, DType::f32)));
  // All-gather: rank r's block lands at r.
  const int64_t block = 4099;
  Tensor mine = rank_values(rank, DType::f32).slice(0, block).clone();
  Tensor all = Tensor::empty({block * n}, DType::f32, gpu);
  comm.all_gather(mine, all);
  const std::vector<float> got = host(all);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> v = host(rank_values(r, DType::f32).slice(0, block));
    EXPECT_TRUE(std::equal(v.begin(), v.end(), got.begin() + r * block)) << "block of rank " << r;
  }
  // Reduce-scatter: rank r gets the sum of everybody's block r.
  Tensor in = rank_values(rank, DType::f32).slice(0, block * n).clone();
  Tensor out = Tensor::empty({block}, DType::f32, gpu);
  comm.reduce_scatter(in, out, ReduceOp::sum);
  std::vector<float> want(static_cast<size_t>(block), 0.0f);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> v =
        host(rank_values(r, DType::f32).slice(block * rank, block * (rank + 1)));
    for (int64_t i = 0; i < block; ++i) want[i] += v[i];
  }
  EXPECT_EQ(host(out), want);
  comm.barrier();
}

namespace {

struct Run {
  std::unique_ptr<nn::Sequential> model;
  std::unique_ptr<stoker::optim::AdamW> opt;
  nn::CrossEntropyLoss loss;
  std::unique_ptr<dist::ReplicatedGradSync> sync;
  std::unique_ptr<stoker::train::Trainer> trainer;
};

std::unique_ptr<Run> make_run(dist::Communicator* comm, Device gpu,
                              stoker::amp::Precision precision) {
  auto r = std::make_unique<Run>();
  nn::manual_seed(3);
  r->model = std::make_unique<nn::Sequential>(nn::make<nn::Linear>(8, 256), nn::make<nn::GELU>(),
                                              nn::make<nn::Linear>(256, 256), nn::make<nn::GELU>(),
                                              nn::make<nn::Linear>(256, 3));
  r->model->to(gpu);
  if (comm)
    r->sync = std::make_unique<dist::ReplicatedGradSync>(
        *comm, *r->model,
        dist::GradSyncOptions{.bucket_bytes = 128 << 10, .first_bucket_bytes = 8 << 10});
  r->opt = std::make_unique<stoker::optim::AdamW>(r->model->named_parameters(),
                                                  stoker::optim::AdamWOptions{.lr = 1e-2f});
  r->trainer = std::make_unique<stoker::train::Trainer>(
      *r->model, r->loss, *r->opt,
      stoker::train::TrainerOptions{.precision = precision,
                                    .progress_bar = false,
                                    .quiet = true,
                                    .grad_sync = r->sync.get()});
  return r;
}

}  // namespace

// The same 5 steps (2 micro-batches each) on one GPU with the whole batch and on N ranks with
// a 1/N shard each: the mean loss over equal shards is the mean over the batch, so averaged
// gradients — and so the weights — agree up to the order of float sums.
TEST(DistMultiRank, DataParallelStepsEqualTheSingleGpuLargeBatchRun) {
  STOKER_REQUIRE_RANKS();
  dist::DistContext& ctx = world();
  const int rank = ctx.comm->rank(), n = ctx.comm->world_size();
  const Device gpu = ctx.device;
  const int64_t per_rank = 64, global = per_rank * n;
  const int steps = 5, micro = 2;
  const stoker::test::Blobs blobs = stoker::test::make_blobs(global * steps * micro, 11);
  auto batch_rows = [&](int64_t first, int64_t count) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < count; ++i) rows.push_back(first + i);
    return stoker::data::Batch{stoker::test::take_rows(blobs.x, rows).to(gpu),
                               stoker::test::take_rows(blobs.y, rows).to(gpu), count};
  };
  for (auto precision : {stoker::amp::Precision::fp32, stoker::amp::Precision::bf16}) {
    auto single = make_run(nullptr, gpu, precision);
    auto dp = make_run(ctx.comm.get(), gpu, precision);
    for (int s = 0; s < steps; ++s) {
      std::vector<stoker::data::Batch> whole, shard;
      for (int m = 0; m < micro; ++m) {
        const int64_t first = (s * micro + m) * global;
        whole.push_back(batch_rows(first, global));
        shard.push_back(batch_rows(first + rank * per_rank, per_rank));
      }
      single->trainer->train_step(whole);
      dp->trainer->train_step(shard);
    }
    stoker::core::synchronize_device(gpu);
    const auto w_single = stoker::test::weights_of(*single->model);
    const auto w_dp = stoker::test::weights_of(*dp->model);
    // fp32: sums in another order (per-shard partial sums, then the all-reduce). bf16: the
    // forward rounds activations of different GEMM shapes; AdamW's normalized steps of lr 1e-2
    // move weights by ~1e-2 per step, and rounding flips the sign of tiny gradients.
    const double tol = precision == stoker::amp::Precision::fp32 ? 2e-5 : 2e-2;
    EXPECT_LE(stoker::test::max_rel_diff(w_dp, w_single), tol)
        << "rank " << rank << " precision " << static_cast<int>(precision);
    // Every rank holds the same weights after the steps (bit for bit: the same averaged
    // gradients and the same update on each).
    for (const auto& w : w_dp) {
      Tensor t = Tensor::from_floats(w, {static_cast<int64_t>(w.size())}, DType::f32, gpu);
      Tensor r0 = t.clone();
      ctx.comm->broadcast(r0, 0);
      EXPECT_EQ(host(r0), w) << "rank " << rank << " diverged from rank 0";
    }
  }
  ctx.comm->barrier();
}

// ZeRO-1 (optimizer state sharded over the ranks) against the unsharded data-parallel run, both
// on N ranks with the same shards of the batch, clipping on: the reduce-scatter averages what the
// all-reduce averages (NCCL may order a sum of 3+ ranks differently), and clipping's global norm
// adds per-rank partial norms, so fp32 weights agree to float rounding; per-rank optimizer state
// is about 1/N of the unsharded state, and every rank ends with the same weights.
TEST(DistMultiRank, ZeroOneEqualsUnshardedDataParallel) {
  STOKER_REQUIRE_RANKS();
  dist::DistContext& ctx = world();
  const int rank = ctx.comm->rank(), n = ctx.comm->world_size();
  const Device gpu = ctx.device;
  const int64_t per_rank = 64;
  const int steps = 5;
  const stoker::test::Blobs blobs = stoker::test::make_blobs(per_rank * n * steps, 13);
  auto shard = [&](int s) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < per_rank; ++i) rows.push_back((s * n + rank) * per_rank + i);
    return stoker::data::Batch{stoker::test::take_rows(blobs.x, rows).to(gpu),
                               stoker::test::take_rows(blobs.y, rows).to(gpu), per_rank};
  };
  struct Side {
    std::unique_ptr<nn::Sequential> model;
    std::unique_ptr<dist::GradSync> sync;
    std::unique_ptr<stoker::optim::Optimizer> opt;
    nn::CrossEntropyLoss loss;
    std::unique_ptr<stoker::train::Trainer> trainer;
  };
  auto make_side = [&](bool zero1, stoker::amp::Precision precision) {
    auto r = std::make_unique<Side>();
    nn::manual_seed(3);
    // Odd widths: slices cut through parameters, buckets are padded.
    r->model = std::make_unique<nn::Sequential>(nn::make<nn::Linear>(8, 257), nn::make<nn::GELU>(),
                                                nn::make<nn::Linear>(257, 253),
                                                nn::make<nn::GELU>(), nn::make<nn::Linear>(253, 3));
    r->model->to(gpu);
    const dist::GradSyncOptions so{.bucket_bytes = 128 << 10, .first_bucket_bytes = 8 << 10};
    const stoker::optim::AdamWOptions o{.lr = 1e-2f};
    if (zero1) {
      auto sharded = std::make_unique<dist::ShardedGradSync>(*ctx.comm, *r->model, so);
      r->opt =
          std::make_unique<dist::ShardedOptimizer>(*sharded, [&](stoker::optim::NamedParameters p) {
            return std::make_unique<stoker::optim::AdamW>(std::move(p), o);
          });
      r->sync = std::move(sharded);
    } else {
      r->sync = std::make_unique<dist::ReplicatedGradSync>(*ctx.comm, *r->model, so);
      r->opt = std::make_unique<stoker::optim::AdamW>(r->model->named_parameters(), o);
    }
    r->trainer = std::make_unique<stoker::train::Trainer>(
        *r->model, r->loss, *r->opt,
        stoker::train::TrainerOptions{.precision = precision,
                                      .clip_grad_norm = 0.5f,
                                      .progress_bar = false,
                                      .quiet = true,
                                      .grad_sync = r->sync.get()});
    return r;
  };
  for (auto precision : {stoker::amp::Precision::fp32, stoker::amp::Precision::bf16}) {
    auto plain = make_side(false, precision);
    auto zero = make_side(true, precision);
    for (int s = 0; s < steps; ++s) {
      const stoker::data::Batch b = shard(s);
      plain->trainer->train_step({&b, 1});
      zero->trainer->train_step({&b, 1});
    }
    stoker::core::synchronize_device(gpu);
    const auto w_plain = stoker::test::weights_of(*plain->model);
    const auto w_zero = stoker::test::weights_of(*zero->model);
    // bf16: a last-bit difference in a master weight can flip a compute copy's rounding.
    const double tol = precision == stoker::amp::Precision::fp32 ? 2e-5 : 2e-2;
    EXPECT_LE(stoker::test::max_rel_diff(w_zero, w_plain), tol)
        << "rank " << rank << " precision " << static_cast<int>(precision);
    const double share = static_cast<double>(zero->opt->state_bytes()) /
                         static_cast<double>(plain->opt->state_bytes());
    EXPECT_GT(share, 0.99 / n) << "rank " << rank;
    EXPECT_LT(share, 1.05 / n) << "rank " << rank;
    for (const auto& w : w_zero) {
      Tensor t = Tensor::from_floats(w, {static_cast<int64_t>(w.size())}, DType::f32, gpu);
      Tensor r0 = t.clone();
      ctx.comm->broadcast(r0, 0);
      EXPECT_EQ(host(r0), w) << "rank " << rank << " diverged from rank 0";
    }
  }
  ctx.comm->barrier();
}
