#include "stoker/amp/precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "stoker/nn/module.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "test_util.h"

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::amp::GradScaler;

namespace {

std::vector<float> bits_of(const Tensor& t) { return t.to_vector<float>(); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A parameter, AdamW and a scaler; each step feeds grad = scale * g (g random, or with an Inf
// at the steps in `overflow_at`), exactly as a scaled backward pass would.
struct Loop {
  stoker::nn::Parameter p;
  stoker::optim::AdamW opt;
  GradScaler scaler;
  Loop(Device d, stoker::amp::GradScalerOptions o)
      : p(Tensor::from_floats(std::vector<float>(1000, 0.5f), {1000}, DType::f32, d)),
        opt({{"w", &p}}, {.lr = 1e-2f}),
        scaler(d, o) {
    opt.set_found_inf(scaler.found_inf());
  }
  void step(int s, bool overflow) {
    Tensor g = Tensor::empty({1000}, DType::f32);
    stoker::ops::random_normal(g, 0.0f, 1.0f, 7, static_cast<uint64_t>(s) * 1000);
    std::vector<float> v = g.to_vector<float>();
    const float scale = scaler.scale_value();
    for (float& x : v) x *= scale;
    if (overflow) v[123] = INFINITY;
    stoker::ops::copy(p.grad(), Tensor::from_floats(v, {1000}, DType::f32, p.device()));
    const std::vector<Tensor> grads{p.grad()};
    scaler.unscale(grads);
    opt.step();
    scaler.update();
  }
};

TEST(GradScalerTest, PyTorchDefaults) {
  GradScaler s(Device::cpu());
  EXPECT_EQ(s.scale_value(), 65536.0f);
  EXPECT_EQ(s.options().growth_interval, 2000);
  EXPECT_EQ(s.options().growth_factor, 2.0f);
  EXPECT_EQ(s.options().backoff_factor, 0.5f);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScalerTest, OverflowSkipsTheStepBitForBitAndHalvesTheScale) {
  Loop l(Device::cpu(), {.init_scale = 1024.0f, .growth_interval = 3});
  l.step(0, false);
  l.step(1, false);
  EXPECT_EQ(l.scaler.growth_tracker(), 2);
  const auto w = bits_of(l.p.value());
  const auto m = bits_of(l.opt.state()[0].second), v = bits_of(l.opt.state()[1].second);
  l.step(2, /*overflow=*/true);
  EXPECT_EQ(l.scaler.found_inf().item(), 1.0);
  EXPECT_TRUE(same_bits(w, bits_of(l.p.value()))) << "weights changed on an overflow step";
  EXPECT_TRUE(same_bits(m, bits_of(l.opt.state()[0].second)));
  EXPECT_TRUE(same_bits(v, bits_of(l.opt.state()[1].second)));
  EXPECT_EQ(l.scaler.scale_value(), 512.0f);
  EXPECT_EQ(l.scaler.growth_tracker(), 0);
  // Three clean steps later the scale doubles, and the weights move again.
  l.step(3, false);
  EXPECT_FALSE(same_bits(w, bits_of(l.p.value())));
  l.step(4, false);
  EXPECT_EQ(l.scaler.scale_value(), 512.0f);
  l.step(5, false);
  EXPECT_EQ(l.scaler.scale_value(), 1024.0f);
  EXPECT_EQ(l.scaler.growth_tracker(), 0);
  EXPECT_NO_THROW(l.scaler.check());
}

TEST(GradScalerTest, UnscaleIsExactForPowerOfTwoScalesAndFlagsNaN) {
  GradScaler s(Device::cpu(), {.init_scale = 256.0f});
  Tensor a = Tensor::empty({4097}, DType::f32), b = Tensor::empty({3}, DType::f32);
  stoker::ops::random_normal(a, 0.0f, 100.0f, 1, 0);
  stoker::ops::random_normal(b, 0.0f, 100.0f, 2, 0);
  const auto a0 = a.to_vector<float>(), b0 = b.to_vector<float>();
  const std::vector<Tensor> grads{a, b};
  s.unscale(grads);
  EXPECT_EQ(s.found_inf().item(), 0.0);
  const auto a1 = a.to_vector<float>();
  for (size_t i = 0; i < a0.size(); ++i) ASSERT_EQ(a1[i], a0[i] / 256.0f);
  b.data<float>()[1] = NAN;
  s.unscale(grads);
  EXPECT_EQ(s.found_inf().item(), 1.0);
  s.unscale(std::vector<Tensor>{a});  // found_inf is cleared by each unscale
  EXPECT_EQ(s.found_inf().item(), 0.0);
}

TEST(GradScalerTest, HysteresisToleratesOverflowsBeforeBackingOff) {
  Loop l(Device::cpu(), {.init_scale = 64.0f, .growth_interval = 100, .hysteresis = 2});
  l.step(0, true);
  EXPECT_EQ(l.scaler.scale_value(), 64.0f);  // first overflow: skipped, scale kept
  l.step(1, true);
  EXPECT_EQ(l.scaler.scale_value(), 32.0f);  // second: backs off
  l.step(2, true);
  EXPECT_EQ(l.scaler.scale_value(), 16.0f);  // hysteresis is refilled only by growth
}

TEST(GradScalerTest, ScaleAtMinimumStopsWithAClearMessage) {
  Loop l(Device::cpu(), {.init_scale = 4.0f, .min_scale = 1.0f});
  for (int s = 0; s < 3; ++s) l.step(s, true);
  EXPECT_EQ(l.scaler.scale_value(), 1.0f);
  try {
    l.scaler.check();
    FAIL() << "minimum scale not reported";
  } catch (const stoker::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fell to its minimum (1)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;  // the hint
  }
}

TEST(GradScalerTest, StateRoundTripAndBadOptions) {
  Loop a(Device::cpu(), {.init_scale = 128.0f, .growth_interval = 5});
  a.step(0, false);
  a.step(1, true);
  GradScaler b(Device::cpu());
  b.load_state(a.scaler.state());
  EXPECT_EQ(b.scale_value(), 64.0f);
  EXPECT_EQ(b.growth_tracker(), 0);
  EXPECT_THROW(b.load_state({}), stoker::Error);
  EXPECT_THROW(GradScaler(Device::cpu(), {.backoff_factor = 1.5f}), stoker::Error);
  EXPECT_THROW(GradScaler(Device::cpu(), {.growth_factor = 1.0f}), stoker::Error);
  EXPECT_THROW(GradScaler(Device::cpu(), {.init_scale = 0.5f, .min_scale = 1.0f}), stoker::Error);
  const Tensor half_grad = Tensor::zeros({4}, DType::f16);
  EXPECT_THROW(b.unscale(std::vector<Tensor>{half_grad}), stoker::Error);
}

}  // namespace
