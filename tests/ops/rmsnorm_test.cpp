// RMS normalization on the CPU (ops/layernorm.h: rmsnorm_forward/backward and the fused
// add_rmsnorm_forward/backward):
// - the forward against Hugging Face's LlamaRMSNorm written out in the test with fp32
//   statistics (variance = mean(x^2), h = (x * rsqrt) cast to the dtype, y = weight * h): the
//   reference's fp64 statistics may round h to the neighbouring value of the dtype, nothing more;
// - the gradients against central finite differences of sum(y * r) in f32;
// - the fused op against ops::add + rmsnorm_forward and rmsnorm_backward + ops::add, to the bit,
//   also in place;
// - bad inputs refused with the op's name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "llama_reference.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layernorm.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::throws_error_with;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const std::vector<Shape> kShapes = {{1, 1}, {3, 7}, {5, 64}, {4, 768}, {2, 3, 40}, {2, 4099}};

int64_t rows_of(const Shape& s) { return s.numel() / s[s.rank() - 1]; }

TEST(RmsNormTest, ForwardMatchesLlamaRmsNormFormula) {
  uint32_t seed = 100;
  for (DType d : kFloatTypes) {
    for (const Shape& s : kShapes) {
      const int64_t c = s[s.rank() - 1], n = rows_of(s);
      const Tensor x = test::random_tensor(s, d, seed++, -3.0f, 3.0f);
      // bf16 values, as a bf16 checkpoint's weights are.
      const Tensor w = Tensor::from_floats(
          test::random_tensor({c}, DType::bf16, seed++, 0.5f, 1.5f).to_floats(), {c}, DType::f32);
      const Tensor y = test::poisoned(s, d), rstd = test::poisoned({n}, DType::f32);
      rmsnorm_forward(y, rstd, x, w, 1e-5f);
      const std::vector<float> xv = x.to_floats(), wv = w.to_floats(), yv = y.to_floats(),
                               rv = rstd.to_floats();
      for (int64_t r = 0; r < n; ++r) {
        float var = 0.0f;  // HF: hidden_states.to(float32).pow(2).mean(-1)
        for (int64_t j = 0; j < c; ++j) var += xv[r * c + j] * xv[r * c + j];
        var /= static_cast<float>(c);
        const float inv = 1.0f / std::sqrt(var + 1e-5f);
        EXPECT_NEAR(rv[r], inv, 1e-5 * inv) << dtype_name(d) << " " << s.str() << " row " << r;
        for (int64_t j = 0; j < c; ++j) {
          const size_t i = static_cast<size_t>(r * c + j);
          const float h = test::round_to(d, xv[i] * inv);
          const float want = test::round_to(d, wv[j] * h);
          // fp32 vs fp64 statistics: h (and so y) may be one ulp of the dtype apart.
          const double ulp = d == DType::f32 ? 4e-7 : d == DType::f16 ? 1.0 / 1024 : 1.0 / 128;
          ASSERT_NEAR(yv[i], want, 2.0 * ulp * std::fabs(want) + 1e-30)
              << dtype_name(d) << " " << s.str() << " element " << i;
        }
      }
    }
  }
}

TEST(RmsNormTest, ForwardRoundsHBeforeTheWeight) {
  // One row where the HF order (round h to bf16, then multiply) and multiplying first differ:
  // x = [1, 1 + 2^-7] (bf16), weight 1.5 -> h_1 is rounded, then times 1.5.
  const Tensor x = Tensor::from_floats({1.0f, 1.0078125f, 1.0f, 1.0f}, {1, 4}, DType::bf16);
  const Tensor w = Tensor::from_floats({1.5f, 1.5f, 1.5f, 1.5f}, {4}, DType::f32);
  const Tensor y = test::poisoned({1, 4}, DType::bf16), rstd = test::poisoned({1}, DType::f32);
  rmsnorm_forward(y, rstd, x, w, 0.0f);
  const std::vector<float> xv = x.to_floats(), yv = y.to_floats();
  const float inv = rstd.to_floats()[0];
  for (size_t j = 0; j < 4; ++j) {
    const float h = test::round_to(DType::bf16, xv[j] * inv);
    EXPECT_EQ(yv[j], test::round_to(DType::bf16, 1.5f * h)) << j;
  }
}

