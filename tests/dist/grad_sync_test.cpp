// ReplicatedGradSync (and the bucket machinery it shares with ShardedGradSync) on the thread
// backend: buckets, overlap, launch order, accumulation, unused parameters, compression, and
// training that equals one process on the union of the ranks' batches.
#include "stoker/dist/grad_sync.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <mutex>

#include "dist/grad_sync_probe.h"
#include "dist/thread_communicator.h"
#include "dist_test_util.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/layout.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace dist = stoker::dist;
namespace nn = stoker::nn;
namespace data = stoker::data;
using stoker::DType;
using stoker::Tensor;
using stoker::dist::GradSyncProbe;
using stoker::test::Blobs;
using stoker::test::error_of;
using stoker::test::weights_of;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

namespace {

constexpr int kWorld = 4;

// Parameters with hand-made sizes, for tests that drive grad_ready() themselves.
struct Params {
  std::vector<nn::Parameter> p;
  std::vector<std::pair<std::string, nn::Parameter*>> named;
  explicit Params(const std::vector<int64_t>& sizes) {
    for (int64_t n : sizes) p.emplace_back(Tensor::zeros({n}, DType::f32));
    for (size_t i = 0; i < p.size(); ++i) named.emplace_back("p" + std::to_string(i), &p[i]);
  }
};

void set_grad(nn::Parameter& p, float v) { stoker::ops::fill(p.grad(), v); }

// The models of all ranks, built before the threads start (the init generator is global); each
// rank starts from different weights so that the sync's broadcast matters.
std::vector<std::unique_ptr<nn::Sequential>> rank_models(int world) {
  std::vector<std::unique_ptr<nn::Sequential>> models;
  for (int r = 0; r < world; ++r) models.push_back(stoker::test::make_mlp(r == 0 ? 7 : 100 + r));
  return models;
}

void expect_close(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b, float tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].size(), b[t].size());
    for (size_t i = 0; i < a[t].size(); ++i)
      ASSERT_NEAR(a[t][i], b[t][i], tol * (1.0f + std::fabs(b[t][i])))
          << what << ": tensor " << t << " element " << i;
  }
}

}  // namespace

TEST(ReplicatedGradSyncTest, BucketsFollowReverseOrderWithASmallFirstBucket) {
  auto model = stoker::test::make_mlp(1);  // 0.weight 128, 0.bias 16, 2.weight 256, 2.bias 16,
                                           // 4.weight 48, 4.bias 3 elements
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    dist::ReplicatedGradSync r(comm, *model, {.bucket_bytes = 1000, .first_bucket_bytes = 200});
    ASSERT_EQ(r.num_buckets(), 3);
    EXPECT_EQ(r.bucket(0).parameters, (std::vector<std::string>{"4.bias", "4.weight"}));
    EXPECT_EQ(r.bucket(0).elements, 16 + 48);  // each view starts on 16 elements (64 bytes)
    EXPECT_EQ(r.bucket(1).parameters, (std::vector<std::string>{"2.bias", "2.weight"}));
    EXPECT_EQ(r.bucket(2).parameters, (std::vector<std::string>{"0.bias", "0.weight"}));
    EXPECT_EQ(r.bucket(2).bytes, (16 + 128) * 4);
    EXPECT_EQ(r.describe(),
              "replicated over 1 rank: all-reduce of 3 buckets (1.88 KiB), f32 on the wire");
    // The gradients are views into the bucket buffers.
    const auto params = model->named_parameters();
    EXPECT_TRUE(params[4].second->grad().same_storage(params[5].second->grad()));
    EXPECT_FALSE(params[0].second->grad().same_storage(params[5].second->grad()));
  });
  // Defaults: 25 MiB buckets, so this model is one bucket... after its 1 MiB first bucket.
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    dist::ReplicatedGradSync r(comm, *model);
    EXPECT_EQ(r.num_buckets(), 1);
    EXPECT_EQ(r.options().bucket_bytes, 25 << 20);
    EXPECT_EQ(r.options().first_bucket_bytes, 1 << 20);
  });
}

