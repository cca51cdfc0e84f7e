#include "stoker/train/trainer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "dist/thread_communicator.h"
#include "stoker/data/loader.h"
#include "stoker/data/pack.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/data/token_batches.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"
#include "stoker/train/safetensors.h"
#include "test_util.h"
#include "train/train_test_util.h"

namespace fs = std::filesystem;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
namespace data = stoker::data;
using stoker::train::SafetensorsReader;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

namespace {

using stoker::train_test::Blobs;
using stoker::train_test::byte_of_tensor;
using stoker::train_test::flip_byte;
using stoker::train_test::make_blobs;

std::unique_ptr<nn::Sequential> make_mlp(uint64_t seed, float dropout) {
  nn::manual_seed(seed);
  auto m = std::make_unique<nn::Sequential>();
  m->add(nn::make<nn::Linear>(8, 32));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Dropout>(dropout));
  m->add(nn::make<nn::Linear>(32, 3));
  return m;
}

std::vector<std::vector<float>> weights(nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value().to_vector<float>());
  return out;
}

// The message of the stoker::Error fn throws ("(no error)" when it returns).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const stoker::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Offset in the file of byte `k` of tensor `name`'s data.

// A pid that no process has any more: a child's, after it exited and was reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_trainer_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TrainerTest, LearnsBlobsAndEvaluates) {
  const Blobs train = make_blobs(600, 1), test = make_blobs(300, 2);
  auto model = make_mlp(7, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  nn::CrossEntropyLoss loss;
  Trainer trainer(*model, loss, opt, {.log_interval = 5, .progress_bar = false, .quiet = true});
  data::TensorBatches batches(train.x, train.y, {.batch_size = 50, .seed = 3});
  data::TensorBatches eval(test.x, test.y, {.batch_size = 100, .shuffle = false});
  const double before = trainer.evaluate(eval).loss;
  const auto result = trainer.fit(batches, 5);
  EXPECT_EQ(result.steps, 60);
  // A line every 5 steps, plus one for each epoch tail (12 steps per epoch): 16 lines.
  EXPECT_EQ(result.log.size(), 16u);
  EXPECT_EQ(result.log.back().step, 60);
  const auto after = trainer.evaluate(eval);
  EXPECT_LT(after.loss, 0.5 * before);
  EXPECT_GT(after.accuracy, 0.9);
  EXPECT_EQ(after.samples, 300);
  EXPECT_GT(result.log.back().grad_norm, 0.0);
}

// k micro-batches of b give the same update as one batch of k*b.
TEST_F(TrainerTest, GradientAccumulationEqualsLargeBatch) {
  const Blobs d = make_blobs(64, 4);
  auto big = make_mlp(11, 0.0f), small = make_mlp(11, 0.0f);
  stoker::optim::SGD opt_big(big->named_parameters(), {.lr = 0.5f});
  stoker::optim::SGD opt_small(small->named_parameters(), {.lr = 0.5f});
  nn::CrossEntropyLoss l1, l2;
  Trainer t_big(*big, l1, opt_big, {.progress_bar = false, .quiet = true});
  Trainer t_small(*small, l2, opt_small,
                  {.grad_accum_steps = 4, .progress_bar = false, .quiet = true});
  data::TensorBatches b_big(d.x, d.y, {.batch_size = 64, .shuffle = false});
  data::TensorBatches b_small(d.x, d.y, {.batch_size = 16, .shuffle = false});
  t_big.fit(b_big, 1);
  t_small.fit(b_small, 1);
  EXPECT_EQ(t_big.step(), 1);
  EXPECT_EQ(t_small.step(), 1);
  const auto wb = weights(*big), ws = weights(*small);
  for (size_t t = 0; t < wb.size(); ++t)
    for (size_t i = 0; i < wb[t].size(); ++i)
      ASSERT_NEAR(wb[t][i], ws[t][i], 1e-6) << t << "/" << i;
}

