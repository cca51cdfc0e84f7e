// OffloadedOptimizer on a GPU: parameters on cuda:0, state and update on the CPU. The offloaded
// AdamW equals AdamW on the GPU bit for bit (the CPU loops and the GPU kernels share the
// arithmetic; f32 and bf16 state), through skipped steps (a device found_inf flag) and learning
// rate changes; compute copies are refreshed; the host waits once per group per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stoker/core/allocator.h"
#include "stoker/data/batch_source.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/optim/offloaded_optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::nn::Parameter;
using namespace stoker::optim;

namespace {

const std::vector<int64_t> kSizes = {1000, 37, 0, 70000, 3, 2048, 4099, 131072};

struct GpuParams {
  std::vector<std::unique_ptr<Parameter>> ps;
  explicit GpuParams(uint64_t seed) {
    for (size_t i = 0; i < kSizes.size(); ++i) {
      Tensor v = Tensor::empty({kSizes[i]}, DType::f32, Device::cuda(0));
      stoker::ops::random_normal(v, 0.0f, 1.0f, seed, i * 1000000);
      ps.push_back(std::make_unique<Parameter>(v));
    }
  }
  NamedParameters named() {
    NamedParameters out;
    for (size_t i = 0; i < ps.size(); ++i) out.emplace_back("p" + std::to_string(i), ps[i].get());
    return out;
  }
  void set_grads(int step) {
    for (size_t i = 0; i < ps.size(); ++i)
      stoker::ops::random_normal(ps[i]->grad(), 0.0f, 0.5f, 77 + static_cast<uint64_t>(step),
                                 i * 1000000);
  }
};

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  const auto x = stoker::test::raw_bytes(a), y = stoker::test::raw_bytes(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  ASSERT_TRUE(x == y) << what << " differs";
}

OffloadedOptimizer::Factory adamw_factory(const AdamWOptions& o) {
  return [o](NamedParameters p) { return std::make_unique<AdamW>(std::move(p), o); };
}

TEST(OffloadedOptimizerGpuTest, EqualsAdamWOnTheGpuBitForBit) {
  STOKER_REQUIRE_GPU();
  for (const StateDType dt : {StateDType::f32, StateDType::bf16}) {
    SCOPED_TRACE(testing::Message() << "state dtype " << static_cast<int>(dt));
    const AdamWOptions o{.lr = 1e-2f, .weight_decay = 0.1f, .state = {.dtype = dt}};
    GpuParams a(1), b(1);
    AdamW plain(a.named(), o);
    OffloadedOptimizer off(b.named(), adamw_factory(o), {.group_bytes = 64 << 10});
    ASSERT_GT(off.groups(), 2u);
    Tensor fa = Tensor::zeros({}, DType::f32, Device::cuda(0));
    Tensor fb = Tensor::zeros({}, DType::f32, Device::cuda(0));
    plain.set_found_inf(fa);
    off.set_found_inf(fb);
    for (int s = 0; s < 6; ++s) {
      a.set_grads(s);
      b.set_grads(s);
      stoker::ops::fill(fa, s == 2 ? 1.0 : 0.0);  // step 2 overflows: skipped on both
      stoker::ops::fill(fb, s == 2 ? 1.0 : 0.0);
      if (s == 3) {
        plain.set_lr(5e-3f);
        off.set_lr(5e-3f);
      }
      plain.step();
      off.step();
      plain.zero_grad();
      off.zero_grad();
    }
    for (size_t i = 0; i < a.ps.size(); ++i)
      expect_same_bits(a.ps[i]->value(), b.ps[i]->value(), "parameter p" + std::to_string(i));
    std::map<std::string, Tensor> offloaded;
    for (auto& [n, t] : off.state()) {
      EXPECT_TRUE(t.device().is_cpu()) << n;
      offloaded.emplace(n, t);
    }
    for (auto& [n, t] : plain.state()) {
      if (n == "step_state") continue;  // same count, compared below
      ASSERT_TRUE(offloaded.count(n)) << n;
      expect_same_bits(t, offloaded.at(n), "state " + n);
    }
    EXPECT_EQ(plain.applied_steps(), 5);
    EXPECT_EQ(dynamic_cast<AdamW&>(off.inner(0)).applied_steps(), 5);
  }
}

TEST(OffloadedOptimizerGpuTest, RefreshesHalfComputeCopiesAndWaitsOncePerGroup) {
  STOKER_REQUIRE_GPU();
  GpuParams b(2);
  for (auto& p : b.ps) p->compute_value(DType::bf16);  // mixed precision: half copies exist
  OffloadedOptimizer off(b.named(), adamw_factory({.lr = 1e-2f}), {.group_bytes = 64 << 10});
  b.set_grads(0);
  const uint64_t syncs = stoker::core::host_sync_count();
  off.step();
  EXPECT_EQ(stoker::core::host_sync_count() - syncs, off.groups());
  for (size_t i = 0; i < b.ps.size(); ++i) {
    Parameter& p = *b.ps[i];
    Tensor want = Tensor::empty(p.shape(), DType::bf16, Device::cuda(0));
    stoker::ops::cast(want, p.value());
    expect_same_bits(p.compute_copy(), want, "compute copy of p" + std::to_string(i));
  }
}

TEST(OffloadedOptimizerGpuTest, GpuCheckpointResumesOffloaded) {
  STOKER_REQUIRE_GPU();
  const AdamWOptions o{.lr = 1e-2f};
  GpuParams ref(3), a(3);
  AdamW ref_opt(ref.named(), o), plain(a.named(), o);
  for (int s = 0; s < 4; ++s) {
    ref.set_grads(s);
    ref_opt.step();
  }
  for (int s = 0; s < 2; ++s) {
    a.set_grads(s);
    plain.step();
  }
  std::map<std::string, Tensor> file;
  for (auto& [n, t] : plain.checkpoint_state()) file.emplace(n, t.to(Device::cpu()));
  OffloadedOptimizer resumed(a.named(), adamw_factory(o), {.group_bytes = 64 << 10});
  resumed.load_checkpoint_state([&](const std::string& n, Device d) { return file.at(n).to(d); });
  resumed.set_steps(plain.steps());
  for (int s = 2; s < 4; ++s) {
    a.set_grads(s);
    resumed.step();
  }
  for (size_t i = 0; i < a.ps.size(); ++i)
    expect_same_bits(ref.ps[i]->value(), a.ps[i]->value(), "parameter p" + std::to_string(i));
}

// The Trainer's memory report counts offloaded state as host memory, not as device memory.
TEST(OffloadedOptimizerGpuTest, MemoryReportShowsOffloadedStateAsHostMemory) {
  STOKER_REQUIRE_GPU();
  namespace nn = stoker::nn;
  nn::Sequential model(nn::make<nn::Linear>(64, 128), nn::make<nn::ReLU>(),
                       nn::make<nn::Linear>(128, 32));
  model.to(Device::cuda(0));
  nn::MSELoss loss;
  OffloadedOptimizer off(model.named_parameters(), adamw_factory({}));
  stoker::train::Trainer trainer(model, loss, off, {.progress_bar = false, .quiet = true});
  const stoker::train::MemoryReport r = trainer.memory_report();
  EXPECT_EQ(r.optimizer_state, 0u);
  EXPECT_EQ(r.optimizer_state_host, off.state_bytes());
  EXPECT_GT(r.optimizer_state_host, 2u * 4u * (64 * 128 + 128 * 32));
  const std::string text = stoker::train::format_memory_report(r);
  EXPECT_NE(text.find("offloaded to host memory"), std::string::npos) << text;

  AdamW plain(model.named_parameters(), {});
  stoker::train::Trainer on_device(model, loss, plain, {.progress_bar = false, .quiet = true});
  const stoker::train::MemoryReport d = on_device.memory_report();
  EXPECT_EQ(d.optimizer_state, plain.state_bytes());
  EXPECT_EQ(d.optimizer_state_host, 0u);
}

// A real fp16 Trainer step (GradScaler found_inf on the device, clipping of the device
// gradients): the first steps overflow at an initial scale of 2^28 and are skipped; offloaded
// training equals training with AdamW on the GPU bit for bit, skips included.
TEST(OffloadedOptimizerGpuTest, Fp16TrainerWithOverflowsEqualsOnGpuAdamW) {
  STOKER_REQUIRE_GPU();
  namespace nn = stoker::nn;
  const Device gpu = Device::cuda(0);
  Tensor x = Tensor::empty({128, 64}, DType::f32, gpu);
  Tensor y = Tensor::empty({128, 16}, DType::f32, gpu);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 11, 0);
  stoker::ops::random_normal(y, 0.0f, 1.0f, 12, 0);
  const std::vector<stoker::data::Batch> batches{{.input = x, .target = y, .size = 128}};
  struct Run {
    std::vector<std::vector<uint8_t>> weights;
    int64_t applied = 0;
    float scale = 0;
  };
  auto run = [&](bool offload) {
    nn::manual_seed(7);
    nn::Sequential model(nn::make<nn::Linear>(64, 256), nn::make<nn::GELU>(),
                         nn::make<nn::Linear>(256, 16));
    model.to(gpu);
    const AdamWOptions o{.lr = 1e-3f};
    std::unique_ptr<Optimizer> opt;
    if (offload)
      opt = std::make_unique<OffloadedOptimizer>(model.named_parameters(), adamw_factory(o),
                                                 OffloadOptions{.group_bytes = 16 << 10});
    else
      opt = std::make_unique<AdamW>(model.named_parameters(), o);
    nn::MSELoss loss;
    stoker::train::Trainer t(model, loss, *opt,
                             {.precision = stoker::amp::Precision::fp16,
                              .scaler = {.init_scale = 268435456.0f, .growth_interval = 1000},
                              .clip_grad_norm = 0.5f,
                              .progress_bar = false,
                              .quiet = true});
    for (int s = 0; s < 12; ++s) t.train_step(batches);
    Run r;
    for (nn::Parameter* p : model.parameters())
      r.weights.push_back(stoker::test::raw_bytes(p->value()));
    r.applied =
        offload
            ? dynamic_cast<AdamW&>(dynamic_cast<OffloadedOptimizer&>(*opt).inner(0)).applied_steps()
            : dynamic_cast<AdamW&>(*opt).applied_steps();
    r.scale = t.scaler()->scale_value();
    return r;
  };
  const Run plain = run(false), off = run(true);
  EXPECT_LT(plain.applied, 12) << "no step overflowed: raise init_scale";
  EXPECT_GT(plain.applied, 0);
  EXPECT_EQ(plain.applied, off.applied);
  EXPECT_EQ(plain.scale, off.scale);
  ASSERT_EQ(plain.weights.size(), off.weights.size());
  for (size_t i = 0; i < plain.weights.size(); ++i)
    EXPECT_TRUE(plain.weights[i] == off.weights[i]) << "parameter " << i;
}

