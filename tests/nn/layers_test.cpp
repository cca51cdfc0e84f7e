// nn layers on the CPU: every module's backward against central finite differences of the
// scalar objective L = sum(forward(x) * r) (r random, fixed), for dx and for every parameter's
// gradient; the losses against finite differences of their value; gradients accumulate across
// backward calls; PyTorch parameter names; Linear's initialization bounds.
//
// Finite differences on fp32: L is summed in double from the f32 outputs. With eps = 1e-2 the
// rounding noise of L (~1e-7 |L|) becomes ~1e-5 in the difference quotient and the truncation
// error is ~eps^2 |L'''| ~ 1e-4. The check allows a relative error of 5e-3 (plus 1e-3 of the
// largest gradient, for entries near zero): a wrong term shows as an O(1) error, and the largest
// error measured is 10% of that tolerance (STOKER_TEST_VERBOSE=1 prints it per check). Linear
// pieces (Linear, Dropout, Embedding, MSE) have no truncation error at all; ReLU is checked with
// eps = 1e-3 on inputs at least 0.05 from its kink.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/embedding.h"
#include "stoker/nn/layernorm.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

constexpr double kRtol = 5e-3;
constexpr double kAtolOfMax = 1e-3;

double objective(const Tensor& y, const std::vector<float>& r) {
  const std::vector<float> v = y.to_floats();
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}

// Analytic vs numeric gradient: |a - n| <= kRtol * max(|a|, |n|) + kAtolOfMax * max_k |n_k|.
::testing::AssertionResult grads_agree(const std::vector<float>& analytic,
                                       const std::vector<double>& numeric) {
  if (analytic.size() != numeric.size())
    return ::testing::AssertionFailure()
           << analytic.size() << " vs " << numeric.size() << " values";
  double scale = 0.0;
  for (double n : numeric) scale = std::max(scale, std::fabs(n));
  for (size_t k = 0; k < numeric.size(); ++k) {
    const double a = analytic[k], n = numeric[k];
    const double tol = kRtol * std::max(std::fabs(a), std::fabs(n)) + kAtolOfMax * scale;
    if (!(std::fabs(a - n) <= tol))
      return ::testing::AssertionFailure()
             << "element " << k << ": backward " << a << ", finite difference " << n
             << " (tolerance " << tol << ")";
  }
  if (scale == 0.0)
    return ::testing::AssertionFailure() << "all gradients are zero: a vacuous check";
  if (std::getenv("STOKER_TEST_VERBOSE") != nullptr) {  // how tight the tolerance is
    double ratio = 0.0;
    for (size_t k = 0; k < numeric.size(); ++k) {
      const double a = analytic[k], n = numeric[k];
      ratio = std::max(ratio, std::fabs(a - n) / (kRtol * std::max(std::fabs(a), std::fabs(n)) +
                                                  kAtolOfMax * scale));
    }
    std::printf("grads_agree: %zu values, max error = %.3g of the tolerance\n", numeric.size(),
                ratio);
  }
  return ::testing::AssertionSuccess();
}

