// The fused residual add + layer norm on the GPU (ops/layernorm.h: add_layernorm_forward,
// add_layernorm_backward), outputs poisoned (NaN) first so an unwritten element fails:
// - against the CPU reference on random inputs, bf16/f16/f32, odd, GPT-2 and wide rows: the sum
//   bit-identical (one fp32 add, one rounding on both sides), the rest within the tolerances of
//   the plain layernorm's GPU test (fp32 on the GPU vs fp64 on the CPU);
// - against the GPU's own unfused pair (ops::add + layernorm_forward, layernorm_backward +
//   ops::add) to the bit, for aligned and misaligned tensors (including the mixes where the
//   fused op falls back to the pair);
// - in place (sum = x, dsum = dsum_in, dsum = dy) with the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "stoker/ops/elementwise.h"
#include "stoker/ops/layernorm.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::gpu;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

struct RowsCols {
  int64_t rows, cols;
};
// Odd widths (scalar path), 64/768/1024/1600 (16-byte Packs), 4099 and 4104 (a block per row,
// scalar and Packs).
const std::vector<RowsCols> kMatrices = {{1, 1},     {3, 7},     {4097, 33}, {64, 64}, {64, 768},
                                         {33, 1024}, {16, 1600}, {8, 4099},  {4, 4104}};

// A copy of host tensor `t` on the GPU, `offset` elements into its block (1 misaligns it).
Tensor dev(const Tensor& t, int64_t offset = 0) { return test::copy_at_offset(t, gpu(), offset); }

// A NaN-filled GPU tensor of `shape`, `offset` elements into its block.
Tensor dev_poisoned(const Shape& shape, DType d, int64_t offset = 0) {
  const Tensor t = test::empty_at_offset(shape.numel(), d, gpu(), offset).reshape(shape);
  test::poison(t);
  return t;
}

double ulp_rtol(DType d) {
  return d == DType::f16 ? std::ldexp(1.0, -10) : d == DType::bf16 ? std::ldexp(1.0, -7) : 0.0;
}
double ulp_atol(DType d) { return d == DType::f16 ? std::ldexp(1.0, -24) : 0.0; }

// |got - want| <= atol + rtol * |scale| elementwise, scale = |want| unless given; NaN fails.
::testing::AssertionResult close_to(const Tensor& got, const Tensor& want, double rtol, double atol,
                                    const std::vector<float>* scale = nullptr) {
  const std::vector<float> g = got.to_floats(), w = want.to_floats();
  if (g.size() != w.size())
    return ::testing::AssertionFailure() << got.str() << " vs " << want.str();
  for (size_t i = 0; i < g.size(); ++i) {
    const double s =
        scale ? std::max<double>(std::fabs((*scale)[i]), std::fabs(w[i])) : std::fabs(w[i]);
    const double err = std::fabs(static_cast<double>(g[i]) - w[i]);
    if (!(err <= atol + rtol * s))
      return ::testing::AssertionFailure() << "element " << i << ": gpu " << g[i] << ", cpu "
                                           << w[i] << " (tolerance " << atol + rtol * s << ")";
  }
  return ::testing::AssertionSuccess();
}

// Column sums of an n x c host tensor's magnitudes plus |init|: the scale of dgamma / dbeta.
std::vector<double> abs_column_sums(const std::vector<float>& v, const Tensor& init, int64_t c) {
  const std::vector<float> i0 = init.to_floats();
  std::vector<double> s(i0.size());
  for (size_t j = 0; j < s.size(); ++j) s[j] = std::fabs(i0[j]);
  for (size_t k = 0; k < v.size(); ++k) s[k % static_cast<size_t>(c)] += std::fabs(v[k]);
  return s;
}

