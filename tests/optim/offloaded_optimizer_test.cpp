// OffloadedOptimizer on the CPU: the offloaded update (host shadows, inner optimizers per group)
// equals the plain optimizer over the same parameters bit for bit, for every state format,
// across group boundaries, skipped steps, learning-rate changes and checkpoints in both
// directions.
#include "stoker/optim/offloaded_optimizer.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/layout.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

using stoker::DType;
using stoker::Tensor;
using stoker::nn::Parameter;
using namespace stoker::optim;

namespace {

// Parameters of the given sizes with random values (the same for the same seed).
struct Params {
  std::vector<std::unique_ptr<Parameter>> ps;
  Params(const std::vector<int64_t>& sizes, uint32_t seed) {
    for (size_t i = 0; i < sizes.size(); ++i)
      ps.push_back(std::make_unique<Parameter>(
          stoker::test::random_tensor({sizes[i]}, DType::f32, seed + static_cast<uint32_t>(i))));
  }
  NamedParameters named() {
    NamedParameters out;
    for (size_t i = 0; i < ps.size(); ++i) out.emplace_back("p" + std::to_string(i), ps[i].get());
    return out;
  }
  // The same random gradients into every parameter (step `s` picks them).
  void set_grads(int s) {
    for (size_t i = 0; i < ps.size(); ++i)
      stoker::ops::copy(
          ps[i]->grad(),
          stoker::test::random_tensor(
              ps[i]->shape(), DType::f32,
              1000u * static_cast<uint32_t>(s + 1) + static_cast<uint32_t>(i), -2.0f, 2.0f));
  }
};

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.nbytes())) << what << " differs";
}

void expect_same_params(Params& a, Params& b) {
  for (size_t i = 0; i < a.ps.size(); ++i)
    expect_same_bits(a.ps[i]->value(), b.ps[i]->value(), "parameter p" + std::to_string(i));
}

void expect_same_state(Optimizer& a, Optimizer& b) {
  std::map<std::string, Tensor> sb;
  for (auto& [n, t] : b.state()) sb.emplace(n, t);
  const auto sa = a.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (auto& [n, t] : sa) {
    ASSERT_TRUE(sb.count(n)) << "state '" << n << "' missing";
    expect_same_bits(t, sb.at(n), "state " + n);
  }
}

const std::vector<int64_t> kSizes = {1000, 37, 0, 5000, 3, 2048, 4099};
// 8 KiB groups: the sizes above make several groups, one parameter larger than a group.
constexpr OffloadOptions kSmallGroups{.group_bytes = 8 << 10};

OffloadedOptimizer::Factory adamw_factory(const AdamWOptions& o) {
  return [o](NamedParameters p) { return std::make_unique<AdamW>(std::move(p), o); };
}

// Runs `steps` steps of plain and offloaded optimizers over two identical parameter sets, with a
// learning-rate change and the given found_inf pattern; compares parameters and state.
void run_and_compare(Optimizer& plain, Params& a, Optimizer& off, Params& b, int steps,
                     const std::vector<int>& skip_steps = {}) {
  Tensor fa = Tensor::zeros({}, DType::f32), fb = Tensor::zeros({}, DType::f32);
  plain.set_found_inf(fa);
  off.set_found_inf(fb);
  for (int s = 0; s < steps; ++s) {
    a.set_grads(s);
    b.set_grads(s);
    const float skip = std::find(skip_steps.begin(), skip_steps.end(), s) != skip_steps.end();
    stoker::ops::fill(fa, skip);
    stoker::ops::fill(fb, skip);
    if (s == 2) {  // a schedule's change
      plain.set_lr(plain.lr() * 0.5f);
      off.set_lr(off.lr() * 0.5f);
    }
    plain.step();
    off.step();
    plain.zero_grad();
    off.zero_grad();
  }
  expect_same_params(a, b);
  expect_same_state(plain, off);
  EXPECT_EQ(plain.steps(), off.steps());
}