// train_step() over k micro-batches is fit()'s step with grad_accum_steps = k, bit for bit, and
// fit() reports the host syncs made inside a step (none on the CPU).
TEST_F(TrainerTest, TrainStepEqualsFitStepAndReportsHostSyncs) {
  const Blobs d = make_blobs(64, 4);
  auto a = make_mlp(11, 0.0f), b = make_mlp(11, 0.0f);
  stoker::optim::AdamW opt_a(a->named_parameters()), opt_b(b->named_parameters());
  nn::CrossEntropyLoss la, lb;
  const TrainerOptions o{
      .grad_accum_steps = 2, .clip_grad_norm = 0.1f, .progress_bar = false, .quiet = true};
  Trainer ta(*a, la, opt_a, o), tb(*b, lb, opt_b, o);
  data::TensorBatches src(d.x, d.y, {.batch_size = 32, .shuffle = false});
  const auto fit = ta.fit(src, 1);
  ASSERT_EQ(fit.log.size(), 1u);
  EXPECT_EQ(fit.log[0].host_syncs_per_step, 0);
  src.start_epoch(0);
  std::vector<data::Batch> micro(2);
  ASSERT_TRUE(src.next(micro[0]) && src.next(micro[1]));
  tb.train_step(micro);
  EXPECT_EQ(tb.step(), 1);
  const auto wa = weights(*a), wb = weights(*b);
  for (size_t t = 0; t < wa.size(); ++t)
    for (size_t i = 0; i < wa[t].size(); ++i) ASSERT_EQ(wa[t][i], wb[t][i]) << t << "/" << i;
  EXPECT_THROW(tb.train_step({}), stoker::Error);
}

// TrainerOptions::cuda_graph is refused when the Trainer is built, with the reason: a model on
// the CPU, an optimizer that cannot read its learning rate on the device, no warm-up step.
TEST_F(TrainerTest, CudaGraphIsRefusedWhereItCannotRun) {
  auto m = make_mlp(12, 0.0f);
  stoker::optim::AdamW adamw(m->named_parameters());
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.progress_bar = false, .quiet = true};
  o.cuda_graph = true;
  std::string e = error_of([&] { Trainer t(*m, loss, adamw, o); });
  EXPECT_NE(e.find("TrainerOptions::cuda_graph: the model is on cpu"), std::string::npos) << e;
  EXPECT_NE(e.find("turn the option off"), std::string::npos) << e;
  o.cuda_graph_warmup = 0;
  e = error_of([&] { Trainer t(*m, loss, adamw, o); });
  EXPECT_NE(e.find("cuda_graph_warmup 0 must be >= 1"), std::string::npos) << e;
  o.cuda_graph_warmup = 2;
  stoker::optim::SGD sgd(
      m->named_parameters(),
      {.lr = 0.1f, .momentum = 0.9f, .state = {.dtype = stoker::optim::StateDType::bf16}});
  e = error_of([&] { Trainer t(*m, loss, sgd, o); });
  EXPECT_NE(e.find("cannot read its learning rate on the device"), std::string::npos) << e;
  EXPECT_NE(e.find("SGD, LARS or AdamW with f32 state"), std::string::npos) << e;
  o.cuda_graph = false;
  o.cuda_graph_warmup = 0;
  EXPECT_NO_THROW(Trainer(*m, loss, sgd, o));  // none of it counts with the option off
}

// 20 steps straight == 10 steps + checkpoint + resume in fresh objects + 10 steps, bit for bit
// (dropout masks, shuffling, optimizer state and step count all restored).
TEST_F(TrainerTest, ResumeReproducesTheRunBitForBit) {
  const Blobs d = make_blobs(200, 5);
  auto run = [&](int64_t stop_at, const fs::path& resume_from) {
    auto model = make_mlp(13, 0.2f);
    auto opt = std::make_unique<stoker::optim::AdamW>(model->named_parameters(),
                                                      stoker::optim::AdamWOptions{.lr = 1e-2f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.clip_grad_norm = 1.0f,
                     .schedule = stoker::optim::cosine_with_warmup(1e-2f, 3, 20),
                     .progress_bar = false,
                     .checkpoint_dir = dir_,
                     .max_steps = stop_at,
                     .quiet = true};
    Trainer t(*model, loss, *opt, o);
    if (!resume_from.empty()) t.resume(resume_from);
    data::TensorBatches b(d.x, d.y, {.batch_size = 16, .seed = 99});  // 13 batches per epoch
    t.fit(b, 100);
    return weights(*model);
  };
  const auto straight = run(20, {});
  run(10, {});
  ASSERT_TRUE(fs::exists(dir_ / "last.safetensors"));
  const auto resumed = run(20, dir_ / "last.safetensors");
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t t = 0; t < straight.size(); ++t)
    EXPECT_EQ(0, std::memcmp(straight[t].data(), resumed[t].data(), straight[t].size() * 4))
        << "parameter " << t;
}