// ---- Delayed parameter update (OffloadOptions::delayed_update) ----

// The gradient of a quadratic loss at the parameters' current values, on the device (current
// stream, no host sync): g = 1.5 w - c with a fixed random c per parameter.
struct Quadratic {
  std::vector<Tensor> c;
  explicit Quadratic(GpuParams& p) {
    for (size_t i = 0; i < p.ps.size(); ++i) {
      c.push_back(Tensor::empty(p.ps[i]->shape(), DType::f32, Device::cuda(0)));
      stoker::ops::random_normal(c.back(), 0.0f, 1.0f, 4242, i * 1000000);
    }
  }
  void set_grads(GpuParams& p) const {
    for (size_t i = 0; i < p.ps.size(); ++i) {
      const Tensor& g = p.ps[i]->grad();
      stoker::ops::copy(g, p.ps[i]->value());
      stoker::ops::scale(g, 1.5f);
      stoker::ops::axpy(g, -1.0f, c[i]);
    }
  }
};

float delayed_lr(int t) { return 1e-2f * (1.0f - 0.05f * static_cast<float>(t)); }

std::vector<std::vector<uint8_t>> bytes_of(GpuParams& p) {
  std::vector<std::vector<uint8_t>> out;
  for (auto& q : p.ps) out.push_back(stoker::test::raw_bytes(q->value()));
  return out;
}