TEST(OffloadedOptimizerTest, AdamWEqualsPlainAdamWForEveryStateFormat) {
  for (const StateDType dt : {StateDType::f32, StateDType::bf16, StateDType::int8_blockwise}) {
    SCOPED_TRACE(testing::Message() << "state dtype " << static_cast<int>(dt));
    const AdamWOptions o{.lr = 1e-2f,
                         .weight_decay = 0.1f,
                         .state = {.dtype = dt, .block = 256, .min_quantized_numel = 1024}};
    Params a(kSizes, 7), b(kSizes, 7);
    AdamW plain(a.named(), o);
    OffloadedOptimizer off(b.named(), adamw_factory(o), kSmallGroups);
    EXPECT_GT(off.groups(), 2u);
    run_and_compare(plain, a, off, b, 5);
    EXPECT_EQ(plain.state_bytes(), off.state_bytes());
    EXPECT_EQ(plain.applied_steps(), dynamic_cast<AdamW&>(off.inner(0)).applied_steps());
  }
}

TEST(OffloadedOptimizerTest, OwnThreadCountGivesTheSameBits) {
  const AdamWOptions o{.lr = 1e-2f};
  Params a(kSizes, 13), b(kSizes, 13);
  AdamW plain(a.named(), o);
  OffloadedOptimizer off(b.named(), adamw_factory(o), {.group_bytes = 8 << 10, .threads = 1});
  run_and_compare(plain, a, off, b, 3);
  EXPECT_THROW(OffloadedOptimizer(b.named(), adamw_factory(o), {.threads = -1}), stoker::Error);
}

TEST(OffloadedOptimizerTest, SgdMomentumEqualsPlainSgd) {
  for (const StateDType dt : {StateDType::f32, StateDType::bf16}) {
    const SgdOptions o{.lr = 0.05f,
                       .momentum = 0.9f,
                       .weight_decay = 1e-3f,
                       .nesterov = true,
                       .state = {.dtype = dt}};
    Params a(kSizes, 11), b(kSizes, 11);
    SGD plain(a.named(), o);
    OffloadedOptimizer off(
        b.named(), [o](NamedParameters p) { return std::make_unique<SGD>(std::move(p), o); },
        kSmallGroups);
    run_and_compare(plain, a, off, b, 4);
  }
}

TEST(OffloadedOptimizerTest, FoundInfSkipsLikeThePlainOptimizer) {
  const AdamWOptions o{.lr = 1e-2f};
  Params a(kSizes, 3), b(kSizes, 3);
  AdamW plain(a.named(), o);
  OffloadedOptimizer off(b.named(), adamw_factory(o), kSmallGroups);
  run_and_compare(plain, a, off, b, 5, /*skip_steps=*/{1, 3});
  EXPECT_EQ(plain.applied_steps(), 3);
  for (size_t g = 0; g < off.groups(); ++g)
    EXPECT_EQ(dynamic_cast<AdamW&>(off.inner(g)).applied_steps(), 3) << "group " << g;
  EXPECT_EQ(off.steps(), 5);
}

TEST(OffloadedOptimizerTest, SkippedStepLeavesValuesUntouched) {
  Params b(kSizes, 5);
  OffloadedOptimizer off(b.named(), adamw_factory({}), kSmallGroups);
  b.set_grads(0);
  off.step();
  std::vector<std::vector<float>> before;
  for (auto& p : b.ps) before.push_back(p->value().to_vector<float>());
  Tensor flag = Tensor::from_floats({1.0f}, {});
  off.set_found_inf(flag);
  b.set_grads(1);
  off.step();
  for (size_t i = 0; i < b.ps.size(); ++i)
    EXPECT_EQ(before[i], b.ps[i]->value().to_vector<float>()) << "parameter " << i;
}