::testing::AssertionResult column_sums_close(const Tensor& got, const Tensor& want,
                                             const std::vector<double>& abs_sums) {
  const std::vector<float> g = got.to_floats(), w = want.to_floats();
  for (size_t j = 0; j < g.size(); ++j) {
    const double tol = 4e-7 * abs_sums[j] + 1e-7;
    if (!(std::fabs(static_cast<double>(g[j]) - w[j]) <= tol))
      return ::testing::AssertionFailure() << "column " << j << ": gpu " << g[j] << ", cpu " << w[j]
                                           << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(AddLayerNormGpuTest, MatchesTheCpuReference) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 1200;
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : kMatrices) {
      const Shape s{rows, cols};
      const std::string what = std::string(dtype_name(d)) + " " + s.str();
      const Tensor x = test::random_normal_tensor(s, d, seed++, 0.5f, 1.5f);
      const Tensor r = test::random_normal_tensor(s, d, seed++, 0.5f, 1.0f);
      const Tensor dy = test::random_normal_tensor(s, d, seed++);
      const Tensor din = test::random_normal_tensor(s, d, seed++);
      const Tensor gamma = test::random_normal_tensor({cols}, DType::f32, seed++, 1.0f, 0.3f);
      const Tensor beta = test::random_normal_tensor({cols}, DType::f32, seed++);
      const Tensor dg0 = test::random_normal_tensor({cols}, DType::f32, seed++);
      const Tensor db0 = test::random_normal_tensor({cols}, DType::f32, seed++);

      // CPU reference (the fused op; the CPU test shows it equals the unfused pair).
      const Tensor sum = test::poisoned(s, d), y = test::poisoned(s, d),
                   dsum = test::poisoned(s, d);
      const Tensor mean = test::poisoned({rows}, DType::f32),
                   rstd = test::poisoned({rows}, DType::f32);
      const Tensor dg = dg0.clone(), db = db0.clone();
      add_layernorm_forward(y, sum, mean, rstd, x, r, gamma, beta, 1e-5f);
      add_layernorm_backward(dsum, dg, db, dy, din, sum, mean, rstd, gamma);
      const Tensor dx = test::poisoned(s, d), dg_unused = dg0.clone(), db_unused = db0.clone();
      layernorm_backward(dx, dg_unused, db_unused, dy, sum, mean, rstd, gamma);  // dx's scale

      const Tensor gsum = dev_poisoned(s, d), gy = dev_poisoned(s, d), gdsum = dev_poisoned(s, d);
      const Tensor gmean = dev_poisoned({rows}, DType::f32),
                   grstd = dev_poisoned({rows}, DType::f32);
      const Tensor gdg = dev(dg0), gdb = dev(db0), ggamma = dev(gamma);
      add_layernorm_forward(gy, gsum, gmean, grstd, dev(x), dev(r), ggamma, dev(beta), 1e-5f);
      add_layernorm_backward(gdsum, gdg, gdb, dev(dy), dev(din), gsum, gmean, grstd, ggamma);

      EXPECT_TRUE(bit_identical(gsum.to(Device::cpu()), sum)) << "sum " << what;
      EXPECT_TRUE(close_to(gmean, mean, 1e-6, 1e-6)) << "mean " << what;
      EXPECT_TRUE(close_to(grstd, rstd, 2e-6, 0.0)) << "rstd " << what;
      EXPECT_TRUE(close_to(gy, y, 1e-5 + ulp_rtol(d), 1e-5 + ulp_atol(d))) << "y " << what;
      // dsum = rounded(dx) + dsum_in: dx's error (as in the plain layernorm test, relative to
      // |dx|) plus one ulp of dx and one of the sum.
      const std::vector<float> dx_scale = dx.to_floats();
      EXPECT_TRUE(close_to(gdsum, dsum, 1e-5 + 2 * ulp_rtol(d), 2e-5 + 2 * ulp_atol(d), &dx_scale))
          << "dsum " << what;
      std::vector<float> xhat_dy;
      {
        const std::vector<float> sv = sum.to_floats(), gv = dy.to_floats(), m = mean.to_floats(),
                                 rs = rstd.to_floats();
        for (size_t k = 0; k < sv.size(); ++k) {
          const size_t row = k / static_cast<size_t>(cols);
          xhat_dy.push_back(gv[k] * (sv[k] - m[row]) * rs[row]);
        }
      }
      EXPECT_TRUE(column_sums_close(gdg, dg, abs_column_sums(xhat_dy, dg0, cols)))
          << "dgamma " << what;
      EXPECT_TRUE(column_sums_close(gdb, db, abs_column_sums(dy.to_floats(), db0, cols)))
          << "dbeta " << what;
    }
  }
}

