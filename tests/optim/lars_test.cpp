// optim::LARS (and ops::lars_step) on the CPU against updates computed here, in double, from
// the formulas of MLPerf's reference: the trust ratio of adapted weights, plain momentum SGD for
// excluded ones, zero norms, found_inf, state round trips and option errors.
#include "stoker/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "test_util.h"

using stoker::DType;
using stoker::Shape;
using stoker::Tensor;
using stoker::nn::Parameter;
using stoker::test::throws_error_with;
using namespace stoker::optim;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, float std = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  stoker::ops::random_normal(t, 0.0f, std, seed, 0);
  return t;
}

std::vector<double> as_double(const Tensor& t) {
  const auto f = t.to_floats();
  return {f.begin(), f.end()};
}

// One LARS step of one tensor, in double, written from the reference's formulas.
struct RefLars {
  double momentum = 0.9, wd = 0.0, eta = 0.001, eps = 0.0;
  void step(std::vector<double>& w, std::vector<double>& v, const std::vector<double>& g,
            bool adapted, double lr) const {
    if (v.empty()) v.assign(w.size(), 0.0);
    double rate = lr, decay = 0.0;
    if (adapted) {
      double ww = 0.0, gg = 0.0;
      for (size_t i = 0; i < w.size(); ++i) ww += w[i] * w[i], gg += g[i] * g[i];
      const double wn = std::sqrt(ww), gn = std::sqrt(gg);
      const double trust = wn > 0.0 && gn > 0.0 ? eta * wn / (gn + wd * wn + eps) : 1.0;
      rate = lr * trust;
      decay = wd;
    }
    for (size_t i = 0; i < w.size(); ++i) {
      v[i] = momentum * v[i] + rate * (g[i] + decay * w[i]);
      w[i] -= v[i];
    }
  }
};

void expect_close(const std::vector<double>& ref, const Tensor& got, double rtol,
                  const std::string& what) {
  const auto g = got.to_floats();
  ASSERT_EQ(g.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g[i])) << what << "[" << i << "]";
    ASSERT_NEAR(g[i], ref[i], rtol * (std::fabs(ref[i]) + 1.0)) << what << "[" << i << "]";
  }
}

Tensor state_of(LARS& opt, const std::string& name) {
  for (const auto& [n, t] : opt.state())
    if (n == name) return t;
  ADD_FAILURE() << "no state " << name;
  return {};
}

// Numbers chosen so that the step is exact in decimal: ||w|| = 5, ||g|| = 1,
// trust = 0.001 * 5 / (1 + 0.01 * 5) = 0.005 / 1.05, and g + 0.01 w = (0.63, 0.84) = 1.05 *
// (0.6, 0.8): v = (0.003, 0.004). The bias (excluded): v = lr * g, no decay.
TEST(LarsTest, FirstStepMatchesHandComputedValues) {
  Parameter w(Tensor::from_floats({3.0f, 4.0f}, {1, 2}));
  Parameter b(Tensor::from_floats({1.0f, -2.0f}, {2}));
  stoker::ops::copy(w.grad(), Tensor::from_floats({0.6f, 0.8f}, {1, 2}));
  stoker::ops::copy(b.grad(), Tensor::from_floats({0.5f, 0.25f}, {2}));
  LARS opt({{"fc.weight", &w}, {"fc.bias", &b}},
           {.lr = 1.0f, .momentum = 0.9f, .weight_decay = 0.01f, .eta = 0.001f});
  EXPECT_TRUE(opt.adapted("fc.weight"));
  EXPECT_FALSE(opt.adapted("fc.bias"));
  opt.step();
  const auto wv = w.value().to_floats(), bv = b.value().to_floats();
  EXPECT_NEAR(wv[0], 2.997, 1e-6);
  EXPECT_NEAR(wv[1], 3.996, 1e-6);
  EXPECT_FLOAT_EQ(bv[0], 0.5f);
  EXPECT_FLOAT_EQ(bv[1], -2.25f);
  const auto wm = state_of(opt, "fc.weight.momentum").to_floats();
  EXPECT_NEAR(wm[0], 0.003, 1e-7);
  EXPECT_NEAR(wm[1], 0.004, 1e-7);
  EXPECT_EQ(state_of(opt, "fc.bias.momentum").to_floats(), (std::vector<float>{0.5f, 0.25f}));

  // Second step, same gradients: ||w'|| = sqrt(2.997^2 + 3.996^2) = 4.995, and the momentum
  // carries 0.9 of the first step.
  opt.step();
  const double wn = 4.995, trust = 0.001 * wn / (1.0 + 0.01 * wn);
  const double v0 = 0.9 * 0.003 + trust * (0.6 + 0.01 * 2.997);
  const double v1 = 0.9 * 0.004 + trust * (0.8 + 0.01 * 3.996);
  EXPECT_NEAR(w.value().to_floats()[0], 2.997 - v0, 1e-6);
  EXPECT_NEAR(w.value().to_floats()[1], 3.996 - v1, 1e-6);
  // The bias: v = 0.9 * 0.5 + 0.5 = 0.95 and 0.9 * 0.25 + 0.25 = 0.475.
  EXPECT_NEAR(b.value().to_floats()[0], 0.5 - 0.95, 1e-6);
  EXPECT_NEAR(b.value().to_floats()[1], -2.25 - 0.475, 1e-6);
  EXPECT_EQ(opt.steps(), 2);
}

