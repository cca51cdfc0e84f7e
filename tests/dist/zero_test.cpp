// ZeRO-1 (dist::ShardedGradSync + dist::ShardedOptimizer) on the thread backend: training equals
// the unsharded data-parallel run, state is ~1/N per rank, checkpoints resume. Parameter sizes are
// odd (13, 7, ...) so slices split parameters and buckets are padded.
//
// Bit-identity: the thread backend's reduce-scatter adds the ranks in the same order as its
// all-reduce, and the f32/bf16 AdamW/SGD updates are element-wise, so the sharded weights equal
// the unsharded ones bit for bit. The exception is clipping: the global norm is the norm of the
// per-rank slice norms, a different summation order from the norm of the parameter list, so the
// clip factor may differ in its last bits: compared within 1e-5 relative (a few float ulps of
// drift over the steps, far below the effect of clipping itself, which the test also checks).
#include "stoker/dist/sharded_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <limits>
#include <type_traits>

#include "dist/tcp_communicator.h"
#include "dist/thread_communicator.h"
#include "dist_test_util.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/layout.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace dist = stoker::dist;
namespace nn = stoker::nn;
namespace data = stoker::data;
namespace optim = stoker::optim;
using stoker::DType;
using stoker::Tensor;
using stoker::test::Blobs;
using stoker::test::error_of;
using stoker::test::weights_of;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;
using Weights = std::vector<std::vector<float>>;

namespace {

// Linear(8, 13) ReLU Linear(13, 7) ReLU Linear(7, 3): 104 + 13 + 91 + 7 + 21 + 3 values, none a
// multiple of 16, so rank slices cut through parameters.
std::unique_ptr<nn::Sequential> make_odd_mlp(uint64_t seed, int64_t hidden = 13) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, hidden));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(hidden, 7));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(7, 3));
  return m;
}

enum class Opt { adamw, sgd_momentum };

struct ZeroRun {
  int world = 2;
  bool zero1 = false;
  Opt opt = Opt::adamw;
  int steps = 4;
  int accum = 1;  // micro-batches per step (no_sync on all but the last)
  float clip = 0.0f;
  stoker::amp::Precision precision = stoker::amp::Precision::fp32;
  optim::StateFormat state{};
  std::shared_ptr<const dist::GradCompression> compression = dist::compression::none();
  int64_t hidden = 13;
  bool tcp = false;  // ranks as threads with their own TcpCommunicator (sockets) instead
};

// fn on every rank of run.world, over the thread backend or over TCP sockets.
void run_world(const ZeroRun& run, const std::function<void(dist::Communicator&)>& fn) {
  if (!run.tcp) return dist::run_ranks(run.world, fn);
  const int port = stoker::test::free_port();
  std::vector<std::future<std::string>> f;
  for (int r = 0; r < run.world; ++r) {
    f.push_back(std::async(std::launch::async, [&, r] {
      return error_of([&] {
        dist::TcpCommunicator comm(
            r, run.world,
            {.rendezvous = {.master_addr = "127.0.0.1", .master_port = port, .timeout_s = 10},
             .timeout_s = 30});
        fn(comm);
      });
    }));
  }
  for (size_t r = 0; r < f.size(); ++r) EXPECT_EQ(f[r].get(), "(no error)") << "rank " << r;
}

std::unique_ptr<optim::Optimizer> make_inner(Opt opt, optim::NamedParameters params,
                                             const optim::StateFormat& state) {
  if (opt == Opt::adamw)
    return std::make_unique<optim::AdamW>(std::move(params),
                                          optim::AdamWOptions{.lr = 0.02f, .state = state});
  return std::make_unique<optim::SGD>(
      std::move(params),
      optim::SgdOptions{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f, .state = state});
}

dist::GradSyncOptions sync_options(const ZeroRun& run) {
  // Small buckets: several of them, each padded for the slices.
  return {.bucket_bytes = 400, .first_bucket_bytes = 100, .compression = run.compression};
}

// One rank's gradient sync and optimizer: replicated with a plain optimizer over the model, or
// ZeRO-1's sharded sync with a ShardedOptimizer over its slices. The optimizer goes first.
struct RankTraining {
  std::unique_ptr<dist::GradSync> sync;
  std::unique_ptr<optim::Optimizer> opt;
};