// Buckets launch during backward, as soon as their last gradient is ready (overlap), in order.
TEST(ReplicatedGradSyncTest, BucketsFireDuringBackwardInOrder) {
  auto models = rank_models(2);
  std::vector<std::vector<std::string>> logs(2);
  dist::run_ranks(2, [&](dist::Communicator& comm) {
    nn::Sequential& m = *models[comm.rank()];
    std::vector<std::string>& log = logs[comm.rank()];
    for (auto& [name, p] : m.named_parameters())  // before the sync's hooks: logged first
      p->add_grad_ready_hook([&log, n = name](nn::Parameter&) { log.push_back("ready " + n); });
    dist::ReplicatedGradSync r(comm, m, {.bucket_bytes = 1000, .first_bucket_bytes = 200});
    GradSyncProbe::on_bucket_launch(
        r, [&log](int b) { log.push_back("launch " + std::to_string(b)); });
    const Tensor x = stoker::test::random_tensor({4, 8}, DType::f32, 5 + comm.rank());
    m.forward(x);
    m.backward(stoker::test::random_tensor({4, 3}, DType::f32, 9));
    log.push_back("backward done");
    r.finish();
    EXPECT_EQ(GradSyncProbe::launch_order(r), (std::vector<int>{0, 1, 2}));
  });
  const std::vector<std::string> expected = {
      "ready 4.weight", "ready 4.bias",   "launch 0",     "ready 2.weight", "ready 2.bias",
      "launch 1",       "ready 0.weight", "ready 0.bias", "launch 2",       "backward done"};
  EXPECT_EQ(logs[0], expected);
  EXPECT_EQ(logs[1], expected);
}