TEST(OffloadedOptimizerTest, GroupsSplitAtTheByteLimitInParameterOrder) {
  // 100 tiny parameters (12 bytes each) and one of 10000 floats, groups of 4 KiB: the tiny ones
  // share groups of at most 4096 / 12 = 341 elements... here fewer than that, so they fill one
  // group before the large parameter, which takes a group of its own.
  std::vector<int64_t> sizes(100, 3);
  sizes.push_back(10000);
  sizes.push_back(3);
  Params a(sizes, 21), b(sizes, 21);
  const AdamWOptions o{.lr = 3e-3f};
  AdamW plain(a.named(), o);
  OffloadedOptimizer off(b.named(), adamw_factory(o), {.group_bytes = 4 << 10});
  ASSERT_EQ(off.groups(), 3u);
  EXPECT_EQ(off.inner(0).parameters().size(), 100u);
  EXPECT_EQ(off.inner(1).parameters().size(), 1u);
  EXPECT_EQ(off.inner(1).parameters()[0].first, "p100");
  EXPECT_EQ(off.inner(2).parameters().size(), 1u);
  run_and_compare(plain, a, off, b, 3);
  EXPECT_GT(off.last_step_timing().update_ms, 0.0);
  // One group when everything fits.
  Params c(sizes, 21);
  OffloadedOptimizer one(c.named(), adamw_factory(o));
  EXPECT_EQ(one.groups(), 1u);
  EXPECT_NE(one.describe().find("Offloaded(AdamW("), std::string::npos) << one.describe();
  EXPECT_NE(one.describe().find("1 group"), std::string::npos) << one.describe();
}

TEST(OffloadedOptimizerTest, FrozenParametersAreLeftOut) {
  Params b({100, 200}, 9);
  b.ps[0]->requires_grad = false;
  const auto frozen = b.ps[0]->value().to_vector<float>();
  OffloadedOptimizer off(b.named(), adamw_factory({}));
  EXPECT_EQ(off.inner(0).parameters().size(), 1u);
  b.set_grads(0);
  off.step();
  EXPECT_EQ(frozen, b.ps[0]->value().to_vector<float>());
}

// A checkpoint as the Trainer writes it: checkpoint_state() by name, loaded by name.
std::map<std::string, Tensor> save(Optimizer& o) {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : o.checkpoint_state()) out.emplace(n, t.clone());
  return out;
}
Optimizer::TensorLoader loader(const std::map<std::string, Tensor>& file) {
  return [&file](const std::string& name, stoker::Device device) {
    const auto it = file.find(name);
    STOKER_CHECK(it != file.end(), "no tensor '", name, "' in the test checkpoint");
    return it->second.to(device);
  };
}

TEST(OffloadedOptimizerTest, CheckpointsResumeAcrossOffloadedAndPlain) {
  for (const StateDType dt : {StateDType::f32, StateDType::bf16}) {
    const AdamWOptions o{.lr = 1e-2f, .weight_decay = 0.05f, .state = {.dtype = dt}};
    // The reference: 5 uninterrupted plain steps.
    Params ref(kSizes, 31);
    AdamW ref_opt(ref.named(), o);
    for (int s = 0; s < 5; ++s) {
      ref.set_grads(s);
      ref_opt.step();
    }
    // Offloaded for 3 steps, checkpoint, resume plain for 2.
    {
      Params a(kSizes, 31);
      OffloadedOptimizer off(a.named(), adamw_factory(o), kSmallGroups);
      for (int s = 0; s < 3; ++s) {
        a.set_grads(s);
        off.step();
      }
      const auto file = save(off);
      EXPECT_EQ(file.count("step_state"), 1u);
      AdamW resumed(a.named(), o);
      resumed.load_checkpoint_state(loader(file));
      resumed.set_steps(off.steps());
      for (int s = 3; s < 5; ++s) {
        a.set_grads(s);
        resumed.step();
      }
      expect_same_params(ref, a);
      expect_same_state(ref_opt, resumed);
    }
    // Plain for 3 steps, checkpoint, resume offloaded for 2.
    {
      Params a(kSizes, 31);
      AdamW plain(a.named(), o);
      for (int s = 0; s < 3; ++s) {
        a.set_grads(s);
        plain.step();
      }
      const auto file = save(plain);
      OffloadedOptimizer resumed(a.named(), adamw_factory(o), kSmallGroups);
      resumed.load_checkpoint_state(loader(file));
      resumed.set_steps(plain.steps());
      for (int s = 3; s < 5; ++s) {
        a.set_grads(s);
        resumed.step();
      }
      expect_same_params(ref, a);
      expect_same_state(ref_opt, resumed);
    }
  }
}