RankTraining make_training(const ZeroRun& run, dist::Communicator& comm, nn::Module& m) {
  RankTraining t;
  if (!run.zero1) {
    t.sync = std::make_unique<dist::ReplicatedGradSync>(comm, m, sync_options(run));
    t.opt = make_inner(run.opt, m.named_parameters(), run.state);
    return t;
  }
  auto sharded = std::make_unique<dist::ShardedGradSync>(comm, m, sync_options(run));
  t.opt = std::make_unique<dist::ShardedOptimizer>(*sharded, [&](optim::NamedParameters p) {
    return make_inner(run.opt, std::move(p), run.state);
  });
  t.sync = std::move(sharded);
  return t;
}

// Batches of micro-step m of step s for rank r.
data::Batch batch_of(const Blobs& d, int world, int accum, int s, int m, int r) {
  constexpr int64_t b = 5;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < b; ++i) rows.push_back(((s * accum + m) * world + r) * b + i);
  return {stoker::test::take_rows(d.x, rows), stoker::test::take_rows(d.y, rows), b};
}

// Trains `run` on every rank (threads) and returns each rank's final weights; `rank_hook` runs
// on each rank after its Trainer is built (checkpoint tests, state-size checks).
std::vector<Weights> train(
    const ZeroRun& run,
    const std::function<void(int rank, int step, Trainer&, optim::Optimizer&)>& after_step = {}) {
  const Blobs d = stoker::test::make_blobs(run.world * 5 * run.accum * run.steps, 77);
  std::vector<std::unique_ptr<nn::Sequential>> models;
  for (int r = 0; r < run.world; ++r)
    models.push_back(make_odd_mlp(r == 0 ? 5 : 50 + r, run.hidden));
  run_world(run, [&](dist::Communicator& comm) {
    nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
    auto [sync, opt] = make_training(run, comm, m);
    nn::CrossEntropyLoss loss;
    Trainer t(m, loss, *opt,
              {.precision = run.precision,
               .clip_grad_norm = run.clip,
               .progress_bar = false,
               .quiet = true,
               .grad_sync = sync.get()});
    for (int s = 0; s < run.steps; ++s) {
      std::vector<data::Batch> micro;
      for (int mi = 0; mi < run.accum; ++mi)
        micro.push_back(batch_of(d, run.world, run.accum, s, mi, comm.rank()));
      t.train_step(micro);
      if (after_step) after_step(comm.rank(), s, t, *opt);
    }
  });
  std::vector<Weights> out;
  for (auto& m : models) out.push_back(weights_of(*m));
  return out;
}

void expect_all_ranks_equal(const std::vector<Weights>& w, const std::string& what) {
  for (size_t r = 1; r < w.size(); ++r) EXPECT_EQ(w[r], w[0]) << what << ": rank " << r;
}

void expect_close(const Weights& a, const Weights& b, float tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].size(), b[t].size());
    for (size_t i = 0; i < a[t].size(); ++i)
      ASSERT_NEAR(a[t][i], b[t][i], tol * (1.0f + std::fabs(b[t][i])))
          << what << ": tensor " << t << " element " << i;
  }
}

// Sharded and unsharded runs of `run`, both trained, bit-identical and different from the start.
void expect_zero1_equals_unsharded(ZeroRun run, const std::string& what) {
  run.zero1 = false;
  const auto plain = train(run);
  run.zero1 = true;
  const auto sharded = train(run);
  expect_all_ranks_equal(sharded, what + " (ZeRO-1)");
  EXPECT_EQ(sharded[0], plain[0]) << what;
  EXPECT_NE(sharded[0], weights_of(*make_odd_mlp(5, run.hidden))) << what << ": nothing trained";
}

}  // namespace