// Whatever order gradients complete in, every rank launches buckets 0, 1, 2, ... and the
// result is the average.
TEST(ReplicatedGradSyncTest, LaunchOrderIsTheSameOnEveryRankAndGradientsAreAveraged) {
  std::vector<std::unique_ptr<Params>> ps;
  for (int r = 0; r < kWorld; ++r)
    ps.push_back(std::make_unique<Params>(std::vector<int64_t>{16, 16, 16, 16}));
  std::vector<std::vector<int>> orders(kWorld);
  dist::run_ranks(kWorld, [&](dist::Communicator& comm) {
    Params& p = *ps[comm.rank()];
    dist::ReplicatedGradSync r(comm, p.named, {.bucket_bytes = 64, .first_bucket_bytes = 64});
    GradSyncProbe::on_bucket_launch(r, [&](int b) { orders[comm.rank()].push_back(b); });
    ASSERT_EQ(r.num_buckets(), 4);  // p3, p2, p1, p0
    for (int step = 0; step < 2; ++step) {
      for (size_t i = 0; i < 4; ++i)
        set_grad(p.p[i], static_cast<float>((comm.rank() + 1) * (i + 1)));
      // Rank-dependent completion order.
      std::vector<size_t> ready = {0, 1, 2, 3};
      if (comm.rank() % 2) std::reverse(ready.begin(), ready.end());
      if (comm.rank() == 2) ready = {1, 3, 0, 2};
      for (size_t i : ready) p.p[i].grad_ready();
      r.finish();
      EXPECT_EQ(GradSyncProbe::launch_order(r), (std::vector<int>{0, 1, 2, 3}));
      for (size_t i = 0; i < 4; ++i) {
        const float avg = (1 + kWorld) / 2.0f * static_cast<float>(i + 1);
        for (float v : p.p[i].grad().to_floats()) ASSERT_EQ(v, avg);
      }
    }
  });
  for (int rank = 0; rank < kWorld; ++rank)
    EXPECT_EQ(orders[rank], (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(ReplicatedGradSyncTest, NoSyncAccumulatesLocallyAndFinishReducesTheSum) {
  std::vector<std::unique_ptr<Params>> ps;
  for (int r = 0; r < 2; ++r) ps.push_back(std::make_unique<Params>(std::vector<int64_t>{5, 3}));
  dist::run_ranks(2, [&](dist::Communicator& comm) {
    Params& p = *ps[comm.rank()];
    dist::ReplicatedGradSync r(comm, p.named, {.first_bucket_bytes = 4});
    const float v = comm.rank() == 0 ? 1.0f : 3.0f;
    // Micro-step 1 without sync: nothing is sent.
    {
      auto scope = r.no_sync();
      for (auto& q : p.p) set_grad(q, v), q.grad_ready();
      EXPECT_TRUE(GradSyncProbe::launch_order(r).empty());
    }
    EXPECT_TRUE(r.sync());
    // Micro-step 2 adds and synchronizes: the average of the per-rank sums.
    for (auto& q : p.p) {
      stoker::ops::scale(q.grad(), 2.0f);
      q.grad_ready();
    }
    r.finish();
    for (auto& q : p.p)
      for (float x : q.grad().to_floats()) EXPECT_EQ(x, (2.0f + 6.0f) / 2.0f);
    // A step whose last backward ran without sync (an epoch ending mid-accumulation): finish()
    // reduces everything.
    r.set_sync(false);
    for (auto& q : p.p) set_grad(q, v), q.grad_ready();
    r.finish();
    EXPECT_EQ(GradSyncProbe::launch_order(r).size(), 2u);
    for (auto& q : p.p)
      for (float x : q.grad().to_floats()) EXPECT_EQ(x, 2.0f);
  });
}

TEST(ReplicatedGradSyncTest, UnusedParametersAreNamedOrAllowed) {
  std::vector<std::unique_ptr<Params>> ps;
  for (int r = 0; r < 2; ++r) ps.push_back(std::make_unique<Params>(std::vector<int64_t>{4, 4, 4}));
  std::vector<std::string> errors(2);
  dist::run_ranks(2, [&](dist::Communicator& comm) {
    Params& p = *ps[comm.rank()];
    dist::ReplicatedGradSync r(comm, p.named);
    set_grad(p.p[0], 1.0f);
    p.p[0].grad_ready();
    p.p[2].grad_ready();
    errors[comm.rank()] = error_of([&] { r.finish(); });
    // The next step works again.
    for (auto& q : p.p) q.grad_ready();
    r.finish();
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("1 of 3 parameters"), std::string::npos) << e;
    EXPECT_NE(e.find("p1"), std::string::npos) << e;
    EXPECT_NE(e.find("allow_unused_parameters"), std::string::npos) << e;
  }

  // Allowed: an unused gradient zeroed lazily is reduced as real zeros, not stale memory.
  dist::run_ranks(2, [&](dist::Communicator& comm) {
    Params& p = *ps[comm.rank()];
    dist::ReplicatedGradSync r(comm, p.named, {.allow_unused_parameters = true});
    for (auto& q : p.p) {
      set_grad(q, 123.0f);
      q.zero_grad();
    }
    set_grad(p.p[0], static_cast<float>(comm.rank()));
    p.p[0].grad_ready();
    r.finish();
    for (float x : p.p[0].grad().to_floats()) EXPECT_EQ(x, 0.5f);
    for (float x : p.p[1].grad().to_floats()) EXPECT_EQ(x, 0.0f);
  });
}

TEST(ReplicatedGradSyncTest, ReadyTwiceIsAnError) {
  Params p({4});
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    dist::ReplicatedGradSync r(comm, p.named);
    p.p[0].grad_ready();
    const std::string e = error_of([&] { p.p[0].grad_ready(); });
    EXPECT_NE(e.find("became ready twice"), std::string::npos) << e;
  });
}

TEST(ReplicatedGradSyncTest, ConstructionBroadcastsRankZerosWeights) {
  auto models = rank_models(3);
  const auto rank0 = weights_of(*models[0]);
  dist::run_ranks(
      3, [&](dist::Communicator& comm) { dist::ReplicatedGradSync r(comm, *models[comm.rank()]); });
  for (auto& m : models) EXPECT_EQ(weights_of(*m), rank0);
}

TEST(ReplicatedGradSyncTest, CompressionAveragesInHalfPrecision) {
  for (const auto& c : {dist::compression::bf16(), dist::compression::fp16()}) {
    std::vector<std::unique_ptr<Params>> ps;
    for (int r = 0; r < kWorld; ++r)
      ps.push_back(std::make_unique<Params>(std::vector<int64_t>{40}));
    dist::run_ranks(kWorld, [&](dist::Communicator& comm) {
      Params& p = *ps[comm.rank()];
      dist::ReplicatedGradSync r(comm, p.named, {.compression = c});
      // 1 + 1/3 is not representable in half precision: the result is rounded.
      set_grad(p.p[0], static_cast<float>(comm.rank() + 1) * (1.0f + 1.0f / 3.0f));
      p.p[0].grad_ready();
      r.finish();
      const float exact = 2.5f * (1.0f + 1.0f / 3.0f);
      for (float x : p.p[0].grad().to_floats()) {
        EXPECT_NEAR(x, exact, exact * (c->name() == "bf16" ? 1e-2f : 2e-3f));
        EXPECT_NE(x, exact);
      }
    });
  }
}

// The acceptance test: 4 ranks on disjoint shards end with the weights of 1 rank trained on
// the union of their batches, with and without gradient accumulation.
TEST(ReplicatedGradSyncTest, FourRanksOnShardsMatchOneRankOnTheUnionBatch) {
  const int64_t b = 6, steps = 3;
  for (int k : {1, 3}) {
    const Blobs d = stoker::test::make_blobs(kWorld * b * k * steps, 21);
    // Row of sample i of micro-batch m of step s on rank r.
    auto row = [&](int64_t s, int64_t m, int64_t r, int64_t i) {
      return ((s * k + m) * kWorld + r) * b + i;
    };
    // Reference: one process, micro-batches of kWorld * b.
    auto ref = stoker::test::make_mlp(7);
    {
      stoker::optim::SGD opt(ref->named_parameters(), {.lr = 0.2f, .momentum = 0.9f});
      nn::CrossEntropyLoss loss;
      Trainer t(*ref, loss, opt, {.progress_bar = false, .quiet = true});
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<data::Batch> micro;
        for (int64_t m = 0; m < k; ++m) {
          std::vector<int64_t> rows;
          for (int64_t r = 0; r < kWorld; ++r)
            for (int64_t i = 0; i < b; ++i) rows.push_back(row(s, m, r, i));
          micro.push_back({stoker::test::take_rows(d.x, rows), stoker::test::take_rows(d.y, rows),
                           static_cast<int64_t>(rows.size())});
        }
        t.train_step(micro);
      }
    }
    auto models = rank_models(kWorld);
    dist::run_ranks(kWorld, [&](dist::Communicator& comm) {
      nn::Sequential& m = *models[comm.rank()];
      dist::ReplicatedGradSync sync(comm, m, {.bucket_bytes = 600, .first_bucket_bytes = 100});
      EXPECT_GE(sync.num_buckets(), 3);
      stoker::optim::SGD opt(m.named_parameters(), {.lr = 0.2f, .momentum = 0.9f});
      nn::CrossEntropyLoss loss;
      Trainer t(m, loss, opt, {.progress_bar = false, .quiet = true, .grad_sync = &sync});
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<data::Batch> micro;
        for (int64_t mi = 0; mi < k; ++mi) {
          std::vector<int64_t> rows;
          for (int64_t i = 0; i < b; ++i) rows.push_back(row(s, mi, comm.rank(), i));
          micro.push_back(
              {stoker::test::take_rows(d.x, rows), stoker::test::take_rows(d.y, rows), b});
        }
        t.train_step(micro);
        EXPECT_EQ(GradSyncProbe::launch_order(sync).size(),
                  static_cast<size_t>(sync.num_buckets()));
      }
      EXPECT_EQ(GradSyncProbe::steps(sync), steps);
    });
    const auto want = weights_of(*ref);
    for (int r = 0; r < kWorld; ++r) {
      expect_close(weights_of(*models[r]), want, 2e-5f, "k=" + std::to_string(k));
      EXPECT_EQ(weights_of(*models[r]), weights_of(*models[0])) << "ranks differ, rank " << r;
    }
    // The weights moved: the comparison is not between two untouched models.
    auto untouched = stoker::test::make_mlp(7);
    EXPECT_NE(weights_of(*untouched), want);
  }
}