TEST(RmsNormTest, EqualsTransformersLlamaRmsNormInBf16) {
  // transformers' LlamaRMSNorm(64, eps=1e-5) in bfloat16 (tests/ops/llama_reference.py).
  const auto ref = test::load_llama_reference();
  ASSERT_FALSE(ref.empty()) << "tests/ops/llama_reference.txt missing";
  const Tensor x = Tensor::from_floats(ref.at("rmsnorm.x"), {8, 64}, DType::bf16);
  const Tensor dy = Tensor::from_floats(ref.at("rmsnorm.dy"), {8, 64}, DType::bf16);
  const Tensor w = Tensor::from_floats(ref.at("rmsnorm.weight"), {64}, DType::f32);
  const Tensor y = test::poisoned({8, 64}, DType::bf16), rstd = test::poisoned({8}, DType::f32);
  const Tensor dx = test::poisoned({8, 64}, DType::bf16), dw = Tensor::zeros({64}, DType::f32);
  rmsnorm_forward(y, rstd, x, w, 1e-5f);
  rmsnorm_backward(dx, dw, dy, x, rstd, w);
  // y: the same bits wherever the fp32 (transformers) and fp64 (here) statistics round h alike
  // (every element of this fixture), else one bf16 ulp. The gradients: transformers rounds dy *
  // weight and the weight gradient to bf16 (a bf16 model), here they stay fp32: within a few bf16
  // ulps.
  const std::vector<float> yv = y.to_floats(), want_y = ref.at("rmsnorm.y");
  int64_t same = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    same += yv[i] == want_y[i];
    EXPECT_NEAR(yv[i], want_y[i], std::ldexp(std::fabs(want_y[i]), -7)) << "y " << i;
  }
  EXPECT_EQ(same, static_cast<int64_t>(yv.size()));  // measured: every element
  test::expect_max_abs_close(dx.to_floats(), ref.at("rmsnorm.dx"), 3.0 / 128, "dx");
  test::expect_max_abs_close(dw.to_floats(), ref.at("rmsnorm.dweight"), 2.0 / 128, "dweight");
}

// sum(y * r) for x, in double.
double loss(const Tensor& x, const Tensor& w, const std::vector<float>& r) {
  const int64_t n = rows_of(x.shape());
  const Tensor y = Tensor::empty(x.shape(), DType::f32), rstd = Tensor::empty({n}, DType::f32);
  rmsnorm_forward(y, rstd, x, w, 1e-5f);
  const std::vector<float> yv = y.to_floats();
  double l = 0.0;
  for (size_t i = 0; i < yv.size(); ++i) l += static_cast<double>(yv[i]) * r[i];
  return l;
}

TEST(RmsNormTest, GradientsMatchFiniteDifferences) {
  for (const Shape& s : {Shape{3, 7}, Shape{2, 16}}) {
    const int64_t c = s[1], n = s[0];
    const Tensor x = test::random_tensor(s, DType::f32, 31, -2.0f, 2.0f);
    const Tensor w = test::random_tensor({c}, DType::f32, 32, 0.5f, 1.5f);
    const std::vector<float> r = test::random_floats(static_cast<size_t>(s.numel()), 33);
    const Tensor y = Tensor::empty(s, DType::f32), rstd = Tensor::empty({n}, DType::f32);
    rmsnorm_forward(y, rstd, x, w, 1e-5f);
    const Tensor dy = Tensor::from_floats(r, s, DType::f32);
    const Tensor dx = test::poisoned(s, DType::f32), dw = Tensor::zeros({c}, DType::f32);
    rmsnorm_backward(dx, dw, dy, x, rstd, w);
    const std::vector<float> dxv = dx.to_floats(), dwv = dw.to_floats();
    const float h = 1e-2f;
    for (int64_t i = 0; i < s.numel(); ++i) {
      std::vector<float> xp = x.to_floats(), xm = xp;
      xp[i] += h;
      xm[i] -= h;
      const double fd = (loss(Tensor::from_floats(xp, s, DType::f32), w, r) -
                         loss(Tensor::from_floats(xm, s, DType::f32), w, r)) /
                        (2.0 * h);
      EXPECT_NEAR(dxv[i], fd, 2e-3 * (1.0 + std::fabs(fd))) << s.str() << " dx " << i;
    }
    for (int64_t j = 0; j < c; ++j) {
      std::vector<float> wp = w.to_floats(), wm = wp;
      wp[j] += h;
      wm[j] -= h;
      const double fd = (loss(x, Tensor::from_floats(wp, {c}, DType::f32), r) -
                         loss(x, Tensor::from_floats(wm, {c}, DType::f32), r)) /
                        (2.0 * h);
      EXPECT_NEAR(dwv[j], fd, 2e-3 * (1.0 + std::fabs(fd))) << s.str() << " dweight " << j;
    }
  }
}