TEST(OffloadedOptimizerTest, StateBytesAndHostBytes) {
  Params b(kSizes, 2);
  OffloadedOptimizer off(b.named(), adamw_factory({}), kSmallGroups);
  int64_t n = 0;
  for (int64_t s : kSizes) n += s;
  const size_t step_state = dynamic_cast<AdamW&>(off.inner(0)).state().back().second.nbytes();
  EXPECT_EQ(off.state_bytes(), static_cast<size_t>(n) * 8 + step_state);
  EXPECT_EQ(off.host_bytes(), off.state_bytes() + static_cast<size_t>(n) * 8);
  for (auto& [name, t] : off.state()) EXPECT_TRUE(t.device().is_cpu()) << name;
}

TEST(OffloadedOptimizerTest, RejectsBadInput) {
  Params b({10}, 1);
  EXPECT_THROW(OffloadedOptimizer(b.named(), nullptr), stoker::Error);
  EXPECT_THROW(OffloadedOptimizer(b.named(), adamw_factory({}), {.group_bytes = 0}), stoker::Error);
  b.ps[0]->requires_grad = false;
  EXPECT_THROW(OffloadedOptimizer(b.named(), adamw_factory({})), stoker::Error);
}

// Memory advice: offloading is advised for device-resident optimizer state on a GPU only.
TEST(OffloadedOptimizerTest, MemoryAdviceOffersOffloadOnAGpu) {
  stoker::train::MemoryReport r;
  r.optimizer_state = 8000;
  auto has_offload = [](const std::vector<stoker::train::MemoryAdvice>& a) {
    for (const auto& x : a)
      if (x.action.find("OffloadedOptimizer") != std::string::npos) return x.saves_bytes == 8000;
    return false;
  };
  r.device = stoker::Device::cpu();
  EXPECT_FALSE(has_offload(stoker::train::memory_advice(r, {})));
  r.device = stoker::Device::cuda(0);
  EXPECT_TRUE(has_offload(stoker::train::memory_advice(r, {})));
  r.optimizer_state = 0;  // already offloaded
  r.optimizer_state_host = 8000;
  EXPECT_FALSE(has_offload(stoker::train::memory_advice(r, {})));
}

// Through the Trainer (clipping on the parameters' gradients before step()): offloaded training
// equals plain training bit for bit, and a Trainer checkpoint resumes across the two (the
// resume writes the weights into the model, the offload's shadows must follow).
TEST(OffloadedOptimizerTest, TrainerRunsAndResumesAcrossOffloadedAndPlain) {
  namespace fs = std::filesystem;
  namespace nn = stoker::nn;
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_offload_resume_" + std::to_string(::getpid()));
  const Tensor x = stoker::test::random_tensor({96, 16}, DType::f32, 1);
  const Tensor y = stoker::test::random_tensor({96, 4}, DType::f32, 2);
  const AdamWOptions o{.lr = 1e-2f, .state = {.dtype = StateDType::bf16}};
  // Trains until step `stop_at` (resuming from `from` if given), offloaded or not.
  auto run = [&](bool offload, int64_t stop_at, const fs::path& from) {
    nn::manual_seed(7);
    nn::Sequential model(nn::make<nn::Linear>(16, 64), nn::make<nn::ReLU>(),
                         nn::make<nn::Linear>(64, 4));
    std::unique_ptr<Optimizer> opt;
    if (offload)
      opt = std::make_unique<OffloadedOptimizer>(model.named_parameters(), adamw_factory(o),
                                                 OffloadOptions{.group_bytes = 2 << 10});
    else
      opt = std::make_unique<AdamW>(model.named_parameters(), o);
    nn::MSELoss loss;
    stoker::train::Trainer t(model, loss, *opt,
                             {.clip_grad_norm = 0.5f,
                              .progress_bar = false,
                              .checkpoint_dir = dir,
                              .max_steps = stop_at,
                              .quiet = true});
    if (!from.empty()) t.resume(from);
    stoker::data::TensorBatches b(x, y, {.batch_size = 16, .seed = 3});
    t.fit(b, 100);
    std::vector<std::vector<uint8_t>> out;
    for (auto* p : model.parameters()) out.push_back(stoker::test::raw_bytes(p->value()));
    return out;
  };
  fs::remove_all(dir);
  const auto plain = run(false, 12, {});
  EXPECT_EQ(plain, run(true, 12, {})) << "offloaded training differs from plain";
  for (const bool first_offloaded : {true, false}) {
    SCOPED_TRACE(first_offloaded ? "offloaded, then plain" : "plain, then offloaded");
    fs::remove_all(dir);
    run(first_offloaded, 6, {});
    ASSERT_TRUE(fs::exists(dir / "last.safetensors"));
    EXPECT_EQ(plain, run(!first_offloaded, 12, dir / "last.safetensors"));
  }
  fs::remove_all(dir);
}