TEST(ZeroTest, SyncShardsPaddedBucketsAndKeepsValuesAsViews) {
  for (int world : {2, 3}) {
    auto models = std::vector<std::unique_ptr<nn::Sequential>>();
    for (int r = 0; r < world; ++r) models.push_back(make_odd_mlp(5));
    dist::run_ranks(world, [&](dist::Communicator& comm) {
      nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
      const Weights before = weights_of(m);
      dist::ShardedGradSync sync(comm, m, {.bucket_bytes = 400, .first_bucket_bytes = 100});
      EXPECT_EQ(weights_of(m), before);  // moving values into the buckets keeps them
      ASSERT_GE(sync.num_buckets(), 3);
      const std::string described = "sharded (ZeRO-1) over " + std::to_string(world) +
                                    " ranks: reduce-scatter of " +
                                    std::to_string(sync.num_buckets()) + " buckets";
      EXPECT_EQ(sync.describe().rfind(described, 0), 0u) << sync.describe();
      const auto shards = sync.shard_parameters();
      ASSERT_EQ(shards.size(), static_cast<size_t>(sync.num_buckets()));
      int64_t covered = 0;
      for (int b = 0; b < sync.num_buckets(); ++b) {
        const dist::BucketInfo& info = sync.bucket(b);
        EXPECT_EQ(info.elements % (world * 16), 0) << "bucket " << b;
        EXPECT_EQ(info.shard_elements * world, info.elements);
        EXPECT_EQ(shards[static_cast<size_t>(b)].second->numel(), info.shard_elements);
        covered += info.elements;
      }
      int64_t total = 0;
      for (auto* p : m.parameters()) total += p->numel();
      EXPECT_GE(covered, total);
      // Each rank's gradient slices hold the average after finish(); the rest stays local.
      for (auto* p : m.parameters()) stoker::ops::fill(p->grad(), 1.0 + comm.rank());
      for (auto* p : m.parameters()) p->grad_ready();
      sync.finish();
      const float avg = 1.0f + static_cast<float>(world - 1) / 2.0f;
      const auto grads = sync.step_gradients();
      for (int b = 0; b < sync.num_buckets(); ++b) {
        const dist::BucketInfo& info = sync.bucket(b);
        const auto g = grads[static_cast<size_t>(b)].to_vector<float>();
        const int64_t lo = comm.rank() * info.shard_elements;
        for (int64_t i = 0; i < info.shard_elements; ++i) {
          // Parameter element or padding (zero) at bucket position lo + i?
          bool in_param = false;
          for (size_t k = 0; k < info.offsets.size(); ++k)
            in_param |=
                lo + i >= info.offsets[k] && lo + i < info.offsets[k] + info.shapes[k].numel();
          EXPECT_EQ(g[static_cast<size_t>(i)], in_param ? avg : 0.0f) << "bucket " << b << " " << i;
        }
      }
      // A write to a shard's value is a write to the model's weights after the gather.
      stoker::ops::fill(shards[0].second->value(), 100.0 + comm.rank());
      sync.gather_parameters();
    });
    // Every rank sees every rank's slice of bucket 0 (the last parameters registered).
    const auto w = weights_of(*models[0]);
    for (int r = 1; r < world; ++r) EXPECT_EQ(weights_of(*models[static_cast<size_t>(r)]), w);
    bool saw_rank_value[3] = {false, false, false};
    for (const auto& t : w)
      for (float v : t)
        for (int r = 0; r < world; ++r) saw_rank_value[r] |= v == 100.0f + static_cast<float>(r);
    for (int r = 0; r < world; ++r) EXPECT_TRUE(saw_rank_value[r]) << "slice of rank " << r;
  }
}

TEST(ZeroTest, AdamWEqualsUnshardedBitForBit) {
  for (int world : {2, 3})
    expect_zero1_equals_unsharded({.world = world}, "world " + std::to_string(world));
}

TEST(ZeroTest, SgdMomentumEqualsUnshardedBitForBit) {
  for (int world : {2, 3})
    expect_zero1_equals_unsharded({.world = world, .opt = Opt::sgd_momentum},
                                  "world " + std::to_string(world));
}

TEST(ZeroTest, AccumulationWithNoSyncEqualsUnsharded) {
  expect_zero1_equals_unsharded({.world = 3, .accum = 3}, "AdamW accum 3");
  expect_zero1_equals_unsharded({.world = 2, .opt = Opt::sgd_momentum, .accum = 2}, "SGD accum 2");
}

TEST(ZeroTest, Bf16ComputeEqualsUnsharded) {
  expect_zero1_equals_unsharded({.world = 3, .precision = stoker::amp::Precision::bf16}, "bf16");
}