TEST(RmsNormTest, WeightGradientAccumulates) {
  const Shape s{6, 40};
  const Tensor x = test::random_tensor(s, DType::bf16, 41),
               dy = test::random_tensor(s, DType::bf16, 42);
  const Tensor w = test::random_tensor({40}, DType::f32, 43, 0.5f, 1.5f);
  const Tensor y = Tensor::empty(s, DType::bf16), rstd = Tensor::empty({6}, DType::f32);
  rmsnorm_forward(y, rstd, x, w, 1e-6f);
  const Tensor dw = Tensor::zeros({40}, DType::f32);
  const Tensor dx1 = test::poisoned(s, DType::bf16), dx2 = test::poisoned(s, DType::bf16);
  rmsnorm_backward(dx1, dw, dy, x, rstd, w);
  const std::vector<float> g1 = dw.to_floats();
  rmsnorm_backward(dx2, dw, dy, x, rstd, w);
  EXPECT_TRUE(bit_identical(dx1, dx2));
  const std::vector<float> g2 = dw.to_floats();
  // dweight_j = sum_r dy * h, h the forward's rounded x * rstd.
  const std::vector<float> xv = x.to_floats(), gv = dy.to_floats(), rv = rstd.to_floats();
  for (int64_t j = 0; j < 40; ++j) {
    double want = 0.0;
    for (int64_t r = 0; r < 6; ++r)
      want +=
          static_cast<double>(gv[r * 40 + j]) * test::round_to(DType::bf16, xv[r * 40 + j] * rv[r]);
    EXPECT_NEAR(g1[j], want, 1e-5 * (1.0 + std::fabs(want))) << j;
    EXPECT_EQ(g2[j], g1[j] + g1[j]) << j;
  }
}

struct Outputs {
  Tensor sum, y, rstd, dsum, dw;
};