TEST_F(TrainerTest, NanLossStopsWithStepAndLastFiniteLoss) {
  const Blobs d = make_blobs(100, 6);
  d.x.data<float>()[35 * 8 + 2] = NAN;  // sample 35: batch 3 of an unshuffled run
  auto model = make_mlp(17, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.log_interval = 1000, .progress_bar = false, .quiet = true});
  data::TensorBatches b(d.x, d.y, {.batch_size = 10, .shuffle = false});
  try {
    t.fit(b, 20);
    FAIL() << "a run with a NaN loss was not stopped";
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("NaN/Inf at step 3 "), std::string::npos) << msg;
    EXPECT_NE(msg.find("last finite loss"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at step 2)"), std::string::npos) << msg;
  }
  // Asked to continue, the run goes on (and reports only finite losses).
  auto model2 = make_mlp(17, 0.0f);
  stoker::optim::SGD opt2(model2->named_parameters(), {.lr = 0.1f});
  Trainer t2(*model2, loss, opt2,
             {.progress_bar = false, .continue_on_nan = true, .max_steps = 5, .quiet = true});
  EXPECT_EQ(t2.fit(b, 1).steps, 5);
}

TEST_F(TrainerTest, CheckpointErrorsNameFileAndTensor) {
  const Blobs d = make_blobs(50, 7);
  auto model = make_mlp(19, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  data::TensorBatches b(d.x, d.y, {.batch_size = 10});
  t.save_checkpoint(dir_ / "a.safetensors", &b);
  // A model with another hidden size cannot load it.
  nn::manual_seed(1);
  nn::Sequential other(nn::make<nn::Linear>(8, 16), nn::make<nn::ReLU>(),
                       nn::make<nn::Linear>(16, 3));
  stoker::optim::SGD opt2(other.named_parameters(), {.lr = 0.1f});
  Trainer t2(other, loss, opt2, {.progress_bar = false, .quiet = true});
  try {
    t2.resume(dir_ / "a.safetensors");
    FAIL();
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("a.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.0.weight"), std::string::npos) << msg;
  }
  EXPECT_THROW(t2.resume(dir_ / "missing.safetensors"), stoker::Error);
}

// A byte flipped in a tensor of a checkpoint fails resume() with the file and the tensor named,
// and the Trainer that tried keeps its weights.
TEST_F(TrainerTest, ADamagedCheckpointTensorFailsResumeAndChangesNothing) {
  const Blobs d = make_blobs(100, 8);
  const fs::path ckpt = dir_ / "last.safetensors";
  {
    auto model = make_mlp(21, 0.0f);
    stoker::optim::AdamW opt(model->named_parameters());
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt,
              {.progress_bar = false, .checkpoint_dir = dir_, .max_steps = 4, .quiet = true});
    data::TensorBatches b(d.x, d.y, {.batch_size = 10, .seed = 1});
    t.fit(b, 10);
  }
  std::string optim_tensor;
  {
    const SafetensorsReader r(ckpt);
    EXPECT_EQ(r.metadata().count("stoker.checksums"), 1u);
    ASSERT_EQ(r.metadata().count("stoker.checkpoint_version"), 1u);
    EXPECT_EQ(r.metadata().at("stoker.checkpoint_version"), "2");
    for (const std::string& n : r.names())
      if (optim_tensor.empty() && n.rfind("optim.", 0) == 0 && r.entry(n).end > r.entry(n).begin)
        optim_tensor = n;
  }
  ASSERT_FALSE(optim_tensor.empty());
  for (const std::string& victim : {optim_tensor, std::string("model.3.bias")}) {
    SCOPED_TRACE(victim);
    const size_t at = byte_of_tensor(ckpt, victim, 5);
    flip_byte(ckpt, at);
    auto model = make_mlp(99, 0.0f);
    stoker::optim::AdamW opt(model->named_parameters());
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
    const auto before = weights(*model);
    const std::string e = error_of([&] { t.resume(ckpt); });
    EXPECT_NE(e.find("checkpoint " + ckpt.string()), std::string::npos) << e;
    EXPECT_NE(e.find("tensor " + victim + " fails its checksum"), std::string::npos) << e;
    EXPECT_NE(e.find("the file is damaged; resume from an earlier checkpoint"), std::string::npos)
        << e;
    EXPECT_EQ(weights(*model), before);
    EXPECT_EQ(t.step(), 0);
    flip_byte(ckpt, at);  // repaired: it resumes
    EXPECT_EQ(error_of([&] { t.resume(ckpt); }), "(no error)");
    EXPECT_EQ(t.step(), 4);
  }
}