TEST(ZeroTest, Bf16StateAndCompressedGradientsEqualUnsharded) {
  optim::StateFormat bf16{.dtype = optim::StateDType::bf16};
  expect_zero1_equals_unsharded({.world = 3, .state = bf16}, "bf16 state");
  expect_zero1_equals_unsharded({.world = 2, .compression = dist::compression::bf16()},
                                "bf16 compression");
}

// Over TCP sockets (what CPU runs under `stoker launch` use): the in-place reduce-scatter and
// all-gather go through rank 0's exchange; rank 0 adds in rank order, as the threads do.
TEST(ZeroTest, OverTcpEqualsUnshardedOverThreads) {
  ZeroRun run{.world = 3, .accum = 2};
  const auto plain = train(run);
  run.zero1 = true;
  run.tcp = true;
  const auto sharded = train(run);
  expect_all_ranks_equal(sharded, "TCP");
  EXPECT_EQ(sharded[0], plain[0]);
}

TEST(ZeroTest, ClippingUsesTheGlobalNorm) {
  for (Opt opt : {Opt::adamw, Opt::sgd_momentum}) {
    ZeroRun run{.world = 3, .opt = opt, .clip = 0.05f};
    const auto plain = train(run);
    run.zero1 = true;
    const auto sharded = train(run);
    expect_all_ranks_equal(sharded, "clip");
    expect_close(sharded[0], plain[0], 1e-5f, "clipped ZeRO-1 vs unsharded");
    // Clipping acted (a rank-local norm would clip differently, and so would no clipping).
    run.clip = 0.0f;
    const auto unclipped = train(run);
    float max_diff = 0.0f;
    for (size_t t = 0; t < unclipped[0].size(); ++t)
      for (size_t i = 0; i < unclipped[0][t].size(); ++i)
        max_diff = std::max(max_diff, std::fabs(unclipped[0][t][i] - plain[0][t][i]));
    EXPECT_GT(max_diff, 1e-3f) << "clip_grad_norm 0.05 did not change the update";
  }
}