// Delayed offload on the GPU equals AdamW on the GPU fed, at step t, the gradient at the weights
// after update t-2, bit for bit; the found_inf flag and lr are those of step t even though they
// change right after step() returns; after flush() the half compute copies match the weights.
TEST(OffloadedOptimizerGpuTest, DelayedEqualsAdamWWithOneStepStaleGradients) {
  STOKER_REQUIRE_GPU();
  constexpr int kSteps = 7, kSkip = 3;
  const Device gpu = Device::cuda(0);
  for (const bool check_every_step : {true, false}) {
    for (const StateDType dt : {StateDType::f32, StateDType::bf16}) {
      SCOPED_TRACE(testing::Message() << "state dtype " << static_cast<int>(dt)
                                      << (check_every_step ? ", checked every step" : ""));
      const AdamWOptions o{.lr = 1e-2f, .weight_decay = 0.1f, .state = {.dtype = dt}};
      // Reference: `at` holds the weights after update t-2, `ref` after update t-1.
      GpuParams at(5), ref(5);
      const Quadratic q(ref);
      AdamW plain(ref.named(), o);
      Tensor fr = Tensor::zeros({}, DType::f32, gpu);
      plain.set_found_inf(fr);
      std::vector<std::vector<std::vector<uint8_t>>> w{bytes_of(ref)};
      for (int t = 1; t <= kSteps; ++t) {
        q.set_grads(at);
        for (size_t i = 0; i < at.ps.size(); ++i) {
          stoker::ops::copy(ref.ps[i]->grad(), at.ps[i]->grad());
          stoker::ops::copy(at.ps[i]->value(), ref.ps[i]->value());
        }
        stoker::ops::fill(fr, t == kSkip ? 1.0 : 0.0);
        plain.set_lr(delayed_lr(t));
        plain.step();
        plain.zero_grad();
        w.push_back(bytes_of(ref));
      }

      GpuParams b(5);
      for (auto& p : b.ps) p->compute_value(DType::bf16);  // mixed precision: half copies
      OffloadedOptimizer off(b.named(), adamw_factory(o),
                             {.group_bytes = 64 << 10, .delayed_update = true});
      ASSERT_GT(off.groups(), 2u);
      Tensor fb = Tensor::zeros({}, DType::f32, gpu);
      off.set_found_inf(fb);
      for (int t = 1; t <= kSteps; ++t) {
        if (check_every_step) {
          EXPECT_TRUE(bytes_of(b) == w[static_cast<size_t>(std::max(0, t - 2))])
              << "before step " << t << ": not the weights after update " << t - 2;
        }
        q.set_grads(b);
        stoker::ops::fill(fb, t == kSkip ? 1.0 : 0.0);
        off.set_lr(delayed_lr(t));
        off.step();
        // Stream-ordered after step(): update t must not see these.
        stoker::ops::fill(fb, t == kSkip ? 0.0 : 1.0);
        off.set_lr(123.0f);
        off.zero_grad();
        b.set_grads(100 + t);  // the next backward writes the gradients at once
      }
      off.flush();
      off.flush();  // idempotent
      EXPECT_TRUE(bytes_of(b) == w[kSteps]) << "after flush: not the weights after the last update";
      for (size_t i = 0; i < b.ps.size(); ++i) {
        Parameter& p = *b.ps[i];
        Tensor want = Tensor::empty(p.shape(), DType::bf16, gpu);
        stoker::ops::cast(want, p.value());
        expect_same_bits(p.compute_copy(), want, "compute copy of p" + std::to_string(i));
      }
      std::map<std::string, Tensor> offloaded;
      for (auto& [n, t] : off.state()) offloaded.emplace(n, t);
      for (auto& [n, t] : plain.state()) {
        if (n == "step_state") continue;
        ASSERT_TRUE(offloaded.count(n)) << n;
        expect_same_bits(t, offloaded.at(n), "state " + n);
      }
      EXPECT_EQ(plain.applied_steps(), kSteps - 1);
      EXPECT_EQ(dynamic_cast<AdamW&>(off.inner(0)).applied_steps(), kSteps - 1);
    }
  }
}

