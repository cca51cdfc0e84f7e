// nn::Linear with FP8 GEMMs on the CPU (the reference arithmetic of the GPU path): forward and
// backward equal an independent double-precision computation from the quantized operands
// (input and weight E4M3 at fp8_max / amax, the output gradient E5M2), stay near the fp32
// Linear, delayed scaling follows the amax history, a Checkpoint's recomputation gives the
// plain run's gradients bit for bit, and the fused GELU pair gives the separate modules' bits.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "stoker/core/half.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/ops/elementwise.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

using core::Fp8Format;

// x quantized to `F` at fp8_max / amax(x), read back as value * (1 / scale): what the GEMM sees.
template <Fp8Format F>
std::vector<double> quantized(const std::vector<float>& x) {
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = core::fp8_max(F) / amax, scale_inv = 1.0f / scale;
  std::vector<double> q(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    q[i] =
        static_cast<double>(core::fp8_bits_to_float<F>(core::float_to_fp8_bits<F>(x[i] * scale))) *
        scale_inv;
  return q;
}

double rel_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

TEST(LinearFp8Test, ForwardAndBackwardAreTheQuantizedOperandsProducts) {
  const int64_t n = 24, in = 40, out = 12;
  manual_seed(3);
  Linear lin(in, out);
  lin.set_fp8(true);
  EXPECT_TRUE(lin.fp8());
  EXPECT_NE(lin.describe().find("fp8"), std::string::npos);
  const Tensor x = test::random_tensor({n, in}, DType::f32, 5, -2.0f, 3.0f);
  const Tensor y = lin.forward(x);
  const std::vector<float> xv = x.to_floats(), wv = lin.weight().value().to_floats(),
                           bv = lin.bias().value().to_floats();
  const std::vector<double> xq = quantized<Fp8Format::e4m3>(xv),
                            wq = quantized<Fp8Format::e4m3>(wv);
  std::vector<double> want(n * out);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double s = bv[j];
      for (int64_t k = 0; k < in; ++k) s += xq[i * in + k] * wq[j * in + k];
      want[i * out + j] = s;
    }
  EXPECT_LT(rel_error(y.to_floats(), want), 1e-6);

  const Tensor dy = test::random_tensor({n, out}, DType::f32, 6, -1e-3f, 1e-3f);
  const Tensor dx = lin.backward(dy);
  const std::vector<float> dyv = dy.to_floats();
  const std::vector<double> dq = quantized<Fp8Format::e5m2>(dyv);
  std::vector<double> want_dx(n * in, 0.0), want_dw(out * in, 0.0), want_db(out, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      want_db[j] += dyv[i * out + j];  // the bias gradient reads the unquantized dy
      for (int64_t k = 0; k < in; ++k) {
        want_dx[i * in + k] += dq[i * out + j] * wq[j * in + k];
        want_dw[j * in + k] += dq[i * out + j] * xq[i * in + k];
      }
    }
  EXPECT_LT(rel_error(dx.to_floats(), want_dx), 1e-6);
  EXPECT_LT(rel_error(lin.weight().grad().to_floats(), want_dw), 1e-6);
  EXPECT_LT(rel_error(lin.bias().grad().to_floats(), want_db), 1e-6);

  // And near the fp32 Linear: a few per cent (3 mantissa bits in, 2 for the gradient).
  Linear ref(in, out);
  ref.weight().set_value(lin.weight().value());
  ref.bias().set_value(lin.bias().value());
  const Tensor yr = ref.forward(x), dxr = ref.backward(dy);
  const auto as_double = [](const Tensor& t) {
    const std::vector<float> v = t.to_floats();
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_LT(rel_error(y.to_floats(), as_double(yr)), 0.05);
  EXPECT_LT(rel_error(dx.to_floats(), as_double(dxr)), 0.15);
  EXPECT_GT(rel_error(y.to_floats(), as_double(yr)), 1e-4);  // it really ran in FP8
}

TEST(LinearFp8Test, DelayedScalingFollowsTheAmaxHistory) {
  Fp8Scaling s(Fp8Format::e4m3, {.amax_history = 2});
  const Tensor x = Tensor::from_floats({1.0f, -4.0f, 2.0f, 0.5f}, {2, 2});
  const Tensor x2 = Tensor::from_floats({1.0f, -16.0f, 2.0f, 0.5f}, {2, 2});
  const Tensor x3 = Tensor::from_floats({1.0f, 2.0f, 2.0f, 0.5f}, {2, 2});
  const Fp8Scaling::Cast c1 = s.cast(x, true, true);
  EXPECT_EQ(s.scale().item(), 448.0f / 4.0f);  // the first use fits its own amax
  EXPECT_EQ(c1.value.scale_inv.item(), 4.0f / 448.0f);
  EXPECT_EQ(c1.transposed.codes.shape(), Shape({2, 2}));
  s.cast(x2, true, false);  // quantized with the history's scale (amax 4): -16 saturates
  EXPECT_EQ(s.scale().item(), 448.0f / 4.0f);
  const Fp8Scaling::Cast again = s.cast(x2, true, false, /*new_use=*/false);
  EXPECT_EQ(s.scale().item(), 448.0f / 4.0f);  // a recomputation leaves the scale alone
  s.cast(x3, true, false);                     // now the 16 of x2 is in the history
  EXPECT_EQ(s.scale().item(), 448.0f / 16.0f);
  s.cast(x3, true, false);  // history {2, 16}
  EXPECT_EQ(s.scale().item(), 448.0f / 16.0f);
  s.cast(x3, true, false);  // history {2, 2}: the 16 left the window
  EXPECT_EQ(s.scale().item(), 448.0f / 2.0f);
  EXPECT_EQ(s.amax_history().to_floats(), (std::vector<float>{2.0f, 2.0f}));
  EXPECT_TRUE(test::throws_error_with([] { Fp8Scaling bad(Fp8Format::e4m3, {.amax_history = 0}); },
                                      {"amax_history", "at least 1"}));
}

std::unique_ptr<Sequential> mlp(bool fused) {
  manual_seed(9);
  auto m = std::make_unique<Sequential>();
  auto& fc = m->add(make<Linear>(32, 64));
  if (fused) {
    fc.set_activation(Activation::gelu);
  } else {
    m->add(make<GELU>());
  }
  auto& fc2 = m->add(make<Linear>(64, 16));
  if (fused) fc2.set_input_activation_from(&fc);
  EXPECT_EQ(set_linear_fp8(*m, true), 2);
  return m;
}

TEST(LinearFp8Test, FusedGeluPairGivesTheSeparateModulesBits) {
  const Tensor x = test::random_tensor({8, 32}, DType::f32, 1);
  const Tensor dy = test::random_tensor({8, 16}, DType::f32, 2);
  auto plain = mlp(false), fused = mlp(true);
  for (int step = 0; step < 2; ++step) {  // the second step runs on learnt (delayed) scales
    EXPECT_TRUE(test::bit_identical(fused->forward(x), plain->forward(x)));
    EXPECT_TRUE(test::bit_identical(fused->backward(dy), plain->backward(dy)));
  }
  const auto pp = plain->named_parameters(), fp = fused->named_parameters();
  ASSERT_EQ(pp.size(), fp.size());
  for (size_t i = 0; i < pp.size(); ++i)
    EXPECT_TRUE(test::bit_identical(fp[i].second->grad(), pp[i].second->grad())) << pp[i].first;
}

TEST(LinearFp8Test, CheckpointRecomputationGivesThePlainGradients) {
  const Tensor x = test::random_tensor({8, 32}, DType::f32, 3);
  const Tensor dy = test::random_tensor({8, 16}, DType::f32, 4);
  auto plain = mlp(false);
  auto body = mlp(false);
  Checkpoint ckpt(std::move(body));
  for (int step = 0; step < 3; ++step) {
    EXPECT_TRUE(test::bit_identical(ckpt.forward(x), plain->forward(x)));
    EXPECT_TRUE(test::bit_identical(ckpt.backward(dy), plain->backward(dy)));
  }
  const auto pp = plain->named_parameters(), cp = ckpt.named_parameters();
  ASSERT_EQ(pp.size(), cp.size());
  for (size_t i = 0; i < pp.size(); ++i)
    EXPECT_TRUE(test::bit_identical(cp[i].second->grad(), pp[i].second->grad())) << pp[i].first;
}

TEST(LinearFp8Test, KeepsItsCodesFromSelectiveRecomputationAndTurnsOff) {
  Linear lin(16, 16);
  lin.set_fp8(true);
  lin.forward(test::random_tensor({4, 16}, DType::f32, 5));
  EXPECT_FALSE(lin.release_saved_input());  // the FP8 copies stay; nothing to hand back
  lin.backward(test::random_tensor({4, 16}, DType::f32, 6));
  lin.set_fp8(false);
  EXPECT_FALSE(lin.fp8());
  const Tensor y = lin.forward(test::random_tensor({4, 16}, DType::f32, 5));
  EXPECT_TRUE(lin.release_saved_input());  // plain again
  EXPECT_EQ(y.shape(), Shape({4, 16}));
}

}  // namespace
}  // namespace stoker::nn