// Several parameters (a linear weight, its bias, a convolution filter, a large weight that the
// CPU reduces and updates in parallel chunks), several steps with a changing learning rate: the
// momentum accumulates lr-scaled steps as the reference's does.
TEST(LarsTest, MatchesDoubleReferenceOverSeveralSteps) {
  struct P {
    std::string name;
    Shape shape;
  };
  const std::vector<P> specs = {{"fc.weight", {37, 29}},
                                {"fc.bias", {37}},
                                {"conv.weight", {8, 3, 3, 3}},
                                {"big.weight", {7, 10001}},
                                {"bn.weight", {8}}};
  std::vector<std::unique_ptr<Parameter>> params;
  NamedParameters named;
  for (size_t i = 0; i < specs.size(); ++i) {
    params.push_back(std::make_unique<Parameter>(random_tensor(specs[i].shape, 10 + i, 0.5f)));
    named.emplace_back(specs[i].name, params.back().get());
  }
  const LarsOptions o{.lr = 2.0f, .momentum = 0.9f, .weight_decay = 5e-4f, .eta = 0.02f};
  LARS opt(named, o);
  const RefLars ref{.momentum = 0.9, .wd = 5e-4, .eta = 0.02};
  std::vector<std::vector<double>> w, v(specs.size());
  for (const auto& p : params) w.push_back(as_double(p->value()));
  for (int s = 0; s < 5; ++s) {
    const float lr = 2.0f / static_cast<float>(s + 1);
    opt.set_lr(lr);
    for (size_t i = 0; i < specs.size(); ++i) {
      const Tensor g = random_tensor(specs[i].shape, 100 + 10 * s + i, s == 2 ? 1e-3f : 1.0f);
      stoker::ops::copy(params[i]->grad(), g);
      ref.step(w[i], v[i], as_double(g), specs[i].shape.rank() > 1, lr);
    }
    opt.step();
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    expect_close(w[i], params[i]->value(), 2e-5, specs[i].name);
    expect_close(v[i], state_of(opt, specs[i].name + ".momentum"), 2e-5, specs[i].name + " v");
  }
  EXPECT_EQ(opt.adapted_count(), 3);
  EXPECT_EQ(opt.trainable_count(), 5);
}

// An excluded parameter is momentum SGD without weight decay: with a constant learning rate
// LARS's v = lr * SGD's buffer (PyTorch's form), so the weights agree with optim::SGD's to float
// rounding, and LARS's weight decay does not touch them at all.
TEST(LarsTest, ExcludedParametersAreMomentumSgdWithoutDecay) {
  const Tensor init = random_tensor({513}, 3);
  Parameter a(Tensor::empty({513}, DType::f32)), b(Tensor::empty({513}, DType::f32)),
      c(Tensor::empty({513}, DType::f32));
  for (Parameter* p : {&a, &b, &c}) stoker::ops::copy(p->value(), init);
  LARS decayed({{"bias", &a}}, {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.1f});
  LARS plain({{"bias", &b}}, {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f});
  SGD sgd({{"bias", &c}}, {.lr = 0.05f, .momentum = 0.9f});
  EXPECT_FALSE(decayed.adapted("bias"));
  for (int s = 0; s < 4; ++s) {
    const Tensor g = random_tensor({513}, 20 + s);
    for (Parameter* p : {&a, &b, &c}) stoker::ops::copy(p->grad(), g);
    decayed.step();
    plain.step();
    sgd.step();
  }
  EXPECT_TRUE(stoker::test::bit_identical(a.value(), b.value()));
  expect_close(as_double(c.value()), a.value(), 1e-6, "bias vs SGD");
  EXPECT_FALSE(stoker::test::bit_identical(a.value(), init)) << "the step must move it";
}