// A checkpoint written before checksums and run records (version 1: none of their keys) still
// resumes, bit for bit.
TEST_F(TrainerTest, AVersionOneCheckpointStillResumesBitForBit) {
  const Blobs d = make_blobs(200, 5);
  auto run = [&](int64_t stop_at, const fs::path& resume_from) {
    auto model = make_mlp(13, 0.2f);
    stoker::optim::AdamW opt(model->named_parameters(), {.lr = 1e-2f});
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt,
              {.progress_bar = false, .checkpoint_dir = dir_, .max_steps = stop_at, .quiet = true});
    if (!resume_from.empty()) t.resume(resume_from);
    data::TensorBatches b(d.x, d.y, {.batch_size = 16, .seed = 99});
    t.fit(b, 100);
    return weights(*model);
  };
  const auto straight = run(20, {});
  run(10, {});
  const fs::path v1 = dir_ / "v1.safetensors";
  {
    const SafetensorsReader r(dir_ / "last.safetensors");
    auto meta = r.metadata();
    ASSERT_EQ(meta.erase("stoker.checksums") + meta.erase("stoker.data") +
                  meta.erase("stoker.checkpoint_version"),
              3u);
    stoker::train::save_safetensors(v1, stoker::train::load_safetensors(dir_ / "last.safetensors"),
                                    meta, {.checksums = false});
  }
  ASSERT_FALSE(SafetensorsReader(v1).has_checksums());
  EXPECT_EQ(run(20, v1), straight);
}

// A checkpoint refuses to resume into a run that reads other data or reads it otherwise,
// naming the checkpoint, the field and both values; the same run resumes.
TEST_F(TrainerTest, ResumingIntoADifferentRunIsRefused) {
  const Blobs d = make_blobs(200, 5);
  const fs::path ckpt = dir_ / "last.safetensors";
  {
    auto model = make_mlp(13, 0.0f);
    stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt,
              {.progress_bar = false, .checkpoint_dir = dir_, .max_steps = 5, .quiet = true});
    data::TensorBatches b(d.x, d.y, {.batch_size = 16, .seed = 99});
    t.fit(b, 100);
  }
  auto resume_into = [&](const Blobs& data, data::TensorBatchesOptions o) {
    auto model = make_mlp(13, 0.0f);
    stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    Trainer t(*model, loss, opt, {.progress_bar = false, .max_steps = 8, .quiet = true});
    t.resume(ckpt);
    data::TensorBatches b(data.x, data.y, o);
    return error_of([&] { t.fit(b, 100); });
  };
  const std::string at = "checkpoint " + ckpt.string();
  std::string e = resume_into(d, {.batch_size = 32, .seed = 99});
  EXPECT_NE(e.find(at + ": the batch size differs"), std::string::npos) << e;
  EXPECT_NE(e.find("batches of 16 samples per rank, this one 32"), std::string::npos) << e;
  EXPECT_NE(e.find("resume with batch size 16"), std::string::npos) << e;
  EXPECT_NE(e.find("another checkpoint_dir"), std::string::npos) << e;
  e = resume_into(d, {.batch_size = 16, .seed = 7});
  EXPECT_NE(e.find(at + ": the data seed differs"), std::string::npos) << e;
  EXPECT_NE(e.find("from seed 99, this one from seed 7"), std::string::npos) << e;
  e = resume_into(make_blobs(150, 5), {.batch_size = 16, .seed = 99});
  EXPECT_NE(e.find(at + ": the dataset differs"), std::string::npos) << e;
  EXPECT_NE(e.find("read 200 samples"), std::string::npos) << e;
  EXPECT_NE(e.find("this one 150"), std::string::npos) << e;
  e = resume_into(make_blobs(200, 6), {.batch_size = 16, .seed = 99});  // same count, other data
  EXPECT_NE(e.find(at + ": the dataset differs"), std::string::npos) << e;
  EXPECT_NE(e.find("xxh3"), std::string::npos) << e;
  EXPECT_EQ(resume_into(d, {.batch_size = 16, .seed = 99}), "(no error)");
}