// Weights written into the model after the optimizer exists reach the shadows on request.
TEST(OffloadedOptimizerTest, ReloadValuesPicksUpWeightsWrittenOutside) {
  Params a({100}, 1), b({100}, 1);
  AdamW plain(a.named(), {});
  OffloadedOptimizer off(b.named(), adamw_factory({}));
  const Tensor w = stoker::test::random_tensor({100}, DType::f32, 99);
  a.ps[0]->set_value(w);
  b.ps[0]->set_value(w);
  off.reload_values();
  a.set_grads(0);
  b.set_grads(0);
  plain.step();
  off.step();
  expect_same_params(a, b);
}

// ---- Delayed parameter update (OffloadOptions::delayed_update) ----

// The gradient of a quadratic loss 0.5 w'Aw - b'w at w, computed on the host: A is tridiagonal
// (diagonal 1 + j % 7 / 4, off-diagonals 0.25), b_j = sin(j). Written into each parameter's
// gradient from its current value; equal value bits give equal gradient bits.
void set_quadratic_grads(Params& p) {
  for (auto& param : p.ps) {
    const int64_t n = param->value().numel();
    const float* w = param->value().data<float>();
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      float v = (1.0f + static_cast<float>(j % 7) * 0.25f) * w[j] - std::sin(static_cast<float>(j));
      if (j > 0) v += 0.25f * w[j - 1];
      if (j + 1 < n) v += 0.25f * w[j + 1];
      g[static_cast<size_t>(j)] = v;
    }
    if (n > 0) std::memcpy(param->grad().data<float>(), g.data(), g.size() * sizeof(float));
  }
}

float lr_at(int t) { return 1e-2f * (1.0f - 0.05f * static_cast<float>(t)); }

std::vector<Tensor> values_of(Params& p) {
  std::vector<Tensor> out;
  for (auto& param : p.ps) out.push_back(param->value().clone());
  return out;
}

// Plain AdamW where the gradient of step t is taken at the weights after update t-2 (the
// initial weights for t <= 2): what the delayed mode computes. Returns the weights after each
// update (w[0]: initial, w[t]: after update t). Update `skip` is skipped (found_inf).
std::vector<std::vector<Tensor>> delayed_reference(const std::vector<int64_t>& sizes, uint32_t seed,
                                                   const AdamWOptions& o, int n, int skip) {
  Params at(sizes, seed), ref(sizes, seed);  // `at`: where gradients are taken
  AdamW plain(ref.named(), o);
  Tensor flag = Tensor::zeros({}, DType::f32);
  plain.set_found_inf(flag);
  std::vector<std::vector<Tensor>> w{values_of(ref)};
  for (int t = 1; t <= n; ++t) {
    const std::vector<Tensor>& stale = w[static_cast<size_t>(std::max(0, t - 2))];
    for (size_t i = 0; i < at.ps.size(); ++i) stoker::ops::copy(at.ps[i]->value(), stale[i]);
    set_quadratic_grads(at);
    for (size_t i = 0; i < at.ps.size(); ++i)
      stoker::ops::copy(ref.ps[i]->grad(), at.ps[i]->grad());
    stoker::ops::fill(flag, t == skip ? 1.0 : 0.0);
    plain.set_lr(lr_at(t));
    plain.step();
    plain.zero_grad();
    w.push_back(values_of(ref));
  }
  return w;
}

void expect_values(Params& p, const std::vector<Tensor>& w, const std::string& what) {
  for (size_t i = 0; i < p.ps.size(); ++i)
    expect_same_bits(p.ps[i]->value(), w[i], what + ", parameter p" + std::to_string(i));
}