// Central differences of f over the elements of the f32 host tensor t (perturbed in place,
// restored afterwards).
std::vector<double> numeric_grad(const Tensor& t, double eps, const std::function<double()>& f) {
  float* p = t.data<float>();
  std::vector<double> g(static_cast<size_t>(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) {
    const float saved = p[k];
    p[k] = saved + static_cast<float>(eps);
    const double up = f();
    p[k] = saved - static_cast<float>(eps);
    const double down = f();
    p[k] = saved;
    // The step actually taken (saved +- eps rounded to f32).
    const double h = (static_cast<double>(saved + static_cast<float>(eps)) -
                      static_cast<double>(saved - static_cast<float>(eps)));
    g[static_cast<size_t>(k)] = (up - down) / h;
  }
  return g;
}

// Checks module m at input x: dx (when x is float) and every parameter gradient against central
// differences of L = sum(m.forward(x) * r). `rewind` runs before every forward (e.g. to replay a
// dropout mask).
void check_module(
    Module& m, const Tensor& x, uint32_t seed, double eps,
    const std::function<void()>& rewind = [] {}) {
  rewind();
  const Tensor y = m.forward(x);
  const std::vector<float> r =
      test::random_floats(static_cast<size_t>(y.numel()), seed, -1.0f, 1.0f);
  for (Parameter* p : m.parameters()) p->zero_grad();
  const Tensor dx = m.backward(Tensor::from_floats(r, y.shape()));
  std::vector<std::vector<float>> grads;
  const auto named = m.named_parameters();
  for (const auto& [name, p] : named) grads.push_back(p->grad().to_floats());

  const auto loss = [&] {
    rewind();
    return objective(m.forward(x), r);
  };
  if (x.dtype() == DType::f32) {
    ASSERT_TRUE(dx.defined()) << m.describe();
    ASSERT_EQ(dx.shape(), x.shape()) << m.describe();
    EXPECT_TRUE(grads_agree(dx.to_floats(), numeric_grad(x, eps, loss))) << m.describe() << " dx";
  }
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_TRUE(grads_agree(grads[i], numeric_grad(named[i].second->value(), eps, loss)))
        << m.describe() << " d" << named[i].first;
  }
}

// Random host tensor with every |value| >= `gap` (keeps ReLU inputs away from the kink).
Tensor away_from_zero(const Shape& s, uint32_t seed, float gap) {
  std::vector<float> v = test::random_floats(static_cast<size_t>(s.numel()), seed, -1.0f, 1.0f);
  for (float& x : v) x = std::copysign(gap + std::fabs(x), x);
  return Tensor::from_floats(v, s);
}

// Sets every parameter of m to random values (so gamma != 1, beta != 0, ... in the checks).
void randomize(Module& m, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  for (Parameter* p : m.parameters())
    p->set_value(test::random_tensor(p->shape(), DType::f32, seed++, lo, hi));
}

// ---------------------------------------------------------------------------------------------
// Single layers

TEST(LayersTest, LinearGradientsMatchFiniteDifferences) {
  manual_seed(1);
  Linear with_bias(5, 4);
  check_module(with_bias, test::random_tensor({3, 5}, DType::f32, 2), 3, 1e-2);
  Linear no_bias(5, 4, false);
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
  check_module(no_bias, test::random_tensor({3, 5}, DType::f32, 4), 5, 1e-2);
  // Leading dimensions are flattened into rows and restored in y and dx.
  Linear batched(5, 2);
  check_module(batched, test::random_tensor({2, 3, 5}, DType::f32, 6), 7, 1e-2);
}

// Two backward calls without zero_grad between them (two micro-batches) leave the sum of the
// two calls' gradients: the weight's through the GEMM's beta, the bias's through the scratch
// vector the weight-gradient GEMM writes and the add after it; a frozen weight leaves the bias
// gradient to its own pass.
TEST(LayersTest, LinearGradientsAccumulateOverBackwardCalls) {
  for (const bool weight_trainable : {true, false}) {
    SCOPED_TRACE(weight_trainable ? "weight trainable" : "weight frozen");
    manual_seed(3);
    Linear fc(6, 5);
    fc.weight().requires_grad = weight_trainable;
    const Tensor x1 = test::random_tensor({4, 6}, DType::f32, 31);
    const Tensor x2 = test::random_tensor({3, 6}, DType::f32, 32);
    const Tensor dy1 = test::random_tensor({4, 5}, DType::f32, 33);
    const Tensor dy2 = test::random_tensor({3, 5}, DType::f32, 34);
    // Each call alone.
    std::vector<std::vector<float>> alone[2];
    for (int call = 0; call < 2; ++call) {
      for (Parameter* p : fc.parameters()) p->zero_grad();
      fc.forward(call == 0 ? x1 : x2);
      fc.backward(call == 0 ? dy1 : dy2);
      for (Parameter* p : fc.parameters())
        alone[call].push_back(p->requires_grad ? p->grad().to_floats() : std::vector<float>{});
    }
    // Both calls into one gradient.
    for (Parameter* p : fc.parameters()) p->zero_grad();
    fc.forward(x1);
    fc.backward(dy1);
    fc.forward(x2);
    fc.backward(dy2);
    const std::vector<Parameter*> params = fc.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i]->requires_grad) continue;
      const std::vector<float> sum = params[i]->grad().to_floats();
      ASSERT_EQ(sum.size(), alone[0][i].size());
      for (size_t j = 0; j < sum.size(); ++j)
        EXPECT_NEAR(sum[j], alone[0][i][j] + alone[1][i][j], 1e-6 * (1 + std::fabs(sum[j])))
            << "parameter " << i << " element " << j;
    }
  }
}

