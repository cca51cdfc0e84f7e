// nn::CausalSelfAttention on the CPU (nn/attention.h):
// - parameter names and shapes (alone and under a Sequential/Residual), describe();
// - gradients of L = sum(y * W) against central finite differences, for every parameter
//   element and every input element (f32);
// - inside nn::Checkpoint (and a Residual in a Sequential): outputs, input gradients and
//   parameter gradients bit-identical to the plain module, in f32 and bf16, over two
//   accumulated micro-batches; a forward inside a NoSaveScope keeps nothing;
// - set_training / to reach the children.
#include "stoker/nn/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "stoker/nn/containers.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

TEST(CausalSelfAttention, ParameterNamesMatchPyTorch) {
  manual_seed(1);
  CausalSelfAttention attn(12, 3);
  const auto named = attn.named_parameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "qkv.weight");
  EXPECT_EQ(named[0].second->shape(), (Shape{36, 12}));
  EXPECT_EQ(named[1].first, "qkv.bias");
  EXPECT_EQ(named[1].second->shape(), (Shape{36}));
  EXPECT_EQ(named[2].first, "proj.weight");
  EXPECT_EQ(named[2].second->shape(), (Shape{12, 12}));
  EXPECT_EQ(named[3].first, "proj.bias");
  EXPECT_EQ(attn.parameters().size(), 4u);
  EXPECT_EQ(attn.parameter_count(), 36 * 12 + 36 + 12 * 12 + 12);
  EXPECT_EQ(attn.describe(), "CausalSelfAttention(d_model=12, heads=3)");

  Sequential seq;
  seq.add(make<Residual>(make<CausalSelfAttention>(12, 3)));
  std::vector<std::string> names;
  for (const auto& [n, p] : seq.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.body.qkv.weight", "0.body.qkv.bias",
                                             "0.body.proj.weight", "0.body.proj.bias"}));
  EXPECT_TRUE(test::throws_error_with([] { CausalSelfAttention(10, 3); }, {"multiple", "heads=3"}));
}

TEST(CausalSelfAttention, SettingsReachTheChildren) {
  CausalSelfAttention attn(8, 2);
  attn.set_training(false);
  EXPECT_FALSE(attn.qkv().training());
  EXPECT_FALSE(attn.proj().training());
  attn.to(Device::cpu());
  EXPECT_EQ(attn.qkv().device(), Device::cpu());
}

// L = sum(forward(x) * w) in double.
double loss(CausalSelfAttention& m, const Tensor& x, const std::vector<float>& w) {
  NoSaveScope no_save;
  const std::vector<float> y = m.forward(x).to_floats();
  double l = 0.0;
  for (size_t i = 0; i < y.size(); ++i) l += static_cast<double>(y[i]) * w[i];
  return l;
}

TEST(CausalSelfAttention, GradientsMatchFiniteDifferences) {
  manual_seed(7);
  const int64_t b = 2, t = 5, c = 6, h = 2;
  CausalSelfAttention attn(c, h);
  const Tensor x = test::random_tensor({b, t, c}, DType::f32, 3);
  const Tensor w = test::random_tensor({b, t, c}, DType::f32, 4);
  const std::vector<float> wv = w.to_floats();
  for (Parameter* p : attn.parameters()) p->zero_grad();
  attn.forward(x);
  const std::vector<float> dx = attn.backward(w).to_floats();

  const float eps = 4e-3f;
  auto check = [&](const std::string& what, float analytic, float* slot,
                   const std::function<void()>& changed) {
    const float x0 = *slot;
    *slot = x0 + eps;
    changed();
    const double lp = loss(attn, x, wv);
    *slot = x0 - eps;
    changed();
    const double lm = loss(attn, x, wv);
    *slot = x0;
    changed();
    const double fd = (lp - lm) / (2.0 * eps);
    EXPECT_NEAR(analytic, fd, 2e-3 + 1e-2 * std::fabs(fd)) << what;
  };
  for (const auto& [name, p] : attn.named_parameters()) {
    const std::vector<float> g = p->grad().to_floats();
    float* v = static_cast<float*>(p->value().data());
    for (int64_t i = 0; i < p->numel(); ++i)
      check(name + "[" + std::to_string(i) + "]", g[i], v + i, [&p = p] { p->value_changed(); });
  }
  float* xv = static_cast<float*>(x.data());
  for (int64_t i = 0; i < x.numel(); ++i)
    check("x[" + std::to_string(i) + "]", dx[i], xv + i, [] {});
}

struct Pass {
  std::vector<Tensor> ys, dxs;
};

Pass run(Module& m, DType dtype, const Shape& xs) {
  for (Parameter* p : m.parameters()) p->zero_grad();
  Pass out;
  for (int i = 0; i < 2; ++i) {  // two micro-batches: gradients accumulate
    const Tensor x = test::random_tensor(xs, dtype, 50 + i);
    out.ys.push_back(m.forward(x));
    out.dxs.push_back(m.backward(test::random_tensor(xs, dtype, 60 + i)));
  }
  return out;
}

std::unique_ptr<Sequential> block_stack(bool checkpoint) {
  manual_seed(21);
  auto seq = make<Sequential>();
  for (int i = 0; i < 2; ++i) seq->add(make<Residual>(make<CausalSelfAttention>(16, 4)));
  if (checkpoint) EXPECT_EQ(checkpoint_every(*seq, 1), 2);
  return seq;
}

TEST(CausalSelfAttention, CheckpointGivesBitIdenticalGradients) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto plain = block_stack(false), ckpt = block_stack(true);
    const Pass a = run(*plain, dt, {3, 9, 16}), b = run(*ckpt, dt, {3, 9, 16});
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(test::bit_identical(b.ys[i], a.ys[i])) << "y of micro-batch " << i;
      EXPECT_TRUE(test::bit_identical(b.dxs[i], a.dxs[i])) << "dx of micro-batch " << i;
    }
    const auto pa = plain->named_parameters(), pb = ckpt->named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pb[i].first, pa[i].first);
      EXPECT_TRUE(test::bit_identical(pb[i].second->grad(), pa[i].second->grad()))
          << "gradient of " << pa[i].first;
    }
  }
}

TEST(CausalSelfAttention, NoSaveForwardKeepsNothing) {
  CausalSelfAttention attn(8, 2);
  const Tensor x = test::random_tensor({1, 4, 8}, DType::f32, 5);
  {
    NoSaveScope no_save;
    attn.forward(x);
  }
  EXPECT_TRUE(test::throws_error_with([&] { attn.backward(x); }, {"before forward"}));
}

}  // namespace
}  // namespace stoker::nn