TEST(RmsNormTest, FusedResidualAddEqualsUnfusedToTheBit) {
  uint32_t seed = 500;
  for (DType d : kFloatTypes) {
    for (const Shape& s : kShapes) {
      const std::string what = std::string(dtype_name(d)) + " " + s.str();
      const int64_t c = s[s.rank() - 1], n = rows_of(s);
      const Tensor x = test::random_tensor(s, d, seed++, -2.0f, 3.0f);
      const Tensor res = test::random_tensor(s, d, seed++, -3.0f, 2.0f);
      const Tensor dy = test::random_tensor(s, d, seed++), din = test::random_tensor(s, d, seed++);
      const Tensor w = test::random_tensor({c}, DType::f32, seed++, 0.5f, 1.5f);
      const Tensor dw0 = test::random_tensor({c}, DType::f32, seed++);
      auto fresh = [&] {
        return Outputs{test::poisoned(s, d), test::poisoned(s, d), test::poisoned({n}, DType::f32),
                       test::poisoned(s, d), dw0.clone()};
      };
      Outputs want = fresh();
      add(want.sum, x, res);
      rmsnorm_forward(want.y, want.rstd, want.sum, w, 1e-5f);
      const Tensor dx = test::poisoned(s, d);
      rmsnorm_backward(dx, want.dw, dy, want.sum, want.rstd, w);
      add(want.dsum, dx, din);

      Outputs got = fresh();
      add_rmsnorm_forward(got.y, got.sum, got.rstd, x, res, w, 1e-5f);
      add_rmsnorm_backward(got.dsum, got.dw, dy, din, got.sum, got.rstd, w);
      EXPECT_TRUE(bit_identical(got.sum, want.sum)) << what;
      EXPECT_TRUE(bit_identical(got.y, want.y)) << what;
      EXPECT_TRUE(bit_identical(got.rstd, want.rstd)) << what;
      EXPECT_TRUE(bit_identical(got.dsum, want.dsum)) << what;
      EXPECT_TRUE(bit_identical(got.dw, want.dw)) << what;

      // In place: sum over x, dsum over dsum_in.
      const Tensor x2 = x.clone(), din2 = din.clone(), dw2 = dw0.clone();
      const Tensor y2 = test::poisoned(s, d), rstd2 = test::poisoned({n}, DType::f32);
      add_rmsnorm_forward(y2, x2, rstd2, x2, res, w, 1e-5f);
      add_rmsnorm_backward(din2, dw2, dy, din2, x2, rstd2, w);
      EXPECT_TRUE(bit_identical(x2, want.sum)) << what << " in place";
      EXPECT_TRUE(bit_identical(y2, want.y)) << what << " in place";
      EXPECT_TRUE(bit_identical(din2, want.dsum)) << what << " in place";
      EXPECT_TRUE(bit_identical(dw2, want.dw)) << what << " in place";
    }
  }
}

TEST(RmsNormTest, BadInputsAreClearErrors) {
  const Tensor x = Tensor::zeros({4, 8}, DType::bf16), y = Tensor::zeros({4, 8}, DType::bf16);
  const Tensor rstd = Tensor::zeros({4}, DType::f32), w = Tensor::zeros({8}, DType::f32);
  EXPECT_TRUE(
      throws_error_with([&] { rmsnorm_forward(y, rstd, x, Tensor::zeros({7}, DType::f32), 1e-5f); },
                        {"rmsnorm_forward", "weight", "f32[8]"}));
  EXPECT_TRUE(
      throws_error_with([&] { rmsnorm_forward(y, Tensor::zeros({3}, DType::f32), x, w, 1e-5f); },
                        {"rmsnorm_forward", "rstd", "f32[4]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        rmsnorm_forward(Tensor::zeros({4, 8}, DType::f32), rstd, x, w, 1e-5f);
      },
      {"rmsnorm_forward", "y"}));
  EXPECT_TRUE(throws_error_with(
      [&] { rmsnorm_forward(y, rstd, x, Tensor::zeros({8}, DType::bf16), 1e-5f); },
      {"rmsnorm_forward", "weight", "f32"}));
  EXPECT_TRUE(throws_error_with([&] { rmsnorm_forward(y, rstd, x, w, -1.0f); },
                                {"rmsnorm_forward", "eps"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        rmsnorm_forward(y, rstd, Tensor::zeros({4, 8}, DType::i32), w, 1e-5f);
      },
      {"rmsnorm_forward", "x"}));
  EXPECT_TRUE(throws_error_with([&] { rmsnorm_backward(x, w.clone(), y, x, rstd, w); },
                                {"rmsnorm_backward", "dx", "overlaps"}));
  EXPECT_TRUE(throws_error_with([&] { add_rmsnorm_forward(x, y, rstd, x, y, w, 1e-5f); },
                                {"add_rmsnorm_forward", "y", "overlaps"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        add_rmsnorm_backward(y, w.clone(), y, Tensor::zeros({4, 9}, DType::bf16), x, rstd, w);
      },
      {"add_rmsnorm_backward", "dsum_in"}));
}

}  // namespace
}  // namespace stoker::ops