// fp16: an Inf in one rank's gradient lands, after the reduce-scatter, in one rank's slice only;
// the all-reduced found_inf makes every rank skip that step, as in the unsharded run.
TEST(ZeroTest, Fp16OverflowInOneSliceSkipsTheStepOnEveryRank) {
  const int world = 3;
  for (bool zero1 : {false, true}) {
    SCOPED_TRACE(zero1 ? "ZeRO-1" : "unsharded");
    const Blobs d = stoker::test::make_blobs(world * 5 * 3, 41);
    std::vector<std::unique_ptr<nn::Sequential>> models;
    for (int r = 0; r < world; ++r) models.push_back(make_odd_mlp(r == 0 ? 5 : 50 + r));
    std::vector<Weights> before(world), after(world);
    dist::run_ranks(world, [&](dist::Communicator& comm) {
      nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
      int step = 0;
      if (comm.rank() == 1) {
        // The first registered parameter sits in the last bucket's slices; poison one element.
        m.named_parameters()[0].second->add_grad_ready_hook([&step](nn::Parameter& p) {
          if (step == 1) p.grad().data<float>()[0] = std::numeric_limits<float>::infinity();
        });
      }
      ZeroRun run{.world = world, .zero1 = zero1};
      auto [sync, opt] = make_training(run, comm, m);
      nn::CrossEntropyLoss loss;
      Trainer t(m, loss, *opt,
                {.precision = stoker::amp::Precision::fp16,
                 .progress_bar = false,
                 .quiet = true,
                 .grad_sync = sync.get()});
      for (step = 0; step < 3; ++step) {
        const data::Batch batch = batch_of(d, world, 1, step, 0, comm.rank());
        if (step == 1) before[static_cast<size_t>(comm.rank())] = weights_of(m);
        t.train_step({&batch, 1});
        if (step == 1) after[static_cast<size_t>(comm.rank())] = weights_of(m);
      }
      EXPECT_EQ(t.scaler()->scale_value(), 32768.0f);
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(after[static_cast<size_t>(r)], before[static_cast<size_t>(r)])
          << "rank " << r << " applied the overflowed step";
      EXPECT_EQ(weights_of(*models[static_cast<size_t>(r)]), weights_of(*models[0]));
    }
  }
}

TEST(ZeroTest, StateBytesPerRankAreAboutOneNth) {
  for (int world : {2, 3}) {
    for (Opt opt : {Opt::adamw, Opt::sgd_momentum}) {
      // A wider hidden layer so that padding is a small share of the state.
      ZeroRun run{.world = world, .opt = opt, .steps = 1, .hidden = 301};
      std::vector<size_t> bytes(static_cast<size_t>(world)), reported(static_cast<size_t>(world));
      run.zero1 = false;
      size_t unsharded = 0;
      train(run, [&](int rank, int, Trainer&, optim::Optimizer& o) {
        if (rank == 0) unsharded = o.state_bytes();
      });
      run.zero1 = true;
      train(run, [&](int rank, int, Trainer& t, optim::Optimizer& o) {
        bytes[static_cast<size_t>(rank)] = o.state_bytes();
        reported[static_cast<size_t>(rank)] = t.memory_report().optimizer_state;
      });
      const double share = 1.0 / world;
      for (int r = 0; r < world; ++r) {
        const double ratio =
            static_cast<double>(bytes[static_cast<size_t>(r)]) / static_cast<double>(unsharded);
        EXPECT_GT(ratio, share * 0.99) << "world " << world << " rank " << r;
        EXPECT_LT(ratio, share * 1.05) << "world " << world << " rank " << r;
        EXPECT_EQ(reported[static_cast<size_t>(r)], bytes[static_cast<size_t>(r)]);
      }
    }
  }
}

// 2n steps = n steps + checkpoint + fresh models, syncs, optimizers + resume + n steps.
TEST(ZeroTest, ResumeFromACheckpointContinuesBitForBit) {
  const auto dir = std::filesystem::temp_directory_path() / "stoker_zero_test";
  std::filesystem::create_directories(dir);
  struct Case {
    std::string name;
    int world;
    Opt opt;
    optim::StateFormat state;
  };
  const std::vector<Case> cases = {
      {"adamw_f32", 3, Opt::adamw, {}},
      {"sgd_f32", 2, Opt::sgd_momentum, {}},
      {"adamw_bf16", 2, Opt::adamw, {.dtype = optim::StateDType::bf16}},
      // 8-bit state on slices of >= 256 values (min_quantized_numel lowered so they quantize).
      {"adamw_int8",
       2,
       Opt::adamw,
       {.dtype = optim::StateDType::int8_blockwise, .block = 256, .min_quantized_numel = 256}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto path = dir / (c.name + ".safetensors");
    ZeroRun run{
        .world = c.world, .zero1 = true, .opt = c.opt, .steps = 6, .state = c.state, .hidden = 61};
    const auto straight = train(run);
    // First half: train 3 steps, save (every rank takes part).
    const Blobs d = stoker::test::make_blobs(run.world * 5 * run.steps, 77);
    std::vector<std::unique_ptr<nn::Sequential>> models;
    for (int r = 0; r < run.world; ++r) models.push_back(make_odd_mlp(r == 0 ? 5 : 50 + r, 61));
    bool quantized = false;
    dist::run_ranks(run.world, [&](dist::Communicator& comm) {
      nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
      auto [sync, opt] = make_training(run, comm, m);
      nn::CrossEntropyLoss loss;
      Trainer t(m, loss, *opt, {.progress_bar = false, .quiet = true, .grad_sync = sync.get()});
      for (int s = 0; s < 3; ++s) {
        const data::Batch b = batch_of(d, run.world, 1, s, 0, comm.rank());
        t.train_step({&b, 1});
      }
      if (comm.rank() == 0)
        for (auto& [n, tensor] : opt->state())
          quantized |= n.size() > 6 && n.compare(n.size() - 6, 6, ".codes") == 0;
      t.save_checkpoint(path, nullptr);
    });
    EXPECT_EQ(quantized, c.state.dtype == optim::StateDType::int8_blockwise);
    // Second half on fresh objects (other initial weights: everything comes from the file).
    std::vector<std::unique_ptr<nn::Sequential>> fresh;
    for (int r = 0; r < run.world; ++r) fresh.push_back(make_odd_mlp(900 + r, 61));
    dist::run_ranks(run.world, [&](dist::Communicator& comm) {
      nn::Sequential& m = *fresh[static_cast<size_t>(comm.rank())];
      auto [sync, opt] = make_training(run, comm, m);
      nn::CrossEntropyLoss loss;
      Trainer t(m, loss, *opt, {.progress_bar = false, .quiet = true, .grad_sync = sync.get()});
      t.resume(path);
      for (int s = 3; s < 6; ++s) {
        const data::Batch b = batch_of(d, run.world, 1, s, 0, comm.rank());
        t.train_step({&b, 1});
      }
    });
    for (int r = 0; r < run.world; ++r)
      EXPECT_EQ(weights_of(*fresh[static_cast<size_t>(r)]), straight[0]) << "rank " << r;
  }
  std::filesystem::remove_all(dir);
}

// f32 state is saved under the unsharded names: a ZeRO-1 checkpoint resumes an unsharded run
// (and so at another world size), and continues as the ZeRO-1 run does.
TEST(ZeroTest, ShardedCheckpointResumesAnUnshardedRun) {
  const auto path = std::filesystem::temp_directory_path() / "stoker_zero_to_plain.safetensors";
  const int world = 3;
  ZeroRun run{.world = world, .zero1 = true, .steps = 4};
  const auto straight = train(run);
  const Blobs d = stoker::test::make_blobs(world * 5 * run.steps, 77);
  std::vector<std::unique_ptr<nn::Sequential>> models;
  for (int r = 0; r < world; ++r) models.push_back(make_odd_mlp(r == 0 ? 5 : 50 + r));
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
    auto [sync, opt] = make_training(run, comm, m);
    nn::CrossEntropyLoss loss;
    Trainer t(m, loss, *opt, {.progress_bar = false, .quiet = true, .grad_sync = sync.get()});
    for (int s = 0; s < 2; ++s) {
      const data::Batch b = batch_of(d, world, 1, s, 0, comm.rank());
      t.train_step({&b, 1});
    }
    t.save_checkpoint(path, nullptr);
  });
  ZeroRun plain = run;
  plain.zero1 = false;
  std::vector<std::unique_ptr<nn::Sequential>> fresh;
  for (int r = 0; r < world; ++r) fresh.push_back(make_odd_mlp(900 + r));
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    nn::Sequential& m = *fresh[static_cast<size_t>(comm.rank())];
    auto [sync, opt] = make_training(plain, comm, m);
    nn::CrossEntropyLoss loss;
    Trainer t(m, loss, *opt, {.progress_bar = false, .quiet = true, .grad_sync = sync.get()});
    t.resume(path);
    for (int s = 2; s < 4; ++s) {
      const data::Batch b = batch_of(d, world, 1, s, 0, comm.rank());
      t.train_step({&b, 1});
    }
  });
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(weights_of(*fresh[static_cast<size_t>(r)]), straight[0]) << "rank " << r;
  std::filesystem::remove(path);
}