// The exclusion rule is an option: empty adapts every parameter (a 1-D one then gets the trust
// ratio and the decay), a predicate by name excludes a 2-D one.
TEST(LarsTest, ExclusionRuleIsAnOption) {
  Parameter w(random_tensor({6, 5}, 4)), b(random_tensor({6}, 5));
  LARS all({{"w", &w}, {"b", &b}}, {.exclude = {}});
  EXPECT_TRUE(all.adapted("w"));
  EXPECT_TRUE(all.adapted("b"));
  LARS by_name({{"w", &w}, {"b", &b}},
               {.exclude = [](const std::string& name, const Parameter&) { return name == "w"; }});
  EXPECT_FALSE(by_name.adapted("w"));
  EXPECT_TRUE(by_name.adapted("b"));
  EXPECT_TRUE(throws_error_with([&] { (void)by_name.adapted("x"); }, {"'x'"}));

  // The 1-D parameter adapted: its step is the reference's adapted step.
  Parameter v(Tensor::from_floats({1.0f, 2.0f, -2.0f}, {3}));
  stoker::ops::copy(v.grad(), Tensor::from_floats({0.3f, -0.1f, 0.2f}, {3}));
  LARS opt({{"v", &v}}, {.lr = 3.0f, .weight_decay = 0.01f, .eta = 0.01f, .exclude = {}});
  std::vector<double> rw = as_double(v.value()), rv;
  RefLars{.momentum = 0.9, .wd = 0.01, .eta = 0.01}.step(rw, rv, as_double(v.grad()), true, 3.0);
  opt.step();
  expect_close(rw, v.value(), 1e-6, "adapted 1-D");
}

// A zero weight (a layer initialised to zero, as zero_init_residual's last batch-norm gammas) or
// a zero gradient gives trust 1, not a NaN: v = lr * (g + wd * w).
TEST(LarsTest, ZeroNormsGiveTrustOne) {
  Parameter zero_w(Tensor::zeros({2, 3}, DType::f32));
  Parameter zero_g(Tensor::from_floats({1.0f, -2.0f, 0.5f, 4.0f, 0.0f, -1.0f}, {2, 3}));
  const std::vector<float> g = {0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.6f};
  stoker::ops::copy(zero_w.grad(), Tensor::from_floats(g, {2, 3}));
  stoker::ops::fill(zero_g.grad(), 0.0);
  LARS opt({{"zero_w", &zero_w}, {"zero_g", &zero_g}},
           {.lr = 0.5f, .momentum = 0.9f, .weight_decay = 0.1f, .eta = 0.001f});
  opt.step();
  const auto a = zero_w.value().to_floats();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(a[i], -0.5f * g[i]) << i;
  const std::vector<float> w0 = {1.0f, -2.0f, 0.5f, 4.0f, 0.0f, -1.0f};
  const auto b = zero_g.value().to_floats();
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_FLOAT_EQ(b[i], w0[i] - 0.5f * 0.1f * w0[i]) << i;
}

// An overflowed step (the scaler's found_inf set) changes neither weights nor momentum, bit for
// bit; the next clean step updates again.
TEST(LarsTest, FoundInfSkipsTheStep) {
  Parameter w(random_tensor({17, 9}, 6)), b(random_tensor({17}, 7));
  LARS opt({{"w", &w}, {"b", &b}}, {.lr = 1.0f, .eta = 0.01f});
  stoker::ops::copy(w.grad(), random_tensor({17, 9}, 8));
  stoker::ops::copy(b.grad(), random_tensor({17}, 9));
  opt.step();  // a real step: non-zero momentum
  const Tensor flag = Tensor::from_floats({1.0f}, {});
  opt.set_found_inf(flag);
  const Tensor w0 = w.value().to(stoker::Device::cpu()), b0 = b.value().to(stoker::Device::cpu());
  const Tensor m0 = state_of(opt, "w.momentum").to(stoker::Device::cpu());
  stoker::ops::fill(w.grad(), stoker::test::kInf);
  stoker::ops::copy(b.grad(), random_tensor({17}, 10));
  opt.step();
  EXPECT_TRUE(stoker::test::bit_identical(w.value(), w0));
  EXPECT_TRUE(stoker::test::bit_identical(b.value(), b0));
  EXPECT_TRUE(stoker::test::bit_identical(state_of(opt, "w.momentum"), m0));
  EXPECT_EQ(opt.steps(), 2);  // calls to step(), as for SGD
  stoker::ops::fill(flag, 0.0);
  stoker::ops::copy(w.grad(), random_tensor({17, 9}, 11));
  opt.step();
  EXPECT_FALSE(stoker::test::bit_identical(w.value(), w0));
  EXPECT_FALSE(stoker::test::bit_identical(state_of(opt, "w.momentum"), m0));
}