// fit() with TensorBatches sharded by rank: the union of the ranks' batch j is the
// single-process batch j of world * b samples, so 2 ranks of b equal 1 rank of 2b — over whole
// epochs, with a partial accumulation group at each epoch end, and with the throughput of the
// job in the log.
TEST(ReplicatedGradSyncTest, FitOnShardedBatchesMatchesOneRank) {
  const int world = 2;
  const Blobs d = stoker::test::make_blobs(80, 31);  // 80 = 2 ranks x 5 batches x 8
  const TrainerOptions base{
      .grad_accum_steps = 2, .log_interval = 2, .progress_bar = false, .quiet = true};
  auto ref = stoker::test::make_mlp(7);
  {
    stoker::optim::AdamW opt(ref->named_parameters(), {.lr = 0.01f});
    nn::CrossEntropyLoss loss;
    Trainer t(*ref, loss, opt, base);
    data::TensorBatches src(d.x, d.y, {.batch_size = 16, .seed = 5});
    t.fit(src, 2);
  }
  auto models = rank_models(world);
  std::vector<stoker::train::FitResult> fits(world);
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    nn::Sequential& m = *models[comm.rank()];
    dist::ReplicatedGradSync sync(comm, m, {.first_bucket_bytes = 300});
    stoker::optim::AdamW opt(m.named_parameters(), {.lr = 0.01f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o = base;
    o.grad_sync = &sync;
    Trainer t(m, loss, opt, o);
    data::TensorBatches src(d.x, d.y,
                            {.batch_size = 8, .seed = 5, .rank = comm.rank(), .world_size = world});
    EXPECT_EQ(src.samples_per_epoch(), 40);
    fits[comm.rank()] = t.fit(src, 2);
  });
  for (int r = 0; r < world; ++r) {
    expect_close(weights_of(*models[r]), weights_of(*ref), 2e-5f, "fit");
    EXPECT_EQ(fits[r].steps, 6);  // 5 batches per epoch in groups of 2: 3 steps per epoch
    ASSERT_FALSE(fits[r].log.empty());
    const auto& st = fits[r].log.back();
    EXPECT_EQ(st.world_size, world);
    EXPECT_GT(st.samples_per_s, 0.0);
    EXPECT_GT(st.global_samples_per_s, st.samples_per_s);
  }
  EXPECT_EQ(fits[0].log.back().global_samples_per_s, fits[1].log.back().global_samples_per_s);
}

