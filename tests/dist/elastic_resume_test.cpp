// Elastic resume (the Trainer over data::BatchSource::epoch_progress / continue_epoch): a
// checkpoint written by W ranks inside an epoch resumes on W' ranks, with and without ZeRO-1.
// The dataset's labels are the sample ids, and every rank records the ids it trained on, so the
// test checks the exact multiset of samples of each epoch: the interrupted epoch holds every
// sample exactly once across the old ranks' steps and the new ranks' steps, the next epoch is
// that of a fresh W'-rank run, and every rank ends with the same weights.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/thread_communicator.h"
#include "stoker/core/error.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/dist/sharded_optimizer.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace fs = std::filesystem;
namespace dist = stoker::dist;
namespace nn = stoker::nn;
namespace data = stoker::data;
namespace optim = stoker::optim;
using stoker::DType;
using stoker::Tensor;
using stoker::train::Trainer;

namespace {

constexpr int64_t kSamples = 60;  // divisible by 1, 2, 3 and 4 ranks
constexpr int64_t kBatch = 5;     // per rank

// Forwards to a TensorBatches and records, per epoch, the labels (= sample ids) it handed out.
class Recording final : public data::BatchSource {
 public:
  Recording(data::BatchSource& inner, std::map<int64_t, std::vector<int64_t>>& seen, std::mutex& mu,
            bool hide_progress)
      : inner_(inner), seen_(seen), mu_(mu), hide_progress_(hide_progress) {}
  void start_epoch(int64_t e) override { inner_.start_epoch(e); }
  bool next(data::Batch& b) override {
    if (!inner_.next(b)) return false;
    const std::vector<int64_t> ids = b.target.to_vector<int64_t>();
    std::lock_guard<std::mutex> lock(mu_);
    auto& v = seen_[inner_.epoch()];
    v.insert(v.end(), ids.begin(), ids.end());
    return true;
  }
  int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return inner_.samples_per_epoch(); }
  int64_t epoch() const override { return inner_.epoch(); }
  int64_t batch_index() const override { return inner_.batch_index(); }
  void restore(int64_t e, int64_t b) override { inner_.restore(e, b); }
  // hide_progress: a source that cannot say where it stands in an epoch.
  int64_t epoch_progress() const override { return hide_progress_ ? -1 : inner_.epoch_progress(); }
  bool continue_epoch(int64_t e, int64_t p) override { return inner_.continue_epoch(e, p); }
  data::SourceIdentity identity() const override { return inner_.identity(); }

 private:
  data::BatchSource& inner_;
  std::map<int64_t, std::vector<int64_t>>& seen_;
  std::mutex& mu_;
  bool hide_progress_;
};

struct Dataset {
  Tensor x, y;
};
Dataset make_dataset() {
  Tensor x = Tensor::empty({kSamples, 8}, DType::f32);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 11, 0);
  std::vector<int64_t> ids(kSamples);
  for (int64_t i = 0; i < kSamples; ++i) ids[static_cast<size_t>(i)] = i;
  return {x, Tensor::from_vector(ids, {kSamples})};
}

struct Phase {
  int world = 1;
  bool zero1 = false;
  int64_t max_steps = -1;  // -1: all epochs
  int64_t epochs = 1;
  bool hide_progress = false;
};