// state() names "<param>.momentum"; a second optimizer loaded from it continues bit for bit.
// An SGD checkpoint ("momentum_buffer", lr-free) is refused.
TEST(LarsTest, StateRoundTripContinuesBitForBit) {
  Parameter w1(random_tensor({11, 4}, 12)), b1(random_tensor({11}, 13));
  LARS a({{"w", &w1}, {"b", &b1}}, {.lr = 0.7f, .eta = 0.01f});
  stoker::ops::copy(w1.grad(), random_tensor({11, 4}, 14));
  stoker::ops::copy(b1.grad(), random_tensor({11}, 15));
  a.step();
  const auto st = a.state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "w.momentum");
  EXPECT_EQ(st[1].first, "b.momentum");

  Parameter w2(Tensor::empty({11, 4}, DType::f32)), b2(Tensor::empty({11}, DType::f32));
  stoker::ops::copy(w2.value(), w1.value());
  stoker::ops::copy(b2.value(), b1.value());
  LARS b({{"w", &w2}, {"b", &b2}}, {.lr = 0.7f, .eta = 0.01f});
  b.load_state(st);
  for (int s = 0; s < 2; ++s) {
    const Tensor gw = random_tensor({11, 4}, 16 + s), gb = random_tensor({11}, 18 + s);
    stoker::ops::copy(w1.grad(), gw);
    stoker::ops::copy(w2.grad(), gw);
    stoker::ops::copy(b1.grad(), gb);
    stoker::ops::copy(b2.grad(), gb);
    a.step();
    b.step();
  }
  EXPECT_TRUE(stoker::test::bit_identical(w1.value(), w2.value()));
  EXPECT_TRUE(stoker::test::bit_identical(b1.value(), b2.value()));
  EXPECT_EQ(a.state_bytes(), static_cast<size_t>((44 + 11) * 4));

  SGD sgd({{"w", &w1}, {"b", &b1}}, {.momentum = 0.9f});
  EXPECT_TRUE(throws_error_with([&] { b.load_state(sgd.state()); },
                                {"'w.momentum' missing from the checkpoint"}));
}

TEST(LarsTest, FrozenParametersAreNotTouched) {
  Parameter a(random_tensor({4, 4}, 21)), frozen(random_tensor({4, 4}, 22));
  frozen.requires_grad = false;
  LARS opt({{"a", &a}, {"frozen", &frozen}}, {.lr = 1.0f});
  stoker::ops::fill(a.grad(), 1.0);
  stoker::ops::fill(frozen.grad(), 1.0);
  const Tensor before = frozen.value().to(stoker::Device::cpu());
  opt.step();
  EXPECT_TRUE(stoker::test::bit_identical(frozen.value(), before));
  ASSERT_EQ(opt.state().size(), 1u);
  EXPECT_EQ(opt.state()[0].first, "a.momentum");
  EXPECT_EQ(opt.trainable_count(), 1);
  EXPECT_NE(opt.describe().find("1 of 1 parameters adapted"), std::string::npos) << opt.describe();
}

TEST(LarsTest, BadOptionsAreErrorsNamingTheOption) {
  Parameter p(random_tensor({3, 3}, 23));
  const NamedParameters ps{{"p", &p}};
  EXPECT_TRUE(throws_error_with([&] { (void)LARS(ps, {.lr = -1.0f}); }, {"LARS: lr -1"}));
  EXPECT_TRUE(throws_error_with([&] { (void)LARS(ps, {.momentum = 1.0f}); },
                                {"LARS: momentum 1", "[0, 1)"}));
  EXPECT_TRUE(throws_error_with([&] { (void)LARS(ps, {.weight_decay = NAN}); },
                                {"LARS: weight_decay nan"}));
  EXPECT_TRUE(throws_error_with([&] { (void)LARS(ps, {.eta = 0.0f}); }, {"LARS: eta 0", "> 0"}));
  EXPECT_TRUE(throws_error_with([&] { (void)LARS(ps, {.epsilon = -1e-9f}); }, {"LARS: epsilon"}));
  EXPECT_THROW((void)LARS({}, {}), stoker::Error);

  // The op checks its lists and flags.
  Tensor w = random_tensor({8}, 24), g = random_tensor({8}, 25), m = Tensor::zeros({8}, DType::f32);
  const std::vector<Tensor> ws{w}, gs{g}, ms{m};
  const std::vector<uint8_t> none;
  EXPECT_TRUE(throws_error_with([&] { stoker::ops::lars_step(ws, gs, ms, none, {}); },
                                {"ops::lars_step: 1 parameters but 0 adapt flags"}));
  const std::vector<uint8_t> one{1};
  const std::vector<Tensor> short_m{Tensor::zeros({7}, DType::f32)};
  EXPECT_TRUE(throws_error_with([&] { stoker::ops::lars_step(ws, gs, short_m, one, {}); },
                                {"ops::lars_step: momentum_bufs[0]"}));
  EXPECT_TRUE(throws_error_with([&] { stoker::ops::lars_step(ws, gs, ms, one, {.eta = -1.0f}); },
                                {"ops::lars_step: eta -1"}));
}

}  // namespace