// A checkpoint written after a flush (device weights + host state) resumes a delayed run on the
// GPU: the resumed run equals the uninterrupted one (which flushed at the same step).
TEST(OffloadedOptimizerGpuTest, DelayedCheckpointAfterFlushRoundTrips) {
  STOKER_REQUIRE_GPU();
  const AdamWOptions o{.lr = 1e-2f};
  const OffloadOptions d{.group_bytes = 64 << 10, .delayed_update = true};
  GpuParams a(8), b(9);
  const Quadratic q(a);
  OffloadedOptimizer off(a.named(), adamw_factory(o), d);
  for (int t = 1; t <= 3; ++t) {
    q.set_grads(a);
    off.step();
    off.zero_grad();
  }
  std::map<std::string, Tensor> file;
  for (auto& [n, t] : off.checkpoint_state()) file.emplace(n, t.clone());  // flushes
  for (size_t i = 0; i < a.ps.size(); ++i) stoker::ops::copy(b.ps[i]->value(), a.ps[i]->value());
  OffloadedOptimizer resumed(b.named(), adamw_factory(o), d);
  resumed.set_steps(off.steps());
  resumed.load_checkpoint_state(
      [&](const std::string& n, Device dev) { return file.at(n).to(dev); });
  for (int t = 4; t <= 6; ++t) {
    q.set_grads(a);
    q.set_grads(b);
    off.step();
    resumed.step();
    off.zero_grad();
    resumed.zero_grad();
  }
  off.flush();
  resumed.flush();
  for (size_t i = 0; i < a.ps.size(); ++i)
    expect_same_bits(a.ps[i]->value(), b.ps[i]->value(), "parameter p" + std::to_string(i));
}

// A delayed optimizer destroyed with an update in flight (large parameters: the update is still
// running) waits for it and returns; its pinned memory goes back to the pool.
TEST(OffloadedOptimizerGpuTest, DelayedDestructorWithAPendingUpdate) {
  STOKER_REQUIRE_GPU();
  const auto before = stoker::core::pinned_memory_stats().current_bytes;
  {
    Parameter p(Tensor::empty({int64_t{16} << 20}, DType::f32, Device::cuda(0)));
    stoker::ops::random_normal(p.value(), 0.0f, 1.0f, 1, 0);
    stoker::ops::random_normal(p.grad(), 0.0f, 1.0f, 2, 0);
    OffloadedOptimizer off({{"p", &p}}, adamw_factory({}), {.delayed_update = true});
    off.step();
  }
  EXPECT_EQ(stoker::core::pinned_memory_stats().current_bytes, before);
}

}  // namespace