// 8-bit state is stored per bucket: resuming it at another world size is an error that says so.
TEST(ZeroTest, Int8StateResumesOnlyAtTheSameWorldSize) {
  const auto path = std::filesystem::temp_directory_path() / "stoker_zero_int8.safetensors";
  const optim::StateFormat int8{
      .dtype = optim::StateDType::int8_blockwise, .block = 256, .min_quantized_numel = 256};
  // Hidden width 200: the two large buckets stay 8-bit at 2 and 3 ranks, with other slice sizes.
  ZeroRun run{.world = 2, .zero1 = true, .steps = 1, .state = int8, .hidden = 200};
  train(run, [&](int, int, Trainer& t, optim::Optimizer&) { t.save_checkpoint(path, nullptr); });
  run.world = 3;
  std::vector<std::unique_ptr<nn::Sequential>> models;
  for (int r = 0; r < run.world; ++r) models.push_back(make_odd_mlp(5, 200));
  std::vector<std::string> errors(3);
  dist::run_ranks(run.world, [&](dist::Communicator& comm) {
    nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
    auto [sync, opt] = make_training(run, comm, m);
    nn::CrossEntropyLoss loss;
    Trainer t(m, loss, *opt, {.progress_bar = false, .quiet = true, .grad_sync = sync.get()});
    errors[static_cast<size_t>(comm.rank())] = error_of([&] { t.resume(path); });
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("zero1.bucket"), std::string::npos) << e;
    EXPECT_NE(e.find("world size"), std::string::npos) << e;
  }
  std::filesystem::remove(path);
}