TEST(LayersTest, ReluGradientMatchesFiniteDifferences) {
  ReLU relu;
  // |x| >= 0.05 and eps = 1e-3: no difference quotient straddles the kink.
  check_module(relu, away_from_zero({4, 6}, 10, 0.05f), 11, 1e-3);
}

TEST(LayersTest, GeluGradientMatchesFiniteDifferences) {
  GELU gelu;
  check_module(gelu, test::random_tensor({4, 6}, DType::f32, 12, -4.0f, 4.0f), 13, 1e-2);
}

TEST(LayersTest, LinearWithFusedGeluGradientsMatchFiniteDifferences) {
  manual_seed(21);
  Linear fc(5, 6);
  fc.set_activation(Activation::gelu);
  EXPECT_EQ(fc.describe(), "Linear(in=5, out=6, bias, gelu)");
  check_module(fc, test::random_tensor({2, 3, 5}, DType::f32, 22, -2.0f, 2.0f), 23, 1e-2);
}

// Linear with a fused GELU (and the next Linear applying gelu' in its input-gradient GEMM) gives
// the bits of Linear + GELU + Linear on the CPU: output, input gradient and every parameter
// gradient; with selective recomputation (the fused fc rebuilds fc2's input from its saved
// pre-activation, as GELU does from its input) and inside a Checkpoint; f32 and bf16 compute.
TEST(LayersTest, LinearWithFusedGeluGivesLinearPlusGeluBits) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (int variant = 0; variant < 3; ++variant) {  // plain, selective, checkpointed
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " variant " + std::to_string(variant));
      manual_seed(31);
      auto unfused = make<Sequential>();
      unfused->add("fc", make<Linear>(6, 16));
      unfused->add("gelu", make<GELU>());
      unfused->add("fc2", make<Linear>(16, 6));
      manual_seed(31);
      auto fused = make<Sequential>();
      auto fc = make<Linear>(6, 16);
      auto fc2 = make<Linear>(16, 6);
      fc->set_activation(Activation::gelu);
      fc2->set_input_activation_from(fc.get());
      fused->add("fc", std::move(fc));
      fused->add("fc2", std::move(fc2));
      std::unique_ptr<Module> a = std::move(unfused), b = std::move(fused);
      if (variant == 1) {
        set_selective_recompute(*a, true);
        set_selective_recompute(*b, true);
      } else if (variant == 2) {
        a = make<Checkpoint>(std::move(a));
        b = make<Checkpoint>(std::move(b));
      }
      set_compute_dtype(*a, dtype);
      set_compute_dtype(*b, dtype);
      const Tensor x = test::random_tensor({2, 5, 6}, dtype, 32, -2.0f, 2.0f);
      const Tensor dy = test::random_tensor({2, 5, 6}, dtype, 33);
      for (Parameter* p : a->parameters()) p->zero_grad();
      for (Parameter* p : b->parameters()) p->zero_grad();
      const Tensor ya = a->forward(x);
      const Tensor yb = b->forward(x);
      EXPECT_TRUE(test::bit_identical(ya, yb));
      EXPECT_TRUE(test::bit_identical(a->backward(dy), b->backward(dy)));
      const auto pa = a->named_parameters(), pb = b->named_parameters();
      ASSERT_EQ(pa.size(), pb.size());
      for (size_t i = 0; i < pa.size(); ++i) {
        EXPECT_EQ(pa[i].first, pb[i].first);
        EXPECT_TRUE(test::bit_identical(pa[i].second->grad(), pb[i].second->grad())) << pa[i].first;
      }
    }
  }
}