// fp16: gradients are averaged before unscaling, so an overflow on one rank is an overflow on
// every rank, and all of them skip the step and back off the scale together.
TEST(ReplicatedGradSyncTest, Fp16OverflowOnOneRankSkipsTheStepOnEveryRank) {
  const int world = 3;
  const Blobs d = stoker::test::make_blobs(world * 8 * 3, 41);
  auto models = rank_models(world);
  std::vector<std::vector<std::vector<float>>> before_bad(world), after_bad(world);
  std::vector<std::vector<float>> scales(world);
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    nn::Sequential& m = *models[comm.rank()];
    int step = 0;
    if (comm.rank() == 1) {
      // Poisons this rank's gradient at step 1, before the sync sees it.
      m.named_parameters()[0].second->add_grad_ready_hook([&step](nn::Parameter& p) {
        if (step == 1) p.grad().data<float>()[0] = std::numeric_limits<float>::infinity();
      });
    }
    dist::ReplicatedGradSync sync(comm, m);
    stoker::optim::SGD opt(m.named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    Trainer t(m, loss, opt,
              {.precision = stoker::amp::Precision::fp16,
               .progress_bar = false,
               .quiet = true,
               .grad_sync = &sync});
    for (step = 0; step < 3; ++step) {
      std::vector<int64_t> rows;
      for (int64_t i = 0; i < 8; ++i) rows.push_back((step * world + comm.rank()) * 8 + i);
      const data::Batch batch{stoker::test::take_rows(d.x, rows),
                              stoker::test::take_rows(d.y, rows), 8};
      if (step == 1) before_bad[comm.rank()] = weights_of(m);
      t.train_step({&batch, 1});
      if (step == 1) after_bad[comm.rank()] = weights_of(m);
      scales[comm.rank()].push_back(t.scaler()->scale_value());
    }
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(after_bad[r], before_bad[r]) << "rank " << r << " applied the overflowed step";
    EXPECT_EQ(scales[r], (std::vector<float>{65536.0f, 32768.0f, 32768.0f})) << "rank " << r;
    EXPECT_EQ(weights_of(*models[r]), weights_of(*models[0]));
  }
  EXPECT_NE(weights_of(*models[0]), after_bad[0]);  // the steps around it were applied
}