TEST(ZeroTest, AParameterMovedAfterTheSyncIsAnError) {
  auto m = make_odd_mlp(5);
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    dist::ShardedGradSync sync(comm, *m);
    nn::Parameter* p = m->named_parameters()[0].second;
    p->set_value_storage(Tensor::zeros(p->shape(), DType::f32));
    EXPECT_NE(error_of([&] {
                for (auto* q : m->parameters()) q->grad_ready();  // launches the buckets
                sync.finish();
              }).find("no longer lives in its bucket"),
              std::string::npos);
  });
}

// A ShardedOptimizer takes a ShardedGradSync by type: over a replicated one it does not compile.
static_assert(!std::is_constructible_v<dist::ShardedOptimizer, dist::ReplicatedGradSync&,
                                       const dist::ShardedOptimizer::Factory&>);
static_assert(std::is_constructible_v<dist::ShardedOptimizer, dist::ShardedGradSync&,
                                      const dist::ShardedOptimizer::Factory&>);

// LARS takes norms over whole parameters; ZeRO-1's inner optimizer sees slices of buckets, whose
// norms are others: the ShardedOptimizer refuses it and names the way out.
TEST(ZeroTest, LarsIsRefusedOverSlices) {
  auto m = make_odd_mlp(5);
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    dist::ShardedGradSync sharded(comm, *m);
    EXPECT_TRUE(stoker::test::throws_error_with(
        [&] {
          dist::ShardedOptimizer opt(sharded, [](optim::NamedParameters p) {
            return std::make_unique<optim::LARS>(std::move(p));
          });
        },
        {"LARS(", "needs each parameter whole", "ReplicatedGradSync"}));
  });
}

// The Trainer checks that its sync and optimizer go together (GradSync::check_optimizer).
TEST(ZeroTest, MismatchedPiecesAreErrors) {
  const auto sgd = [](optim::NamedParameters p) {
    return std::make_unique<optim::SGD>(std::move(p));
  };
  auto m = make_odd_mlp(5);
  auto m2 = make_odd_mlp(5);
  auto m3 = make_odd_mlp(5);
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    nn::CrossEntropyLoss loss;
    dist::ReplicatedGradSync replicated(comm, *m);
    dist::ShardedGradSync sharded(comm, *m2);
    dist::ShardedOptimizer opt(sharded, sgd);
    // A ShardedOptimizer with a replicated sync: the error names both.
    std::string e =
        error_of([&] { Trainer t(*m, loss, opt, {.quiet = true, .grad_sync = &replicated}); });
    EXPECT_NE(e.find(opt.describe()), std::string::npos) << e;
    EXPECT_NE(e.find(replicated.describe()), std::string::npos) << e;
    EXPECT_NE(e.find("ShardedGradSync"), std::string::npos) << e;
    // A sharded sync with a plain optimizer.
    optim::SGD plain_opt(m2->named_parameters());
    e = error_of([&] { Trainer t(*m2, loss, plain_opt, {.quiet = true, .grad_sync = &sharded}); });
    EXPECT_NE(e.find("ShardedOptimizer"), std::string::npos) << e;
    EXPECT_NE(e.find(sharded.describe()), std::string::npos) << e;
    // A ShardedOptimizer without its sync: the Trainer's own LocalGradSync does not fit it.
    e = error_of([&] { Trainer t(*m2, loss, opt, {.quiet = true}); });
    EXPECT_NE(e.find("grad_sync"), std::string::npos) << e;
    EXPECT_NE(e.find("local"), std::string::npos) << e;
    // A ShardedOptimizer over another ShardedGradSync.
    dist::ShardedGradSync other(comm, *m3);
    e = error_of([&] { Trainer t(*m3, loss, opt, {.quiet = true, .grad_sync = &other}); });
    EXPECT_NE(e.find("another ShardedGradSync"), std::string::npos) << e;
    // The right pair is accepted.
    EXPECT_EQ(error_of([&] { Trainer t(*m2, loss, opt, {.quiet = true, .grad_sync = &sharded}); }),
              "(no error)");
  });
}