TEST(OffloadedOptimizerDelayedTest, EqualsAdamWWithOneStepStaleGradients) {
  constexpr int kSteps = 8, kSkip = 4;
  for (const StateDType dt : {StateDType::f32, StateDType::bf16}) {
    SCOPED_TRACE(testing::Message() << "state dtype " << static_cast<int>(dt));
    const AdamWOptions o{.lr = 1e-2f, .weight_decay = 0.1f, .state = {.dtype = dt}};
    const auto w = delayed_reference(kSizes, 21, o, kSteps, kSkip);
    Params b(kSizes, 21);
    OffloadedOptimizer off(b.named(), adamw_factory(o),
                           {.group_bytes = 8 << 10, .delayed_update = true});
    EXPECT_GT(off.groups(), 2u);
    Tensor flag = Tensor::zeros({}, DType::f32);
    off.set_found_inf(flag);
    for (int t = 1; t <= kSteps; ++t) {
      // Before step t the weights are those after update t-2: one step stale.
      expect_values(b, w[static_cast<size_t>(std::max(0, t - 2))],
                    "before step " + std::to_string(t));
      set_quadratic_grads(b);
      stoker::ops::fill(flag, t == kSkip ? 1.0 : 0.0);
      off.set_lr(lr_at(t));
      off.step();
      // Update t runs in the background: what it uses was captured at step t.
      stoker::ops::fill(flag, t == kSkip ? 0.0 : 1.0);
      off.set_lr(123.0f);
      off.zero_grad();
      set_quadratic_grads(b);  // the next backward overwrites the gradients at once
    }
    EXPECT_EQ(off.steps(), kSteps);
    off.flush();
    expect_values(b, w[kSteps], "after flush");
    // The inner AdamW counted every update but the skipped one.
    EXPECT_EQ(dynamic_cast<AdamW&>(off.inner(0)).applied_steps(), kSteps - 1);
  }
}

TEST(OffloadedOptimizerDelayedTest, FlushIsIdempotentAndNoOpWhenNothingPending) {
  const AdamWOptions o{.lr = 1e-2f};
  Params b(kSizes, 5);
  OffloadedOptimizer off(b.named(), adamw_factory(o), {.delayed_update = true});
  EXPECT_TRUE(off.delayed());
  EXPECT_NE(off.describe().find("one step stale"), std::string::npos) << off.describe();
  const auto initial = values_of(b);
  off.flush();  // nothing pending
  expect_values(b, initial, "flush before any step");
  set_quadratic_grads(b);
  off.step();
  expect_values(b, initial, "after step 1, before flush");
  off.flush();
  const auto flushed = values_of(b);
  bool changed = false;
  for (size_t i = 0; i < flushed.size(); ++i)
    changed = changed || stoker::test::raw_bytes(flushed[i]) != stoker::test::raw_bytes(initial[i]);
  EXPECT_TRUE(changed) << "flush did not apply the pending update";
  off.flush();
  expect_values(b, flushed, "second flush");
  // A step after a flush has nothing to apply: its gradients are taken at the flushed weights.
  off.zero_grad();
  set_quadratic_grads(b);
  off.step();
  expect_values(b, flushed, "step after flush");
}

TEST(OffloadedOptimizerDelayedTest, CheckpointAfterFlushRoundTrips) {
  const AdamWOptions o{.lr = 1e-2f, .weight_decay = 0.05f};
  const OffloadOptions d{.group_bytes = 8 << 10, .delayed_update = true};
  Params a(kSizes, 9);
  OffloadedOptimizer off(a.named(), adamw_factory(o), d);
  for (int t = 1; t <= 3; ++t) {
    set_quadratic_grads(a);
    off.step();
    off.zero_grad();
  }
  // checkpoint_state() flushes: weights and state of the same step.
  std::map<std::string, Tensor> saved;
  for (auto& [n, t] : off.checkpoint_state()) saved.emplace(n, t.clone());
  const auto weights = values_of(a);
  const int64_t steps = off.steps();

  Params b(kSizes, 1234);  // other weights, overwritten by the "checkpoint"
  for (size_t i = 0; i < b.ps.size(); ++i) stoker::ops::copy(b.ps[i]->value(), weights[i]);
  OffloadedOptimizer resumed(b.named(), adamw_factory(o), d);
  resumed.set_steps(steps);
  resumed.load_checkpoint_state([&](const std::string& n, stoker::Device) {
    EXPECT_TRUE(saved.count(n)) << n;
    return saved.at(n);
  });
  for (int t = 4; t <= 7; ++t) {
    set_quadratic_grads(a);
    set_quadratic_grads(b);
    off.set_lr(lr_at(t));
    resumed.set_lr(lr_at(t));
    off.step();
    resumed.step();
    off.zero_grad();
    resumed.zero_grad();
  }
  off.flush();
  resumed.flush();
  expect_same_params(a, b);
  expect_same_state(off, resumed);
}