// Without a partner the fused Linear applies gelu' itself; a partner whose producer kept no
// pre-activation (or has none) passes its gradient on unchanged.
TEST(LayersTest, FusedGeluBackwardWithoutAPartnerAndWithAStalePartner) {
  manual_seed(41);
  Linear fc(4, 8);
  fc.set_activation(Activation::gelu);
  Linear plain(4, 8);
  Linear fc2(8, 3);
  fc2.set_input_activation_from(&plain);  // no activation: an ordinary backward
  const Tensor x = test::random_tensor({5, 4}, DType::f32, 42);
  fc.forward(x);
  const Tensor dx = fc.backward(test::random_tensor({5, 8}, DType::f32, 43));
  EXPECT_EQ(dx.shape(), x.shape());
  plain.forward(x);
  fc2.forward(test::random_tensor({5, 8}, DType::f32, 44));
  Linear reference(8, 3);
  reference.weight().set_value(fc2.weight().value());
  reference.bias().set_value(fc2.bias().value());
  reference.forward(test::random_tensor({5, 8}, DType::f32, 44));
  const Tensor g = test::random_tensor({5, 3}, DType::f32, 45);
  EXPECT_TRUE(test::bit_identical(fc2.backward(g), reference.backward(g)));
}

TEST(LayersTest, DropoutWithFixedSeedGradientMatchesFiniteDifferences) {
  Dropout drop(0.5f, 42);
  const uint64_t start = drop.generator().offset();
  const Tensor x = test::random_tensor({4, 9}, DType::f32, 14);
  check_module(drop, x, 15, 1e-2, [&] { drop.generator().set_offset(start); });
  // It really dropped something and scaled the rest by 1 / (1 - p).
  drop.generator().set_offset(start);
  const std::vector<float> y = drop.forward(x).to_floats(), xv = x.to_floats();
  int zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f) {
      ++zeros;
    } else {
      EXPECT_EQ(y[i], xv[i] * 2.0f);
    }
  }
  EXPECT_GT(zeros, 4);
  EXPECT_LT(zeros, 32);
  // Consecutive forwards draw fresh masks; evaluation mode is the identity.
  EXPECT_NE(drop.forward(x).to_floats(), y);
  drop.set_training(false);
  EXPECT_TRUE(drop.forward(x).same_storage(x));
  EXPECT_TRUE(drop.backward(x).same_storage(x));
}

TEST(LayersTest, LayerNormGradientsMatchFiniteDifferences) {
  LayerNorm ln(6);
  // Initialization: weight 1, bias 0.
  EXPECT_EQ(ln.named_parameters()[0].second->value().to_floats(), std::vector<float>(6, 1.0f));
  EXPECT_EQ(ln.named_parameters()[1].second->value().to_floats(), std::vector<float>(6, 0.0f));
  randomize(ln, 20, 0.5f, 1.5f);
  check_module(ln, test::random_tensor({4, 6}, DType::f32, 21, -2.0f, 2.0f), 22, 1e-2);
  LayerNorm ln3(5);
  randomize(ln3, 23, 0.5f, 1.5f);
  check_module(ln3, test::random_tensor({2, 3, 5}, DType::f32, 24, -2.0f, 2.0f), 25, 1e-2);
}

TEST(LayersTest, EmbeddingGradientMatchesFiniteDifferencesWithRepeatedIds) {
  manual_seed(3);
  Embedding emb(7, 4);
  const Tensor ids = Tensor::from_vector<int64_t>({1, 3, 1, 6, 0, 3}, {2, 3});
  check_module(emb, ids, 26, 1e-2);  // ids have no gradient: only the weight is checked
  const Tensor y = emb.forward(ids);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_FALSE(emb.backward(Tensor::zeros({2, 3, 4}, DType::f32)).defined());
  const Tensor ids32 = Tensor::from_vector<int32_t>({6, 0}, {2});
  check_module(emb, ids32, 27, 1e-2);
  EXPECT_TRUE(test::throws_error_with([&] { emb.forward(Tensor::from_vector<int64_t>({7}, {1})); },
                                      {"embedding_forward", "id 7", "position 0"}));
}