// Runs one phase on `p.world` thread ranks, resuming from `resume` when it is set and writing
// dir/last.safetensors at its end; returns the ids seen per epoch (all ranks together) and
// every rank's final weights.
struct PhaseResult {
  std::map<int64_t, std::vector<int64_t>> seen;
  std::vector<std::vector<float>> weights;  // per rank, all parameters concatenated
};
PhaseResult run_phase(const Dataset& d, const Phase& p, const fs::path& dir,
                      const fs::path& resume) {
  PhaseResult out;
  out.weights.resize(static_cast<size_t>(p.world));
  std::mutex mu;
  dist::run_ranks(p.world, [&](dist::Communicator& comm) {
    nn::manual_seed(3);
    nn::Sequential model;
    model.add(nn::make<nn::Linear>(8, kSamples));
    std::unique_ptr<dist::GradSync> sync;
    std::unique_ptr<optim::Optimizer> opt;
    const dist::GradSyncOptions so{.bucket_bytes = 600, .first_bucket_bytes = 200};
    if (p.zero1) {
      auto sharded = std::make_unique<dist::ShardedGradSync>(comm, model, so);
      opt = std::make_unique<dist::ShardedOptimizer>(*sharded, [](optim::NamedParameters ps) {
        return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 1e-2f});
      });
      sync = std::move(sharded);
    } else {
      sync = std::make_unique<dist::ReplicatedGradSync>(comm, model, so);
      opt = std::make_unique<optim::AdamW>(model.named_parameters(),
                                           optim::AdamWOptions{.lr = 1e-2f});
    }
    nn::CrossEntropyLoss loss;
    Trainer t(model, loss, *opt,
              {.progress_bar = false,
               .checkpoint_dir = dir,
               .max_steps = p.max_steps,
               .quiet = true,
               .grad_sync = sync.get()});
    if (!resume.empty()) t.resume(resume);
    data::TensorBatches batches(
        d.x, d.y,
        {.batch_size = kBatch, .seed = 21, .rank = comm.rank(), .world_size = comm.world_size()});
    Recording rec(batches, out.seen, mu, p.hide_progress);
    t.fit(rec, p.epochs);
    std::vector<float> w;
    for (auto* prm : model.parameters()) {
      const auto v = prm->value().to_vector<float>();
      w.insert(w.end(), v.begin(), v.end());
    }
    out.weights[static_cast<size_t>(comm.rank())] = w;
  });
  return out;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> every_sample_once() {
  std::vector<int64_t> v(kSamples);
  for (int64_t i = 0; i < kSamples; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// The ids a fresh W-rank run delivers in `epoch`, all ranks together.
std::vector<int64_t> fresh_epoch(const Dataset& d, int world, int64_t epoch) {
  std::vector<int64_t> all;
  for (int r = 0; r < world; ++r) {
    data::TensorBatches b(d.x, d.y,
                          {.batch_size = kBatch, .seed = 21, .rank = r, .world_size = world});
    b.start_epoch(epoch);
    data::Batch batch;
    while (b.next(batch)) {
      const auto ids = batch.target.to_vector<int64_t>();
      all.insert(all.end(), ids.begin(), ids.end());
    }
  }
  return sorted(all);
}

struct Case {
  int from, to;
  int64_t steps_before;  // inside epoch 0
  bool zero1;
};

class ElasticResume : public ::testing::TestWithParam<Case> {};

TEST_P(ElasticResume, EveryEpochHoldsEverySampleOnce) {
  const Case c = GetParam();
  const fs::path dir = fs::temp_directory_path() /
                       ("stoker_elastic_" + std::to_string(c.from) + "_" + std::to_string(c.to) +
                        (c.zero1 ? "_z" : "") + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Dataset d = make_dataset();
  const PhaseResult before =
      run_phase(d, {.world = c.from, .zero1 = c.zero1, .max_steps = c.steps_before}, dir / "a", {});
  ASSERT_EQ(before.seen.size(), 1u);
  EXPECT_EQ(before.seen.at(0).size(), static_cast<size_t>(c.steps_before * kBatch * c.from));
  const PhaseResult after = run_phase(d, {.world = c.to, .zero1 = c.zero1, .epochs = 2}, dir / "b",
                                      dir / "a" / "last.safetensors");
  // Epoch 0: the old ranks' samples and the new ranks' together are every sample, once.
  std::vector<int64_t> epoch0 = before.seen.at(0);
  ASSERT_TRUE(after.seen.count(0));
  epoch0.insert(epoch0.end(), after.seen.at(0).begin(), after.seen.at(0).end());
  EXPECT_EQ(sorted(epoch0), every_sample_once());
  // Epoch 1: a W'-rank epoch.
  ASSERT_TRUE(after.seen.count(1));
  EXPECT_EQ(sorted(after.seen.at(1)), fresh_epoch(d, c.to, 1));
  EXPECT_EQ(sorted(after.seen.at(1)), every_sample_once());
  for (int r = 1; r < c.to; ++r) EXPECT_EQ(after.weights[r], after.weights[0]) << "rank " << r;
  fs::remove_all(dir);
}

// A checkpoint inside an epoch that was itself continued (3 ranks -> 5) resumes at the same world
// size (5 -> 5) and at another (5 -> 4): the epoch still holds every sample once. The progress
// there (40) is not where a plain 5-rank epoch stands at that batch index, so only continuing
// from the progress (not restore()) is right.
TEST(ElasticResumeChain, AContinuedEpochResumesAgain) {
  for (int last : {5, 4}) {
    const fs::path dir =
        fs::temp_directory_path() /
        ("stoker_elastic_chain_" + std::to_string(last) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const Dataset d = make_dataset();
    const PhaseResult a = run_phase(d, {.world = 3, .max_steps = 1}, dir / "a", {});
    const PhaseResult b =
        run_phase(d, {.world = 5, .max_steps = 2}, dir / "b", dir / "a" / "last.safetensors");
    const PhaseResult c = run_phase(d, {.world = last}, dir / "c", dir / "b" / "last.safetensors");
    std::vector<int64_t> epoch0 = a.seen.at(0);
    for (const PhaseResult* r : {&b, &c}) {
      ASSERT_TRUE(r->seen.count(0)) << "resumed at " << last;
      epoch0.insert(epoch0.end(), r->seen.at(0).begin(), r->seen.at(0).end());
    }
    // 3 ranks x 1 step + 5 ranks x 1 more step = 40 samples before the last phase.
    EXPECT_EQ(a.seen.at(0).size() + b.seen.at(0).size(), 40u);
    EXPECT_EQ(sorted(epoch0), every_sample_once()) << "resumed at " << last;
    fs::remove_all(dir);
  }
}

// Without the epoch's progress a checkpoint inside an epoch resumes only at its world size; at an
// epoch's end any world size starts the next epoch.
TEST(ElasticResumeChain, WithoutProgressOnlyTheSameWorldSizeResumesInsideAnEpoch) {
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_elastic_noprogress_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Dataset d = make_dataset();
  run_phase(d, {.world = 2, .max_steps = 1, .hide_progress = true}, dir / "a", {});
  try {
    run_phase(d, {.world = 1}, dir / "b", dir / "a" / "last.safetensors");
    ADD_FAILURE() << "resumed at another world size without the epoch's progress";
  } catch (const stoker::Error& e) {
    EXPECT_NE(std::string(e.what()).find("was written by 2 ranks inside epoch 0 without the "
                                         "epoch's progress"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("resume with 2 ranks"), std::string::npos) << e.what();
  }
  // The same world size resumes it (restore()), and an epoch's end resumes anywhere.
  const PhaseResult same =
      run_phase(d, {.world = 2, .hide_progress = true}, dir / "c", dir / "a" / "last.safetensors");
  EXPECT_EQ(same.seen.at(0).size(), 50u);
  const PhaseResult other = run_phase(d, {.world = 3, .epochs = 2, .hide_progress = true},
                                      dir / "d", dir / "c" / "last.safetensors");
  EXPECT_FALSE(other.seen.count(0));
  EXPECT_EQ(sorted(other.seen.at(1)), every_sample_once());
  fs::remove_all(dir);
}

// The learning-rate schedule after an elastic resume follows the run's progress in samples:
// each step takes the schedule's value where the samples it ends at would be in the
// uninterrupted run, the last step takes the uninterrupted run's last learning rate, and the run
// ends after the same samples (epochs, or max_steps steps of the first segment's global batch).
struct ScheduleRun {
  std::vector<float> lrs;  // rank 0's learning rate at each step of the phase
  int64_t last_step = 0;
  int64_t samples_seen = 0;
};
ScheduleRun run_schedule_phase(const Dataset& d, int world, int64_t epochs, int64_t max_steps,
                               int64_t total, const fs::path& dir, const fs::path& resume) {
  ScheduleRun out;
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    nn::manual_seed(3);
    nn::Sequential model;
    model.add(nn::make<nn::Linear>(8, kSamples));
    dist::ReplicatedGradSync sync(comm, model);
    optim::SGD opt(model.named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    Trainer t(model, loss, opt,
              {.schedule = optim::cosine_with_warmup(0.1f, 2, total),
               .log_interval = 1,
               .progress_bar = false,
               .checkpoint_dir = dir,
               .max_steps = max_steps,
               .quiet = true,
               .grad_sync = &sync});
    if (!resume.empty()) t.resume(resume);
    if (comm.rank() == 0)
      t.add_log_callback([&](const stoker::train::StepStats& st) { out.lrs.push_back(st.lr); });
    data::TensorBatches batches(
        d.x, d.y,
        {.batch_size = kBatch, .seed = 21, .rank = comm.rank(), .world_size = comm.world_size()});
    t.fit(batches, epochs);
    if (comm.rank() == 0) {
      out.last_step = t.step();
      out.samples_seen = t.samples_seen();
    }
  });
  return out;
}

TEST(ElasticResumeSchedule, FollowsTheSamplesSeenAndEndsAnnealed) {
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_elastic_schedule_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const Dataset d = make_dataset();
  const optim::LrSchedule s = optim::cosine_with_warmup(0.1f, 2, 24);
  // Uninterrupted, 1 rank: 2 epochs of 12 steps of 5 samples, lr_at(0..23).
  const ScheduleRun whole = run_schedule_phase(d, 1, 2, -1, 24, dir / "whole", {});
  ASSERT_EQ(whole.lrs.size(), 24u);
  EXPECT_EQ(whole.samples_seen, 2 * kSamples);
  // 1 -> 3 ranks after 6 steps (30 samples): 90 samples left in steps of 15, each worth 3 of
  // the uninterrupted run's steps: lr_at(8), lr_at(11), ... lr_at(23), ending at step 12.
  run_schedule_phase(d, 1, 2, 6, 24, dir / "a", {});
  const ScheduleRun up =
      run_schedule_phase(d, 3, 2, -1, 24, dir / "b", dir / "a" / "last.safetensors");
  ASSERT_EQ(up.lrs.size(), 6u);
  for (size_t j = 0; j < up.lrs.size(); ++j)
    EXPECT_FLOAT_EQ(up.lrs[j], s.lr_at(static_cast<int64_t>(6 + 3 * (j + 1) - 1))) << "step " << j;
  EXPECT_FLOAT_EQ(up.lrs.back(), whole.lrs.back());
  EXPECT_EQ(up.last_step, 12);
  EXPECT_EQ(up.samples_seen, 2 * kSamples);
  // 2 -> 1 rank after 3 steps of 10 (30 samples; the schedule spans the 12 steps of a 2-rank
  // run): 18 steps of 5 samples, each half a step of the schedule; the last at lr_at(11).
  run_schedule_phase(d, 2, 2, 3, 12, dir / "c", {});
  const ScheduleRun down =
      run_schedule_phase(d, 1, 2, -1, 12, dir / "d", dir / "c" / "last.safetensors");
  const ScheduleRun whole2 = run_schedule_phase(d, 2, 2, -1, 12, dir / "whole2", {});
  const optim::LrSchedule s12 = optim::cosine_with_warmup(0.1f, 2, 12);
  ASSERT_EQ(down.lrs.size(), 18u);
  for (size_t j = 0; j < down.lrs.size(); ++j)
    EXPECT_FLOAT_EQ(down.lrs[j], s12.lr_at(static_cast<int64_t>(3 + j / 2))) << "step " << j;
  EXPECT_FLOAT_EQ(down.lrs.back(), whole2.lrs.back());
  EXPECT_GT(down.lrs.back(), 0.0f);  // not past the schedule's end
  EXPECT_EQ(down.last_step, 21);
  EXPECT_EQ(down.samples_seen, 2 * kSamples);
  // max_steps counts steps of the first segment's global batch: 1 -> 3 ranks stops after the
  // samples of 24 steps of 5 (step 12), not after 24 steps of 15.
  const ScheduleRun capped =
      run_schedule_phase(d, 3, 100, 24, 24, dir / "e", dir / "a" / "last.safetensors");
  EXPECT_EQ(capped.last_step, 12);
  EXPECT_EQ(capped.samples_seen, 24 * kBatch);
  EXPECT_FLOAT_EQ(capped.lrs.back(), whole.lrs.back());
  // A resume of the rebased run at its own world size goes on with the same rates.
  fs::remove_all(dir / "f");
  run_schedule_phase(d, 3, 2, 12, 24, dir / "f", dir / "a" / "last.safetensors");
  const ScheduleRun again =
      run_schedule_phase(d, 3, 2, -1, 24, dir / "g", dir / "f" / "last.safetensors");
  ASSERT_EQ(again.lrs.size(), 4u);
  for (size_t j = 0; j < again.lrs.size(); ++j)
    EXPECT_FLOAT_EQ(again.lrs[j], up.lrs[j + 2]) << "step " << j;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ElasticResume,
                         ::testing::Values(Case{2, 1, 2, false}, Case{1, 3, 3, false},
                                           Case{4, 2, 1, false}, Case{2, 1, 2, true},
                                           Case{1, 3, 3, true}, Case{4, 2, 1, true}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::to_string(i.param.from) + "to" + std::to_string(i.param.to) +
                                  (i.param.zero1 ? "Zero1" : "");
                         });

}  // namespace