// Weights written while an update is pending win: reload_values() drops that update.
TEST(OffloadedOptimizerDelayedTest, ReloadValuesDropsThePendingUpdate) {
  Params b({100, 37}, 1);
  OffloadedOptimizer off(b.named(), adamw_factory({}), {.delayed_update = true});
  set_quadratic_grads(b);
  off.step();  // update 1 pending
  const Tensor w = stoker::test::random_tensor({100}, DType::f32, 99);
  stoker::ops::copy(b.ps[0]->value(), w);
  const Tensor w1 = b.ps[1]->value().clone();
  off.reload_values();
  off.flush();  // nothing left to apply
  expect_same_bits(b.ps[0]->value(), w, "p0 after reload_values + flush");
  expect_same_bits(b.ps[1]->value(), w1, "p1 after reload_values + flush");
  // The next update starts from the written weights (one AdamW step moves by about lr).
  set_quadratic_grads(b);
  off.step();
  off.flush();
  const auto v = b.ps[0]->value().to_vector<float>();
  const auto wv = w.to_vector<float>();
  double moved = 0;
  for (size_t i = 0; i < v.size(); ++i) moved = std::max(moved, std::fabs(double(v[i]) - wv[i]));
  EXPECT_GT(moved, 0.0);
  EXPECT_LT(moved, 0.05) << "the update did not start from the written weights";
}

// An inner optimizer whose update number `fail_at` throws (counted from 1, over all calls) and
// whose updates take `sleep_ms`, to test the background's error path and the destructor.
struct Inject {
  std::atomic<int> fail_at{0}, sleep_ms{0}, calls{0}, done{0};
};
class FailingOptimizer : public Optimizer {
 public:
  FailingOptimizer(NamedParameters p, std::shared_ptr<Inject> inject)
      : Optimizer(std::move(p)), inject_(std::move(inject)) {}
  std::string describe() const override { return "FailingOptimizer"; }

 protected:
  void update() override {
    if (++inject_->calls == inject_->fail_at) throw std::runtime_error("injected failure");
    std::this_thread::sleep_for(std::chrono::milliseconds(inject_->sleep_ms.load()));
    ++inject_->done;
  }

 private:
  std::shared_ptr<Inject> inject_;
};

OffloadedOptimizer::Factory failing_factory(std::shared_ptr<Inject> inject) {
  return [inject](NamedParameters p) { return std::make_unique<FailingOptimizer>(p, inject); };
}

TEST(OffloadedOptimizerDelayedTest, BackgroundErrorIsRethrownByTheNextStepAndFlush) {
  auto inject = std::make_shared<Inject>();
  inject->fail_at = 2;
  Params b({100}, 3);  // one group: one inner update per step
  OffloadedOptimizer off(b.named(), failing_factory(inject), {.delayed_update = true});
  off.step();                   // update 1: fine
  EXPECT_NO_THROW(off.step());  // update 2 fails in the background: step() does not wait for it
  try {
    off.step();
    FAIL() << "the background failure was not rethrown";
  } catch (const stoker::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("offloaded"), std::string::npos) << what;
    EXPECT_NE(what.find("step 2"), std::string::npos) << what;
    EXPECT_NE(what.find("injected failure"), std::string::npos) << what;
  }
  // Reported once; the optimizer goes on (the throwing step() handed no update over).
  EXPECT_NO_THROW(off.step());  // update 3
  EXPECT_NO_THROW(off.flush());
  EXPECT_EQ(inject->done, 2);
  EXPECT_EQ(off.steps(), 3);
  // flush() rethrows too, once.
  inject->fail_at = 4;
  off.step();
  EXPECT_THROW(off.flush(), stoker::Error);
  EXPECT_NO_THROW(off.flush());
}