// ---------------------------------------------------------------------------------------------
// Compositions

TEST(LayersTest, SequentialGradientsMatchFiniteDifferences) {
  manual_seed(4);
  Sequential net(make<Linear>(5, 8), make<ReLU>(), make<Linear>(8, 3));
  check_module(net, test::random_tensor({4, 5}, DType::f32, 30), 31, 1e-3);
}

TEST(LayersTest, ResidualTransformerishBlockGradientsMatchFiniteDifferences) {
  manual_seed(5);
  Sequential net;
  net.add(make<Linear>(6, 8));
  net.add(make<GELU>());
  auto body = make<Sequential>(make<LayerNorm>(8), make<Linear>(8, 8), make<GELU>());
  net.add(make<Residual>(std::move(body)));
  Dropout& drop = net.add(make<Dropout>(0.25f, 7));
  net.add(make<Linear>(8, 4));
  randomize(net, 40, -0.8f, 0.8f);
  const uint64_t start = drop.generator().offset();
  check_module(net, test::random_tensor({3, 6}, DType::f32, 41), 42, 1e-2,
               [&] { drop.generator().set_offset(start); });
}

// y = body(x) + shortcut(x) with a shape change (6 -> 8 features): dx sums both branches' dx.
TEST(LayersTest, ResidualWithShortcutGradientsMatchFiniteDifferences) {
  manual_seed(8);
  Sequential net;
  net.add(make<Residual>(make<Sequential>(make<Linear>(6, 8), make<GELU>(), make<Linear>(8, 8)),
                         make<Sequential>(make<Linear>(6, 8), make<LayerNorm>(8))));
  net.add(make<GELU>());
  net.add(make<Residual>(make<Sequential>(make<LayerNorm>(8), make<Linear>(8, 8)), nullptr));
  randomize(net, 70, -0.8f, 0.8f);
  check_module(net, test::random_tensor({3, 6}, DType::f32, 71), 72, 1e-2);
}

TEST(LayersTest, ResidualWithShortcutAddsBothBranches) {
  manual_seed(9);
  auto body = make<Linear>(3, 5);
  auto shortcut = make<Linear>(3, 5, false);
  Linear& b = *body;
  Linear& s = *shortcut;
  Residual r(std::move(body), std::move(shortcut));
  const Tensor x = test::random_tensor({4, 3}, DType::f32, 80);
  const std::vector<float> y = r.forward(x).to_floats();
  const std::vector<float> yb = b.forward(x).to_floats(), ys = s.forward(x).to_floats();
  ASSERT_EQ(y.size(), yb.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], yb[i] + ys[i]) << i;
  // Shapes that do not add up are an error naming both branches.
  Residual bad(make<Linear>(3, 5), make<Linear>(3, 4));
  EXPECT_THROW(bad.forward(x), stoker::Error);
  Residual identity_mismatch(make<Linear>(3, 5), nullptr);
  EXPECT_THROW(identity_mismatch.forward(x), stoker::Error);
}

// Named Sequential children and Residual branch names give torchvision-style names; an empty
// name adds no level.
TEST(LayersTest, NamedChildrenAndResidualBranchNames) {
  Sequential net;
  net.add("conv1", make<Linear>(4, 4));
  auto body = make<Sequential>();
  body->add("conv1", make<Linear>(4, 6));
  body->add("relu", make<ReLU>());
  auto down = make<Sequential>(make<Linear>(4, 6, false));
  auto block = make<Sequential>();
  block->add("", make<Residual>(std::move(body), std::move(down),
                                ResidualNames{.body = "", .shortcut = "downsample"}));
  block->add("relu", make<ReLU>());
  net.add_module("layer1.0", std::move(block));
  net.add(make<Linear>(6, 2));  // unnamed: its index
  std::vector<std::string> names;
  for (const auto& [n, p] : net.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "layer1.0.conv1.weight",
                                             "layer1.0.conv1.bias", "layer1.0.downsample.0.weight",
                                             "2.weight", "2.bias"}));
  Residual plain(make<Linear>(2, 2), make<Linear>(2, 2));
  names.clear();
  for (const auto& [n, p] : plain.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"body.weight", "body.bias", "shortcut.weight",
                                             "shortcut.bias"}));
}