TEST(AddLayerNormGpuTest, EqualsTheUnfusedGpuPairToTheBit) {
  STOKER_REQUIRE_GPU();
  struct Offsets {
    int64_t in, out, grad;  // x, residual, dy | sum, y | dsum, dsum_in
  };
  // All aligned, all misaligned, and the mixes that change (or would change) the Pack width.
  const Offsets kOffsets[] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  uint64_t seed = 1300;
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : kMatrices) {
      for (const Offsets& o : kOffsets) {
        const Shape s{rows, cols};
        const std::string what = std::string(dtype_name(d)) + " " + s.str() + " offsets " +
                                 std::to_string(o.in) + std::to_string(o.out) +
                                 std::to_string(o.grad);
        const Tensor x = dev(test::random_normal_tensor(s, d, seed++, 0.5f, 1.5f), o.in);
        const Tensor r = dev(test::random_normal_tensor(s, d, seed++), o.in);
        const Tensor dy = dev(test::random_normal_tensor(s, d, seed++), o.in);
        const Tensor din = dev(test::random_normal_tensor(s, d, seed++), o.grad);
        const Tensor gamma =
            dev(test::random_normal_tensor({cols}, DType::f32, seed++, 1.0f, 0.3f));
        const Tensor beta = dev(test::random_normal_tensor({cols}, DType::f32, seed++));
        const Tensor dg0 = test::random_normal_tensor({cols}, DType::f32, seed++);

        // Unfused: dx into a fresh (aligned) buffer, as nn::LayerNorm::backward allocates it.
        const Tensor usum = dev_poisoned(s, d, o.out), uy = dev_poisoned(s, d, o.out);
        const Tensor umean = dev_poisoned({rows}, DType::f32),
                     urstd = dev_poisoned({rows}, DType::f32);
        const Tensor udx = dev_poisoned(s, d), udsum = dev_poisoned(s, d, o.grad);
        const Tensor udg = dev(dg0), udb = dev(dg0);
        add(usum, x, r);
        layernorm_forward(uy, umean, urstd, usum, gamma, beta, 1e-5f);
        layernorm_backward(udx, udg, udb, dy, usum, umean, urstd, gamma);
        add(udsum, udx, din);

        const Tensor fsum = dev_poisoned(s, d, o.out), fy = dev_poisoned(s, d, o.out);
        const Tensor fmean = dev_poisoned({rows}, DType::f32),
                     frstd = dev_poisoned({rows}, DType::f32);
        const Tensor fdsum = dev_poisoned(s, d, o.grad);
        const Tensor fdg = dev(dg0), fdb = dev(dg0);
        add_layernorm_forward(fy, fsum, fmean, frstd, x, r, gamma, beta, 1e-5f);
        add_layernorm_backward(fdsum, fdg, fdb, dy, din, fsum, fmean, frstd, gamma);

        EXPECT_TRUE(bit_identical(fsum, usum)) << "sum " << what;
        EXPECT_TRUE(bit_identical(fy, uy)) << "y " << what;
        EXPECT_TRUE(bit_identical(fmean, umean)) << "mean " << what;
        EXPECT_TRUE(bit_identical(frstd, urstd)) << "rstd " << what;
        EXPECT_TRUE(bit_identical(fdsum, udsum)) << "dsum " << what;
        EXPECT_TRUE(bit_identical(fdg, udg)) << "dgamma " << what;
        EXPECT_TRUE(bit_identical(fdb, udb)) << "dbeta " << what;
      }
    }
  }
}

TEST(AddLayerNormGpuTest, InPlaceGivesTheSameBits) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 1400;
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : kMatrices) {
      const Shape s{rows, cols};
      const std::string what = std::string(dtype_name(d)) + " " + s.str();
      const Tensor hx = test::random_normal_tensor(s, d, seed++);
      const Tensor r = dev(test::random_normal_tensor(s, d, seed++));
      const Tensor hdy = test::random_normal_tensor(s, d, seed++);
      const Tensor hdin = test::random_normal_tensor(s, d, seed++);
      const Tensor gamma = dev(test::random_normal_tensor({cols}, DType::f32, seed++, 1.0f, 0.3f));
      const Tensor beta = dev(test::random_normal_tensor({cols}, DType::f32, seed++));

      const Tensor sum = dev_poisoned(s, d), y = dev_poisoned(s, d), dsum = dev_poisoned(s, d);
      const Tensor mean = dev_poisoned({rows}, DType::f32), rstd = dev_poisoned({rows}, DType::f32);
      const Tensor dg = Tensor::zeros({cols}, DType::f32, gpu()),
                   db = Tensor::zeros({cols}, DType::f32, gpu());
      add_layernorm_forward(y, sum, mean, rstd, dev(hx), r, gamma, beta, 1e-5f);
      add_layernorm_backward(dsum, dg, db, dev(hdy), dev(hdin), sum, mean, rstd, gamma);

      const Tensor x2 = dev(hx), y2 = dev_poisoned(s, d);
      add_layernorm_forward(y2, x2, mean, rstd, x2, r, gamma, beta, 1e-5f);  // sum over x
      EXPECT_TRUE(bit_identical(x2, sum)) << "sum = x " << what;
      EXPECT_TRUE(bit_identical(y2, y)) << "sum = x " << what;

      const Tensor dg2 = Tensor::zeros({cols}, DType::f32, gpu()),
                   db2 = Tensor::zeros({cols}, DType::f32, gpu());
      const Tensor din2 = dev(hdin);
      add_layernorm_backward(din2, dg2, db2, dev(hdy), din2, sum, mean, rstd, gamma);
      EXPECT_TRUE(bit_identical(din2, dsum)) << "dsum = dsum_in " << what;
      EXPECT_TRUE(bit_identical(dg2, dg)) << "dgamma, dsum = dsum_in " << what;

      const Tensor dg3 = Tensor::zeros({cols}, DType::f32, gpu()),
                   db3 = Tensor::zeros({cols}, DType::f32, gpu());
      const Tensor dy3 = dev(hdy);
      add_layernorm_backward(dy3, dg3, db3, dy3, dev(hdin), sum, mean, rstd, gamma);
      EXPECT_TRUE(bit_identical(dy3, dsum)) << "dsum = dy " << what;
      EXPECT_TRUE(bit_identical(dg3, dg)) << "dgamma, dsum = dy " << what;
      EXPECT_TRUE(bit_identical(db3, db)) << "dbeta, dsum = dy " << what;
    }
  }
}

}  // namespace
}  // namespace stoker::ops
