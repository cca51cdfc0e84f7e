#include "stoker/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"
#include "test_util.h"

using stoker::DType;
using stoker::Tensor;
using stoker::nn::Parameter;
using namespace stoker::optim;

namespace {

Tensor random_tensor(int64_t n, uint64_t seed, float std = 1.0f) {
  Tensor t = Tensor::empty({n}, DType::f32);
  stoker::ops::random_normal(t, 0.0f, std, seed, 0);
  return t;
}

// Reference updates in double, written from PyTorch's documented algorithms.
struct RefSgd {
  double lr, momentum, dampening, wd;
  bool nesterov;
  std::vector<double> buf;
  void step(std::vector<double>& p, const std::vector<double>& g0, bool first) {
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g0[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? g : momentum * buf[i] + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
};

struct RefAdamW {
  double lr, b1, b2, eps, wd;
  std::vector<double> m, v;
  void step(std::vector<double>& p, const std::vector<double>& g, int t) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
};

std::vector<double> as_double(const Tensor& t) {
  const auto f = t.to_floats();
  return {f.begin(), f.end()};
}

void expect_close(const std::vector<double>& ref, const Tensor& got, double rtol) {
  const auto g = got.to_floats();
  ASSERT_EQ(g.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    // Tolerance relative to the operands (~1): updates cancel towards 0 in places.
    ASSERT_NEAR(g[i], ref[i], rtol * (std::fabs(ref[i]) + 1.0)) << "element " << i;
}

TEST(OptimizerTest, SgdMatchesReferenceAllVariants) {
  struct Case {
    float momentum, dampening, wd;
    bool nesterov;
  };
  for (const Case& c : {Case{0, 0, 0, false}, Case{0.9f, 0, 0, false},
                        Case{0.9f, 0.1f, 1e-2f, false}, Case{0.9f, 0, 5e-4f, true}}) {
    SCOPED_TRACE(testing::Message() << "momentum " << c.momentum << " nesterov " << c.nesterov);
    Parameter p(random_tensor(1031, 1));
    SGD opt({{"w", &p}}, {.lr = 0.05f,
                          .momentum = c.momentum,
                          .dampening = c.dampening,
                          .weight_decay = c.wd,
                          .nesterov = c.nesterov});
    RefSgd ref{0.05, c.momentum, c.dampening, c.wd, c.nesterov, {}};
    std::vector<double> rp = as_double(p.value());
    for (int s = 0; s < 5; ++s) {
      const Tensor g = random_tensor(1031, 100 + s);
      stoker::ops::copy(p.grad(), g);
      ref.step(rp, as_double(g), s == 0);
      opt.step();
    }
    expect_close(rp, p.value(), 1e-5);
    EXPECT_EQ(opt.steps(), 5);
  }
}

TEST(OptimizerTest, AdamWMatchesReference) {
  Parameter p(random_tensor(4099, 2));
  AdamW opt({{"w", &p}}, {.lr = 1e-2f, .weight_decay = 0.1f});
  RefAdamW ref{1e-2, 0.9, 0.999, 1e-8, 0.1, {}, {}};
  std::vector<double> rp = as_double(p.value());
  for (int s = 1; s <= 6; ++s) {
    const Tensor g = random_tensor(4099, 200 + s, s == 3 ? 1e-6f : 1.0f);  // tiny grads too
    stoker::ops::copy(p.grad(), g);
    ref.step(rp, as_double(g), s);
    opt.step();
  }
  expect_close(rp, p.value(), 2e-5);
}

TEST(OptimizerTest, FoundInfSkipsTheUpdateBitForBit) {
  Parameter p(random_tensor(777, 3));
  AdamW opt({{"w", &p}});
  stoker::ops::copy(p.grad(), random_tensor(777, 4));
  opt.step();  // one real step so state is non-zero
  const auto before_p = p.value().to_vector<float>();
  auto state = opt.state();
  const auto before_m = state[0].second.to_vector<float>();
  Tensor flag = Tensor::from_floats({1.0f}, {});
  opt.set_found_inf(flag);
  stoker::ops::copy(p.grad(), random_tensor(777, 5));
  opt.step();
  EXPECT_EQ(0, std::memcmp(before_p.data(), p.value().to_vector<float>().data(), 777 * 4));
  EXPECT_EQ(0,
            std::memcmp(before_m.data(), opt.state()[0].second.to_vector<float>().data(), 777 * 4));
  EXPECT_EQ(opt.applied_steps(), 1);  // the skipped step does not count
  EXPECT_EQ(opt.steps(), 2);          // calls to step()
  stoker::ops::fill(flag, 0.0);
  opt.step();
  EXPECT_NE(0, std::memcmp(before_p.data(), p.value().to_vector<float>().data(), 777 * 4));
  EXPECT_EQ(opt.applied_steps(), 2);
}

// A skipped step leaves the bias correction where it was: step 1, skip, step 2 equals the
// reference's steps t = 1, 2 on the same gradients.
TEST(OptimizerTest, AdamWSkippedStepDoesNotAdvanceBiasCorrection) {
  Parameter p(random_tensor(513, 30));
  AdamW opt({{"w", &p}}, {.lr = 1e-2f, .weight_decay = 0.0f});
  RefAdamW ref{1e-2, 0.9, 0.999, 1e-8, 0.0, {}, {}};
  std::vector<double> rp = as_double(p.value());
  Tensor flag = Tensor::from_floats({0.0f}, {});
  opt.set_found_inf(flag);
  const Tensor g1 = random_tensor(513, 31), g2 = random_tensor(513, 32);
  stoker::ops::copy(p.grad(), g1);
  opt.step();
  ref.step(rp, as_double(g1), 1);
  stoker::ops::fill(flag, 1.0);
  opt.step();  // skipped
  stoker::ops::fill(flag, 0.0);
  stoker::ops::copy(p.grad(), g2);
  opt.step();
  ref.step(rp, as_double(g2), 2);
  expect_close(rp, p.value(), 2e-5);
}

// Mixed precision: a parameter's half copy is made on first use and refreshed by step() (one
// multi-tensor cast), so it always holds the rounded master; set_value() invalidates it.
TEST(OptimizerTest, StepRefreshesHalfComputeCopies) {
  for (const DType half : {DType::bf16, DType::f16}) {
    Parameter w(Tensor::empty({3, 70001}, DType::f32)), b(Tensor::empty({5}, DType::f32));
    stoker::ops::random_normal(w.value(), 0.0f, 1.0f, 1, 0);
    stoker::ops::random_normal(b.value(), 0.0f, 1.0f, 2, 0);
    stoker::ops::random_normal(w.grad(), 0.0f, 1.0f, 3, 0);
    const Tensor wc = w.compute_value(half);
    ASSERT_EQ(wc.dtype(), half);
    EXPECT_EQ(&w.compute_value(DType::f32), &w.value());
    AdamW opt({{"w", &w}, {"b", &b}}, {.lr = 0.1f});
    opt.step();
    EXPECT_FALSE(b.compute_copy().defined()) << "no copy is made for a parameter never asked";
    Tensor expect = Tensor::empty(w.shape(), half);
    stoker::ops::cast(expect, w.value());
    ASSERT_EQ(std::memcmp(expect.data(), w.compute_copy().data(), expect.nbytes()), 0);
    EXPECT_EQ(w.compute_value(half).data(), wc.data()) << "the copy is reused, not reallocated";
    Tensor fresh = Tensor::zeros(w.shape(), DType::f32);
    w.set_value(fresh);
    const std::vector<float> after = w.compute_value(half).to_floats();
    for (float v : after) ASSERT_EQ(v, 0.0f);
  }
}

// AdamW writes the fresh half copies in its update's pass (ops::adamw_step's compute_copies);
// a stale copy, or one of a second half dtype, is refreshed by the separate cast. Every way the
// copy ends up the master rounded, and an overflowed (skipped) step leaves both alone.
TEST(OptimizerTest, AdamWWritesFreshCopiesInItsPassAndCastsTheRest) {
  Parameter a(Tensor::empty({4, 3001}, DType::f32)), b(Tensor::empty({77}, DType::f32)),
      c(Tensor::empty({129}, DType::f32));
  uint64_t seed = 10;
  for (Parameter* p : {&a, &b, &c}) {
    stoker::ops::random_normal(p->value(), 0.0f, 1.0f, seed++, 0);
    stoker::ops::random_normal(p->grad(), 0.0f, 1.0f, seed++, 0);
  }
  a.compute_value(DType::bf16);
  b.compute_value(DType::f16);  // a second dtype: not in the bf16 pass
  c.compute_value(DType::bf16);
  AdamW opt({{"a", &a}, {"b", &b}, {"c", &c}}, {.lr = 0.05f});
  auto expect_rounded = [](Parameter& p, const char* what) {
    ASSERT_TRUE(p.compute_fresh()) << what;
    Tensor want = Tensor::empty(p.shape(), p.compute_copy().dtype());
    stoker::ops::cast(want, p.value());
    ASSERT_EQ(std::memcmp(want.data(), p.compute_copy().data(), want.nbytes()), 0) << what;
  };
  for (int step = 0; step < 3; ++step) {
    if (step == 1) {  // c's master written in place: its copy is stale, cast after the update
      stoker::ops::scale(c.value(), 0.5f);
      c.value_changed();
    }
    opt.step();
    expect_rounded(a, "a");
    expect_rounded(b, "b");
    expect_rounded(c, "c");
  }
  const Tensor flag = Tensor::from_floats({1.0f}, {});
  opt.set_found_inf(flag);
  const std::vector<float> master = a.value().to_floats();
  const std::vector<float> copy = a.compute_copy().to_floats();
  opt.step();
  EXPECT_EQ(a.value().to_floats(), master);
  EXPECT_EQ(a.compute_copy().to_floats(), copy);
  expect_rounded(a, "a after a skipped step");
}

TEST(OptimizerTest, AdamWComputeCopiesAreValidated) {
  std::vector<Tensor> p{Tensor::zeros({8}, DType::f32), Tensor::zeros({3}, DType::f32)};
  std::vector<Tensor> g = p, m = p, v = p;
  for (auto* l : {&g, &m, &v})
    for (Tensor& t : *l) t = Tensor::zeros(t.shape(), DType::f32);
  const stoker::ops::AdamWHyper h{.lr = 0.1f};
  const std::vector<Tensor> one{Tensor::zeros({8}, DType::bf16)};
  EXPECT_TRUE(
      stoker::test::throws_error_with([&] { stoker::ops::adamw_step(p, g, m, v, h, {}, {}, one); },
                                      {"2 parameters but 1 compute_copies"}));
  const std::vector<Tensor> shape{Tensor::zeros({8}, DType::bf16), Tensor::zeros({4}, DType::bf16)};
  EXPECT_TRUE(stoker::test::throws_error_with(
      [&] { stoker::ops::adamw_step(p, g, m, v, h, {}, {}, shape); },
      {"compute_copies[1]", "expected f16 or bf16[3]"}));
  const std::vector<Tensor> mixed{Tensor::zeros({8}, DType::bf16), Tensor::zeros({3}, DType::f16)};
  EXPECT_TRUE(stoker::test::throws_error_with(
      [&] { stoker::ops::adamw_step(p, g, m, v, h, {}, {}, mixed); }, {"mix f16 and bf16"}));
  const std::vector<Tensor> f32{Tensor(), Tensor::zeros({3}, DType::f32)};
  EXPECT_TRUE(stoker::test::throws_error_with(
      [&] { stoker::ops::adamw_step(p, g, m, v, h, {}, {}, f32); }, {"compute_copies[1]"}));
}

// A learning rate read on the device (a CUDA-graph step) gives the bits of the host value, step
// after step with a falling rate: `make` builds the optimizer over a [16, 8] weight and an [8]
// bias (LARS adapts the one and excludes the other); the device-rate copy's own host rate is
// nonsense, which must not matter.
using MakeOptimizer =
    std::function<std::unique_ptr<Optimizer>(NamedParameters params, float host_lr)>;

void expect_device_lr_gives_host_bits(const MakeOptimizer& make, const std::string& what) {
  std::vector<std::unique_ptr<Parameter>> host_params, dev_params;
  NamedParameters host_named, dev_named;
  std::vector<std::vector<float>> initial;
  for (const int64_t n : {int64_t{128}, int64_t{8}}) {
    Tensor v = random_tensor(n, 30 + static_cast<uint64_t>(n));
    if (n == 128) v = v.reshape({16, 8});
    host_params.push_back(std::make_unique<Parameter>(v.clone()));
    dev_params.push_back(std::make_unique<Parameter>(v.clone()));
    host_named.emplace_back("p" + std::to_string(n), host_params.back().get());
    dev_named.emplace_back("p" + std::to_string(n), dev_params.back().get());
    initial.push_back(v.to_floats());
  }
  const auto host = make(host_named, 0.0f);
  const auto dev = make(dev_named, 123.0f);
  ASSERT_TRUE(dev->supports_device_lr()) << what;
  const Tensor lr = Tensor::zeros({}, DType::f32);
  dev->set_lr_tensor(lr);
  for (int step = 0; step < 4; ++step) {
    const float rate = 0.05f / static_cast<float>(step + 1);
    for (size_t i = 0; i < host_params.size(); ++i) {
      stoker::ops::random_normal(host_params[i]->grad(), 0.0f, 1.0f, 40 + step, i);
      stoker::ops::copy(dev_params[i]->grad(), host_params[i]->grad());
    }
    host->set_lr(rate);
    stoker::ops::fill(lr, rate);
    host->step();
    dev->step();
  }
  for (size_t i = 0; i < host_params.size(); ++i) {
    EXPECT_EQ(host_params[i]->value().to_floats(), dev_params[i]->value().to_floats())
        << what << ", parameter " << i;
    EXPECT_NE(host_params[i]->value().to_floats(), initial[i]) << what << ": nothing moved";
  }
}

TEST(OptimizerTest, DeviceLearningRateGivesTheHostsBits) {
  expect_device_lr_gives_host_bits(
      [](NamedParameters ps, float lr) {
        return std::make_unique<AdamW>(std::move(ps), AdamWOptions{.lr = lr, .weight_decay = 0.1f});
      },
      "AdamW");
  expect_device_lr_gives_host_bits(
      [](NamedParameters ps, float lr) {
        return std::make_unique<SGD>(std::move(ps),
                                     SgdOptions{.lr = lr, .momentum = 0.9f, .weight_decay = 1e-3f});
      },
      "SGD momentum");
  expect_device_lr_gives_host_bits(
      [](NamedParameters ps, float lr) {
        return std::make_unique<SGD>(std::move(ps),
                                     SgdOptions{.lr = lr, .momentum = 0.9f, .nesterov = true});
      },
      "SGD Nesterov");
  expect_device_lr_gives_host_bits(
      [](NamedParameters ps, float lr) {
        return std::make_unique<SGD>(std::move(ps), SgdOptions{.lr = lr});
      },
      "SGD without momentum");
  expect_device_lr_gives_host_bits(
      [](NamedParameters ps, float lr) {
        return std::make_unique<LARS>(std::move(ps),
                                      LarsOptions{.lr = lr, .weight_decay = 5e-3f, .eta = 0.02f});
      },
      "LARS");
}

TEST(OptimizerTest, DeviceLearningRateIsRefusedWithTheReason) {
  Parameter a(random_tensor(64, 5));
  const Tensor lr = Tensor::zeros({}, DType::f32);
  AdamW compact({{"p", &a}}, {.lr = 0.1f, .state = {.dtype = StateDType::bf16}});
  EXPECT_FALSE(compact.supports_device_lr());
  EXPECT_TRUE(stoker::test::throws_error_with([&] { compact.set_lr_tensor(lr); },
                                              {"cannot read its learning rate on the device"}));
  SGD compact_sgd({{"p", &a}},
                  {.lr = 0.1f, .momentum = 0.9f, .state = {.dtype = StateDType::int8_blockwise}});
  EXPECT_FALSE(compact_sgd.supports_device_lr());
  EXPECT_THROW(compact_sgd.set_lr_tensor(lr), stoker::Error);
  SGD plain({{"p", &a}}, {.lr = 0.1f});
  EXPECT_TRUE(stoker::test::throws_error_with(
      [&] { plain.set_lr_tensor(Tensor::zeros({2}, DType::f32)); }, {"expected a rank-0 f32"}));
  // The ops name the bad tensor.
  std::vector<Tensor> p{Tensor::zeros({4}, DType::f32)}, g{Tensor::zeros({4}, DType::f32)};
  const std::vector<Tensor> no_momentum;
  const stoker::ops::SgdHyper sgd_hyper{.lr = 0.1f};
  EXPECT_TRUE(stoker::test::throws_error_with(
      [&] {
        stoker::ops::sgd_step(p, g, no_momentum, sgd_hyper, Tensor(),
                              Tensor::zeros({}, DType::i64));
      },
      {"ops::sgd_step: lr is", "expected a rank-0 f32 tensor"}));
  const uint8_t adapt[] = {1};
  EXPECT_TRUE(stoker::test::throws_error_with(
      [&] {
        stoker::ops::lars_step(p, g, g, adapt, {.lr = 0.1f}, {}, Tensor::zeros({3}, DType::f32));
      },
      {"ops::lars_step: lr is"}));
}

TEST(OptimizerTest, FrozenParametersAreNotTouched) {
  Parameter a(random_tensor(10, 6)), b(random_tensor(10, 7));
  b.requires_grad = false;
  SGD opt({{"a", &a}, {"b", &b}}, {.lr = 0.1f, .momentum = 0.9f});
  stoker::ops::fill(a.grad(), 1.0);
  stoker::ops::fill(b.grad(), 1.0);
  const auto b0 = b.value().to_vector<float>();
  opt.step();
  EXPECT_EQ(b0, b.value().to_vector<float>());
  EXPECT_EQ(opt.state().size(), 1u);
  EXPECT_EQ(opt.state()[0].first, "a.momentum_buffer");
}

TEST(OptimizerTest, StateRoundTripAndErrors) {
  Parameter p(random_tensor(16, 8));
  AdamW a({{"w", &p}});
  stoker::ops::fill(p.grad(), 0.5);
  a.step();
  Parameter q(random_tensor(16, 8));
  AdamW b({{"w", &q}});
  b.load_state(a.state());
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(a.state()[i].second.to_vector<float>(), b.state()[i].second.to_vector<float>());
  EXPECT_THROW(b.load_state({}), stoker::Error);
  EXPECT_THROW(SGD({}, {}), stoker::Error);
  Parameter r(random_tensor(4, 9));
  EXPECT_THROW(SGD({{"r", &r}}, {.momentum = 0.0f, .nesterov = true}), stoker::Error);
}

TEST(OptimizerTest, OpsRejectMismatchedLists) {
  Tensor p = random_tensor(8, 1), g = random_tensor(9, 2);
  const std::vector<Tensor> ps{p}, gs{g};
  try {
    stoker::ops::sgd_step(ps, gs, {}, {});
    FAIL();
  } catch (const stoker::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ops::sgd_step: grads[0]"), std::string::npos) << e.what();
  }
}

TEST(ScheduleTest, Shapes) {
  EXPECT_FLOAT_EQ(constant_lr(0.1f).lr_at(1000), 0.1f);
  const auto s = step_lr(1.0f, 10, 0.5f);
  EXPECT_FLOAT_EQ(s.lr_at(9), 1.0f);
  EXPECT_FLOAT_EQ(s.lr_at(10), 0.5f);
  EXPECT_FLOAT_EQ(s.lr_at(25), 0.25f);
  const auto w = linear_warmup(1.0f, 4);
  EXPECT_FLOAT_EQ(w.lr_at(0), 0.25f);
  EXPECT_FLOAT_EQ(w.lr_at(3), 1.0f);
  EXPECT_FLOAT_EQ(w.lr_at(100), 1.0f);
  const auto c = cosine_with_warmup(1.0f, 10, 110, 0.1f);
  EXPECT_FLOAT_EQ(c.lr_at(9), 1.0f);
  EXPECT_FLOAT_EQ(c.lr_at(10), 1.0f);
  EXPECT_NEAR(c.lr_at(60), 0.55f, 1e-6);
  EXPECT_NEAR(c.lr_at(110), 0.1f, 1e-6);
  EXPECT_NEAR(c.lr_at(1000), 0.1f, 1e-6);
  EXPECT_FLOAT_EQ(scale_lr_for_batch(0.1f, 256, 1024), 0.4f);
  EXPECT_THROW(cosine_with_warmup(1.0f, 10, 10), stoker::Error);
}

// MLPerf's LARS schedule: linear warm-up, then end + (lr - end) * (1 - t)^power, then end.
// Expected values computed here from the formula, in double.
TEST(ScheduleTest, PolynomialWithWarmup) {
  const auto p = polynomial_with_warmup(2.0f, 4, 104, 1e-4f, 2.0f);
  EXPECT_FLOAT_EQ(p.lr_at(0), 0.5f);  // 2 * 1/4
  EXPECT_FLOAT_EQ(p.lr_at(1), 1.0f);
  EXPECT_FLOAT_EQ(p.lr_at(3), 2.0f);  // the warm-up's last step reaches lr
  EXPECT_FLOAT_EQ(p.lr_at(4), 2.0f);  // t = 0: the decay starts at lr
  const auto decay = [](int64_t s) {
    const double t = (s - 4) / 100.0;
    return static_cast<float>(1e-4 + (2.0 - 1e-4) * (1.0 - t) * (1.0 - t));
  };
  for (const int64_t s : {5, 29, 54, 79, 103}) EXPECT_FLOAT_EQ(p.lr_at(s), decay(s)) << s;
  EXPECT_NEAR(p.lr_at(54), 0.500075, 1e-6);  // t = 0.5: a quarter of the way above end
  EXPECT_FLOAT_EQ(p.lr_at(104), 1e-4f);      // the end
  EXPECT_FLOAT_EQ(p.lr_at(100000), 1e-4f);   // held beyond it
  for (int64_t s = 4; s < 104; ++s) EXPECT_GT(p.lr_at(s), p.lr_at(s + 1)) << s;

  // power 1 is a straight line; no warm-up starts at lr; total == warmup has no decay phase.
  const auto linear = polynomial_with_warmup(1.0f, 0, 10, 0.0f, 1.0f);
  EXPECT_FLOAT_EQ(linear.lr_at(0), 1.0f);
  EXPECT_FLOAT_EQ(linear.lr_at(5), 0.5f);
  EXPECT_FLOAT_EQ(linear.lr_at(10), 0.0f);
  const auto flat = polynomial_with_warmup(1.0f, 5, 5, 0.25f);
  EXPECT_FLOAT_EQ(flat.lr_at(4), 1.0f);
  EXPECT_FLOAT_EQ(flat.lr_at(5), 0.25f);
  EXPECT_NE(p.description.find("poly"), std::string::npos) << p.description;
}

TEST(ScheduleTest, PolynomialWithWarmupArgumentErrors) {
  using stoker::test::throws_error_with;
  EXPECT_TRUE(throws_error_with([] { polynomial_with_warmup(1.0f, -1, 10); },
                                {"warmup_steps -1 is negative"}));
  EXPECT_TRUE(throws_error_with([] { polynomial_with_warmup(1.0f, 0, -5); },
                                {"total_steps -5 must be positive"}));
  EXPECT_TRUE(throws_error_with([] { polynomial_with_warmup(1.0f, 20, 10); },
                                {"total_steps (10) is below warmup_steps (20)"}));
  EXPECT_TRUE(throws_error_with([] { polynomial_with_warmup(1.0f, 0, 10, 1e-4f, 0.0f); },
                                {"power 0 must be", "> 0"}));
  EXPECT_TRUE(
      throws_error_with([] { polynomial_with_warmup(1.0f, 0, 10, 1e-4f, -2.0f); }, {"power -2"}));
  EXPECT_TRUE(throws_error_with([] { polynomial_with_warmup(1.0f, 0, 10, 2.0f); },
                                {"end_lr 2 must be in [0, lr = 1]"}));
  EXPECT_TRUE(throws_error_with([] { polynomial_with_warmup(1.0f, 0, 10, -1.0f); }, {"end_lr -1"}));
  EXPECT_TRUE(throws_error_with([] { polynomial_with_warmup(NAN, 0, 10); }, {"lr nan"}));
}

}  // namespace