TEST(LayersTest, GradientsAccumulateAcrossBackwardCalls) {
  manual_seed(6);
  Sequential net(make<Linear>(4, 5), make<GELU>(), make<LayerNorm>(5));
  auto emb = make<Embedding>(6, 5);
  randomize(net, 50);
  const Tensor x = test::random_tensor({3, 4}, DType::f32, 51);
  const Tensor ids = Tensor::from_vector<int64_t>({0, 5, 0}, {3});
  const Tensor dy = test::random_tensor({3, 5}, DType::f32, 52);
  std::vector<Parameter*> params = net.parameters();
  params.push_back(emb->parameters()[0]);
  for (Parameter* p : params) p->zero_grad();
  auto pass = [&] {
    net.forward(x);
    net.backward(dy);
    emb->forward(ids);
    emb->backward(dy);
  };
  pass();
  std::vector<std::vector<float>> once;
  for (Parameter* p : params) once.push_back(p->grad().to_floats());
  pass();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> twice = params[i]->grad().to_floats();
    for (size_t k = 0; k < twice.size(); ++k)
      EXPECT_NEAR(twice[k], 2.0f * once[i][k], 1e-6 * std::fabs(once[i][k]) + 1e-12)
          << "parameter " << i << " element " << k;
  }
  // zero_grad resets.
  for (Parameter* p : params) p->zero_grad();
  for (Parameter* p : params)
    for (float v : p->grad().to_floats()) EXPECT_EQ(v, 0.0f);
}

// zero_grad() is lazy: the backward after it overwrites stale gradient memory (the GEMM's beta
// is 0) and gives exactly the gradient of one pass; a gradient never written reads as zeros.
TEST(LayersTest, ZeroGradIsLazyAndExact) {
  manual_seed(8);
  Linear a(6, 4), b(6, 4);
  const Tensor x = test::random_tensor({5, 6}, DType::f32, 53);
  const Tensor dy = test::random_tensor({5, 4}, DType::f32, 54);
  stoker::ops::fill(a.weight().grad(), 123.0);  // stale values that must not leak through
  a.weight().zero_grad();
  a.bias().zero_grad();
  b.weight().zero_grad();
  b.bias().zero_grad();
  for (float v : b.bias().grad().to_floats()) ASSERT_EQ(v, 0.0f);
  a.forward(x);
  a.backward(dy);
  b.forward(x);
  b.backward(dy);
  EXPECT_EQ(a.weight().grad().to_floats(), b.weight().grad().to_floats());
  a.weight().zero_grad();
  float beta = -1.0f;
  a.weight().grad_for_write(beta);
  EXPECT_EQ(beta, 0.0f);
  a.weight().grad_for_write(beta);
  EXPECT_EQ(beta, 1.0f);
}

TEST(LayersTest, BackwardCallsGradReadyOncePerParameter) {
  manual_seed(7);
  Sequential net(make<Linear>(3, 4), make<LayerNorm>(4));
  std::vector<std::string> ready;
  for (auto& [name, p] : net.named_parameters())
    p->add_grad_ready_hook([&ready, n = name](Parameter&) { ready.push_back(n); });
  net.forward(test::random_tensor({2, 3}, DType::f32, 60));
  net.backward(test::random_tensor({2, 4}, DType::f32, 61));
  std::sort(ready.begin(), ready.end());
  EXPECT_EQ(ready, (std::vector<std::string>{"0.bias", "0.weight", "1.bias", "1.weight"}));
}