TEST(OffloadedOptimizerDelayedTest, DestructorWaitsForThePendingUpdateAndFreesEverything) {
  const auto before = stoker::core::pinned_memory_stats().current_bytes;
  auto inject = std::make_shared<Inject>();
  inject->sleep_ms = 200;
  {
    Params b(kSizes, 3);
    OffloadedOptimizer off(b.named(), failing_factory(inject), {.delayed_update = true});
    EXPECT_GT(stoker::core::pinned_memory_stats().current_bytes, before);
    off.step();
    EXPECT_EQ(inject->done, 0) << "step() waited for the update";
  }  // destroyed with update 1 pending
  EXPECT_EQ(inject->done, 1) << "the destructor did not wait for the pending update";
  EXPECT_EQ(stoker::core::pinned_memory_stats().current_bytes, before);
}

// fit() with a delayed offloaded optimizer ends with the weights flushed: equal to AdamW fed,
// at step t, the gradient of the model at the weights after update t-2.
TEST(OffloadedOptimizerDelayedTest, TrainerFitEndsWithFlushedWeights) {
  namespace nn = stoker::nn;
  constexpr int64_t kSteps = 9;
  const Tensor x = stoker::test::random_tensor({96, 16}, DType::f32, 1);
  const Tensor y = stoker::test::random_tensor({96, 4}, DType::f32, 2);
  const AdamWOptions o{.lr = 1e-2f};
  auto make_model = [] {
    nn::manual_seed(7);
    return std::make_unique<nn::Sequential>(nn::make<nn::Linear>(16, 32), nn::make<nn::ReLU>(),
                                            nn::make<nn::Linear>(32, 4));
  };
  // The trainer.
  auto model = make_model();
  OffloadedOptimizer off(model->named_parameters(), adamw_factory(o),
                         {.group_bytes = 1 << 10, .delayed_update = true});
  nn::MSELoss loss;
  stoker::train::Trainer trainer(*model, loss, off,
                                 {.progress_bar = false, .max_steps = kSteps, .quiet = true});
  stoker::data::TensorBatches batches(x, y, {.batch_size = 16, .seed = 3});
  trainer.fit(batches, 100);

  // The reference: `at` holds the weights after update t-2, `ref` those after update t-1.
  auto at = make_model(), ref = make_model();
  AdamW plain(ref->named_parameters(), o);
  nn::MSELoss ref_loss;
  stoker::data::TensorBatches ref_batches(x, y, {.batch_size = 16, .seed = 3});
  const auto pa = at->parameters(), pr = ref->parameters();
  int64_t t = 0;
  for (int64_t epoch = 0; t < kSteps; ++epoch) {
    ref_batches.start_epoch(epoch);
    stoker::data::Batch batch;
    while (t < kSteps && ref_batches.next(batch)) {
      const Tensor out = at->forward(batch.input);
      ref_loss.forward(out, batch.target);
      at->backward(ref_loss.backward(1.0f));
      std::vector<Tensor> before;
      for (size_t i = 0; i < pr.size(); ++i) {
        stoker::ops::copy(pr[i]->grad(), pa[i]->grad());
        before.push_back(pr[i]->value().clone());
      }
      plain.step();
      plain.zero_grad();
      for (size_t i = 0; i < pa.size(); ++i) {
        pa[i]->zero_grad();
        stoker::ops::copy(pa[i]->value(), before[i]);
        pa[i]->value_changed();
      }
      ++t;
    }
  }
  const auto pm = model->parameters();
  ASSERT_EQ(pm.size(), pr.size());
  for (size_t i = 0; i < pm.size(); ++i)
    expect_same_bits(pm[i]->value(), pr[i]->value(), "parameter " + std::to_string(i));
}

}  // namespace