// A checkpoint of a 2-rank job does not resume in a single process.
// Another world size is an elastic resume (tests/dist/elastic_resume_test.cpp checks the samples):
// a 2-rank checkpoint inside an epoch continues on 1 rank, which trains the 60 samples of the
// epoch the two ranks had not reached (6 batches of 10) and then a 1-rank epoch. max_steps counts
// steps of the first segment's global batch (20): 12 of them are 240 samples, the 2 epochs, so
// the 1-rank job ends after 18 steps of 10 at step 21, as the uninterrupted run would.
TEST_F(TrainerTest, ResumingAtAnotherWorldSizeContinuesTheEpoch) {
  const Blobs d = make_blobs(120, 9);
  const fs::path dir = dir_ / "two_ranks";
  std::vector<std::unique_ptr<nn::Sequential>> models;
  for (int r = 0; r < 2; ++r) models.push_back(make_mlp(31, 0.0f));
  stoker::dist::run_ranks(2, [&](stoker::dist::Communicator& comm) {
    nn::Sequential& m = *models[static_cast<size_t>(comm.rank())];
    stoker::dist::ReplicatedGradSync sync(comm, m);
    stoker::optim::SGD opt(m.named_parameters(), {.lr = 0.1f});
    nn::CrossEntropyLoss loss;
    Trainer t(m, loss, opt,
              {.progress_bar = false,
               .checkpoint_dir = dir,
               .max_steps = 3,
               .quiet = true,
               .grad_sync = &sync});
    data::TensorBatches b(d.x, d.y,
                          {.batch_size = 10, .seed = 4, .rank = comm.rank(), .world_size = 2});
    t.fit(b, 10);
  });
  auto model = make_mlp(31, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .max_steps = 12, .quiet = true});
  t.resume(dir / "last.safetensors");
  data::TensorBatches b(d.x, d.y, {.batch_size = 10, .seed = 4});
  const auto r = t.fit(b, 10);
  EXPECT_EQ(r.steps, 21);
  EXPECT_EQ(t.samples_seen(), 240);
  EXPECT_EQ(b.epoch(), 1);  // 6 steps finished epoch 0, 12 more epoch 1
  EXPECT_EQ(b.batch_index(), 12);
}

// The data's fingerprint is its content, not its path: a moved dataset keeps it, changed data
// does not (tensors, token files, image databases).
TEST_F(TrainerTest, DataFingerprintsFollowContentNotLocation) {
  const Blobs d = make_blobs(50, 3);
  const data::TensorBatches a(d.x, d.y, {.batch_size = 5});
  const data::TensorBatches same(d.x.clone(), d.y.clone(), {.batch_size = 5});
  Tensor changed_x = d.x.clone();
  changed_x.data<float>()[123] += 1.0f;
  const data::TensorBatches changed(changed_x, d.y, {.batch_size = 5});
  EXPECT_EQ(a.identity().fingerprint, same.identity().fingerprint);
  EXPECT_NE(a.identity().fingerprint, changed.identity().fingerprint);
  EXPECT_EQ(a.identity().samples, 50);
  EXPECT_EQ(a.identity().batch_size, 5);

  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 50000);
  auto write = [&](const fs::path& p, const std::vector<uint16_t>& t) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size() * 2));
  };
  write(dir_ / "a.bin", tokens);
  fs::create_directories(dir_ / "moved");
  fs::copy_file(dir_ / "a.bin", dir_ / "moved" / "a.bin");
  std::vector<uint16_t> other = tokens;
  other[17] ^= 1;
  write(dir_ / "other.bin", other);
  const data::TokenDataset ta(dir_ / "a.bin", {.context = 16, .seed = 2});
  const data::TokenDataset tm(dir_ / "moved" / "a.bin", {.context = 16, .seed = 2});
  const data::TokenDataset to(dir_ / "other.bin", {.context = 16, .seed = 2});
  const data::TokenBatches ba(ta, {.batch_size = 4}), bm(tm, {.batch_size = 4}),
      bo(to, {.batch_size = 4});
  EXPECT_EQ(ba.identity().fingerprint, bm.identity().fingerprint);
  EXPECT_NE(ba.identity().location, bm.identity().location);
  EXPECT_NE(ba.identity().fingerprint, bo.identity().fingerprint);
  EXPECT_EQ(ba.identity().seed, std::optional<uint64_t>(2));

  const data::SynthOptions synth{.samples = 12, .classes = 3, .size = 16, .seed = 1};
  data::pack_synth(synth, dir_ / "db", {.threads = 1, .progress = false});
  fs::copy(dir_ / "db", dir_ / "db_moved", fs::copy_options::recursive);
  data::pack_synth({.samples = 12, .classes = 3, .size = 16, .seed = 2}, dir_ / "db_other",
                   {.threads = 1, .progress = false});
  auto loader_identity = [](const fs::path& p) {
    const data::LmdbImageDataset ds(p);
    data::LoaderOptions o;
    o.batch_size = 4;
    o.threads = 1;
    o.prefetch = 1;
    o.transform.output_size = 16;
    o.seed = 5;
    const data::Loader loader(ds, o);
    return loader.identity();
  };
  const auto la = loader_identity(dir_ / "db");
  EXPECT_EQ(la.fingerprint, loader_identity(dir_ / "db_moved").fingerprint);
  EXPECT_NE(la.fingerprint, loader_identity(dir_ / "db_other").fingerprint);
  EXPECT_EQ(la.samples, 12);
  EXPECT_EQ(la.seed, std::optional<uint64_t>(5));
}