TEST(LayersTest, NamedParametersFollowPyTorch) {
  Sequential mlp(make<Linear>(4, 5), make<ReLU>(), make<Linear>(5, 3));
  std::vector<std::string> names;
  for (const auto& [n, p] : mlp.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(mlp.parameter_count(), 4 * 5 + 5 + 5 * 3 + 3);

  Sequential net;
  net.add(make<Linear>(4, 4));
  net.add(make<Residual>(make<Sequential>(make<Linear>(4, 4), make<GELU>(), make<LayerNorm>(4))));
  net.add(make<Embedding>(3, 4));
  names.clear();
  for (const auto& [n, p] : net.named_parameters()) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"0.weight", "0.bias", "1.body.0.weight", "1.body.0.bias",
                                      "1.body.2.weight", "1.body.2.bias", "2.weight"}));
  // Shapes in PyTorch's layout: Linear weight [out, in].
  EXPECT_EQ(mlp.named_parameters()[2].second->shape(), (Shape{3, 5}));
}

TEST(LayersTest, LinearInitIsUniformWithinOneOverSqrtIn) {
  manual_seed(8);
  Linear lin(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  for (const auto& [name, p] : lin.named_parameters()) {
    const std::vector<float> v = p->value().to_floats();
    double lo = 1.0, hi = -1.0, sum = 0.0, sq = 0.0;
    for (float x : v) {
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.size());
    EXPECT_GE(lo, -bound) << name;
    EXPECT_LE(hi, bound) << name;
    EXPECT_LT(lo, -0.95 * bound) << name;  // the whole range is used
    EXPECT_GT(hi, 0.95 * bound) << name;
    const double mean = sum / n, std = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 6.0 * bound / std::sqrt(3.0 * n)) << name;                // 6 sigma
    EXPECT_NEAR(std, bound / std::sqrt(3.0), 0.1 * bound / std::sqrt(3.0)) << name;  // U(-b, b)
  }
  // Same seed, same weights; another seed, other weights.
  manual_seed(8);
  Linear again(400, 300);
  EXPECT_TRUE(test::bit_identical(again.weight().value(), lin.weight().value()));
  manual_seed(9);
  Linear other(400, 300);
  EXPECT_FALSE(test::bit_identical(other.weight().value(), lin.weight().value()));
}

// ---------------------------------------------------------------------------------------------
// Losses

// Checks loss.backward(1) against central differences of loss.forward(pred, target).
void check_loss(Loss& loss, const Tensor& pred, const Tensor& target, double eps) {
  loss.forward(pred, target);
  const std::vector<float> analytic = loss.backward(1.0f).to_floats();
  EXPECT_TRUE(grads_agree(
      analytic, numeric_grad(pred, eps, [&] { return loss.forward(pred, target).item(); })))
      << loss.describe();
  // backward(scale) is scale * backward(1).
  loss.forward(pred, target);
  const std::vector<float> scaled = loss.backward(0.25f).to_floats();
  for (size_t i = 0; i < scaled.size(); ++i)
    EXPECT_NEAR(scaled[i], 0.25f * analytic[i], 1e-6 * std::fabs(analytic[i]) + 1e-12);
}

TEST(LayersTest, CrossEntropyKnownValues) {
  // log(e^1 + e^2 + e^3) = 3.40760596...: target 2 gives lse - 3; with smoothing 0.1 the loss is
  // 0.9 (lse - 3) + 0.1 (lse - mean(1, 2, 3)) = lse - 2.9 (PyTorch's label_smoothing).
  const Tensor logits = Tensor::from_floats({1.0f, 2.0f, 3.0f}, {1, 3});
  const Tensor target = Tensor::from_vector<int64_t>({2}, {1});
  CrossEntropyLoss plain;
  EXPECT_NEAR(plain.forward(logits, target).item(), 0.40760596444438, 1e-6);
  CrossEntropyLoss smooth({.label_smoothing = 0.1f});
  EXPECT_NEAR(smooth.forward(logits, target).item(), 0.50760596444438, 1e-6);
  // The mean is over non-ignored rows only.
  const Tensor two = Tensor::from_floats({1.0f, 2.0f, 3.0f, 5.0f, 0.0f, 0.0f}, {2, 3});
  CrossEntropyLoss ignoring({.ignore_index = 0});
  EXPECT_NEAR(ignoring.forward(two, Tensor::from_vector<int64_t>({2, 0}, {2})).item(),
              0.40760596444438, 1e-6);
}