// A rank that throws in the middle of training makes the others fail promptly (run_ranks
// aborts the group) instead of hanging in their next all-reduce.
TEST(ReplicatedGradSyncTest, ARankThatThrowsStopsTheOthers) {
  const Blobs d = stoker::test::make_blobs(kWorld * 8 * 4, 51);
  auto models = rank_models(kWorld);
  std::mutex mu;
  std::vector<std::string> errors;
  const auto start = std::chrono::steady_clock::now();
  const std::string err = error_of([&] {
    dist::run_ranks(kWorld,
                    [&](dist::Communicator& comm) {
                      nn::Sequential& m = *models[comm.rank()];
                      dist::ReplicatedGradSync sync(comm, m);
                      stoker::optim::SGD opt(m.named_parameters(), {.lr = 0.1f});
                      nn::CrossEntropyLoss loss;
                      Trainer t(m, loss, opt,
                                {.progress_bar = false, .quiet = true, .grad_sync = &sync});
                      try {
                        for (int step = 0; step < 4; ++step) {
                          if (comm.rank() == 3 && step == 2)
                            STOKER_THROW("rank 3: corrupt sample 1234");
                          std::vector<int64_t> rows;
                          for (int64_t i = 0; i < 8; ++i)
                            rows.push_back((step * kWorld + comm.rank()) * 8 + i);
                          const data::Batch batch{stoker::test::take_rows(d.x, rows),
                                                  stoker::test::take_rows(d.y, rows), 8};
                          t.train_step({&batch, 1});
                        }
                      } catch (const std::exception& e) {
                        std::lock_guard<std::mutex> lock(mu);
                        errors.push_back(e.what());
                        throw;
                      }
                    },
                    {.timeout_s = 20.0});
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(err.find("corrupt sample 1234"), std::string::npos) << err;
  ASSERT_EQ(errors.size(), static_cast<size_t>(kWorld));
  for (const std::string& e : errors)
    EXPECT_NE(e.find("corrupt sample 1234"), std::string::npos) << e;
}

TEST(ReplicatedGradSyncTest, RejectsBadOptions) {
  Params p({4});
  p.p[0].requires_grad = false;
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    const std::string e = error_of([&] { dist::ReplicatedGradSync r(comm, p.named); });
    EXPECT_NE(e.find("no parameter requires a gradient"), std::string::npos) << e;
    const std::string e2 =
        error_of([&] { dist::ReplicatedGradSync r(comm, p.named, {.bucket_bytes = 0}); });
    EXPECT_NE(e2.find("must be positive"), std::string::npos) << e2;
  });
  // A gradient re-pointed after the sync was built would be reduced from stale memory.
  Params q({4});
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    dist::ReplicatedGradSync r(comm, q.named);
    q.p[0].set_grad_storage(Tensor::zeros({4}, DType::f32));
    const std::string e = error_of([&] { q.p[0].grad_ready(); });
    EXPECT_NE(e.find("'p0' no longer lives in its bucket"), std::string::npos) << e;
  });
}