// A checkpoint write removes the temporaries of writers that died, and only those.
TEST_F(TrainerTest, CheckpointWritesRemoveTemporariesOfDeadWriters) {
  const Blobs d = make_blobs(50, 7);
  auto model = make_mlp(19, 0.0f);
  stoker::optim::SGD opt(model->named_parameters(), {.lr = 0.1f});
  nn::CrossEntropyLoss loss;
  Trainer t(*model, loss, opt, {.progress_bar = false, .quiet = true});
  data::TensorBatches b(d.x, d.y, {.batch_size = 10});
  const pid_t dead = dead_pid();
  const std::string ours = std::to_string(::getpid());
  const fs::path stale = dir_ / ("step_40.safetensors.tmp." + std::to_string(dead) + ".3");
  const fs::path live = dir_ / ("step_50.safetensors.tmp." + ours + ".0");
  const fs::path unrelated = dir_ / ("notes.txt.tmp." + std::to_string(dead) + ".0");
  for (const fs::path& p : {stale, live, unrelated}) std::ofstream(p) << "partial";
  ::testing::internal::CaptureStderr();
  t.save_checkpoint(dir_ / "step_60.safetensors", &b);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(unrelated));
  EXPECT_TRUE(fs::exists(dir_ / "step_60.safetensors"));
  EXPECT_NE(err.find("removed 1 temporary file in " + dir_.string()), std::string::npos) << err;
  EXPECT_NE(err.find(stale.filename().string()), std::string::npos) << err;
  // Nothing left to remove: nothing said.
  ::testing::internal::CaptureStderr();
  t.save_checkpoint(dir_ / "step_60.safetensors", &b);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace

namespace stoker::train {
namespace {

// The example trainers' default (a CUDA graph whenever it can run) asks cuda_graph_blocker: each
// reason that makes TrainerOptions::cuda_graph refuse is named, and a plain AdamW on one CUDA
// device in one process has none. (No GPU is needed: only the device's kind is read.)
TEST(CudaGraphBlocker, NamesWhatKeepsTheStepEager) {
  nn::Linear plain_layer(64, 64);
  optim::AdamW plain(plain_layer.named_parameters());
  nn::Linear compact_layer(64, 4096);
  optim::AdamW compact(compact_layer.named_parameters(),
                       {.state = {.dtype = optim::StateDType::int8_blockwise, .block = 256}});
  ASSERT_FALSE(compact.supports_device_lr());
  const Device gpu = Device::cuda(0);
  EXPECT_EQ(cuda_graph_blocker(plain, gpu, 1), "");
  EXPECT_NE(cuda_graph_blocker(plain, Device::cpu(), 1).find("not a CUDA device"),
            std::string::npos);
  EXPECT_NE(cuda_graph_blocker(plain, gpu, 2).find("2 ranks"), std::string::npos);
  EXPECT_NE(cuda_graph_blocker(compact, gpu, 1).find("learning rate on the device"),
            std::string::npos);
}

}  // namespace
}  // namespace stoker::train