TEST(LayersTest, CrossEntropyWithIgnoreIndexAndSmoothingMatchesFiniteDifferences) {
  CrossEntropyLoss loss({.ignore_index = 3, .label_smoothing = 0.1f});
  const Tensor logits = test::random_tensor({5, 7}, DType::f32, 70, -3.0f, 3.0f);
  const Tensor target = Tensor::from_vector<int64_t>({0, 3, 6, 2, 3}, {5});  // rows 1, 4 ignored
  check_loss(loss, logits, target, 1e-2);
  loss.forward(logits, target);
  const std::vector<float> d = loss.backward(1.0f).to_floats();
  for (int j = 0; j < 7; ++j) {
    EXPECT_EQ(d[7 + j], 0.0f);  // ignored rows get no gradient
    EXPECT_EQ(d[28 + j], 0.0f);
  }
  CrossEntropyLoss i32_loss({.label_smoothing = 0.3f});
  check_loss(i32_loss, test::random_tensor({4, 3}, DType::f32, 71, -3.0f, 3.0f),
             Tensor::from_vector<int32_t>({2, 0, 1, 1}, {4}), 1e-2);
}

TEST(LayersTest, MseLossMatchesFiniteDifferences) {
  MSELoss loss;
  const Tensor pred = test::random_tensor({3, 4}, DType::f32, 80, -2.0f, 2.0f);
  const Tensor target = test::random_tensor({3, 4}, DType::f32, 81, -2.0f, 2.0f);
  const std::vector<float> p = pred.to_floats(), t = target.to_floats();
  double want = 0.0;
  for (size_t i = 0; i < p.size(); ++i) want += (p[i] - t[i]) * (p[i] - t[i]);
  EXPECT_NEAR(loss.forward(pred, target).item(), want / 12.0, 1e-6 * want);
  check_loss(loss, pred, target, 1e-2);
}

// Mixed precision: a bf16 prediction against an f32 target computes in fp32 (the target keeps
// its precision) and returns a bf16 gradient.
TEST(LayersTest, MseLossWithHalfPredictionAndF32TargetComputesInF32) {
  const Tensor target = test::random_tensor({5, 7}, DType::f32, 82, -2.0f, 2.0f);
  const Tensor pred16 = test::random_tensor({5, 7}, DType::bf16, 83, -2.0f, 2.0f);
  Tensor pred32 = Tensor::empty({5, 7}, DType::f32);
  ops::cast(pred32, pred16);
  MSELoss mixed, wide;
  EXPECT_EQ(mixed.forward(pred16, target).item(), wide.forward(pred32, target).item());
  const Tensor d16 = mixed.backward(0.5f), d32 = wide.backward(0.5f);
  ASSERT_EQ(d16.dtype(), DType::bf16);
  Tensor expect = Tensor::empty({5, 7}, DType::bf16);
  ops::cast(expect, d32);
  EXPECT_EQ(d16.to_floats(), expect.to_floats());
  EXPECT_THROW(mixed.forward(pred16, Tensor::zeros({5, 6}, DType::f32)), stoker::Error);
}

TEST(LayersTest, NetworkWithLossEndToEndMatchesFiniteDifferences) {
  // d loss / d parameter through Sequential + CrossEntropyLoss, the way a Trainer calls them.
  manual_seed(9);
  Sequential net(make<Linear>(4, 6), make<GELU>(), make<LayerNorm>(6), make<Linear>(6, 3));
  randomize(net, 90, -0.8f, 0.8f);
  CrossEntropyLoss loss({.label_smoothing = 0.05f});
  const Tensor x = test::random_tensor({5, 4}, DType::f32, 91);
  const Tensor target = Tensor::from_vector<int64_t>({0, 2, 1, -100, 2}, {5});
  for (Parameter* p : net.parameters()) p->zero_grad();
  loss.forward(net.forward(x), target);
  net.backward(loss.backward());
  const auto value = [&] { return loss.forward(net.forward(x), target).item(); };
  for (const auto& [name, p] : net.named_parameters())
    EXPECT_TRUE(grads_agree(p->grad().to_floats(), numeric_grad(p->value(), 1e-2, value))) << name;
}

}  // namespace
}  // namespace stoker::nn
