// RMS normalization on the GPU (ops/layernorm.h: rmsnorm_* and the fused add_rmsnorm_*), the
// outputs poisoned (NaN) first so an unwritten element fails:
// - against the CPU reference (fp64 statistics) in bf16/f16/f32 on odd, Llama-sized (2048, 3072,
//   4096) and wide rows: the residual sum bit-identical (one fp32 add, one rounding on both
//   sides); rstd within fp32 rounding; y, dx, dsum within one ulp of the dtype (h = x * rstd is
//   rounded to the dtype, and an rstd one fp32 ulp apart can move h to the neighbouring value)
//   plus the fp32 error of the row reduction; dweight within that ulp per term of its sum;
// - the fused ops against the GPU's own unfused pair (ops::add + rmsnorm_forward,
//   rmsnorm_backward + ops::add) to the bit on aligned tensors, also in place.
#include <gtest/gtest.h>

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
const std::vector<RowsCols> kMatrices = {{1, 1},     {3, 7},     {4097, 33}, {64, 64},
                                         {64, 2048}, {16, 3072}, {8, 4096},  {8, 4099}};

Tensor dev(const Tensor& t) { return t.to(gpu()); }
Tensor dev_poisoned(const Shape& shape, DType d) { return test::poisoned(shape, d, gpu()); }

double ulp(DType d) {
  return d == DType::f16 ? std::ldexp(1.0, -10) : d == DType::bf16 ? std::ldexp(1.0, -7) : 0.0;
}

// |got - want| <= tol_j for every column j of the [n, c] sums.
::testing::AssertionResult column_sums_close(const Tensor& got, const Tensor& want,
                                             const std::vector<double>& tol) {
  const std::vector<float> g = got.to_floats(), w = want.to_floats();
  for (size_t j = 0; j < g.size(); ++j) {
    if (!(std::fabs(static_cast<double>(g[j]) - w[j]) <= tol[j]))
      return ::testing::AssertionFailure() << "column " << j << ": gpu " << g[j] << ", cpu " << w[j]
                                           << " (tolerance " << tol[j] << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(RmsNormGpuTest, MatchesTheCpuReference) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 2100;
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : kMatrices) {
      for (const bool fused : {false, true}) {
        const Shape s{rows, cols};
        const std::string what =
            std::string(dtype_name(d)) + " " + s.str() + (fused ? " fused" : " plain");
        const Tensor x = test::random_normal_tensor(s, d, seed++, 0.5f, 1.5f);
        const Tensor r = test::random_normal_tensor(s, d, seed++, 0.5f, 1.0f);
        const Tensor dy = test::random_normal_tensor(s, d, seed++);
        const Tensor din = test::random_normal_tensor(s, d, seed++);
        const Tensor w = test::random_normal_tensor({cols}, DType::f32, seed++, 1.0f, 0.3f);
        const Tensor dw0 = test::random_normal_tensor({cols}, DType::f32, seed++);

        const Tensor sum = fused ? test::poisoned(s, d) : x, y = test::poisoned(s, d),
                     dx = test::poisoned(s, d), rstd = test::poisoned({rows}, DType::f32),
                     dw = dw0.clone();
        const Tensor gsum = fused ? dev_poisoned(s, d) : dev(x), gy = dev_poisoned(s, d),
                     gdx = dev_poisoned(s, d), grstd = dev_poisoned({rows}, DType::f32),
                     gdw = dev(dw0), gw = dev(w);
        if (fused) {
          add_rmsnorm_forward(y, sum, rstd, x, r, w, 1e-5f);
          add_rmsnorm_backward(dx, dw, dy, din, sum, rstd, w);
          add_rmsnorm_forward(gy, gsum, grstd, dev(x), dev(r), gw, 1e-5f);
          add_rmsnorm_backward(gdx, gdw, dev(dy), dev(din), gsum, grstd, gw);
          EXPECT_TRUE(bit_identical(gsum, sum)) << "sum " << what;
        } else {
          rmsnorm_forward(y, rstd, x, w, 1e-5f);
          rmsnorm_backward(dx, dw, dy, x, rstd, w);
          rmsnorm_forward(gy, grstd, gsum, gw, 1e-5f);
          rmsnorm_backward(gdx, gdw, dev(dy), gsum, grstd, gw);
        }
        test::expect_max_abs_close(grstd.to_floats(), rstd.to_floats(), 2e-6, "rstd " + what, 0);
        test::expect_max_abs_close(gy.to_floats(), y.to_floats(), 1e-5 + 2 * ulp(d), "y " + what);
        test::expect_max_abs_close(gdx.to_floats(), dx.to_floats(), 2e-5 + 2 * ulp(d), "dx " + what,
                                   1e-5);
        // dweight_j = sum_r dy * h: fp32 summation error, plus one ulp of h per term.
        std::vector<double> tol(static_cast<size_t>(cols));
        const std::vector<float> g = dy.to_floats(), sv = sum.to_floats(), rs = rstd.to_floats(),
                                 d0 = dw0.to_floats();
        for (size_t j = 0; j < tol.size(); ++j) tol[j] = 1e-6 + 4e-7 * std::fabs(d0[j]);
        for (size_t k = 0; k < g.size(); ++k) {
          const double term =
              std::fabs(g[k]) * std::fabs(sv[k]) * rs[k / static_cast<size_t>(cols)];
          tol[k % static_cast<size_t>(cols)] += term * (4e-7 + ulp(d));
        }
        EXPECT_TRUE(column_sums_close(gdw, dw, tol)) << "dweight " << what;
      }
    }
  }
}

TEST(RmsNormGpuTest, FusedEqualsTheUnfusedGpuPairToTheBit) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 2300;
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : kMatrices) {
      const Shape s{rows, cols};
      const std::string what = std::string(dtype_name(d)) + " " + s.str();
      const Tensor x = dev(test::random_normal_tensor(s, d, seed++, 0.5f, 1.5f));
      const Tensor r = dev(test::random_normal_tensor(s, d, seed++));
      const Tensor dy = dev(test::random_normal_tensor(s, d, seed++));
      const Tensor din = dev(test::random_normal_tensor(s, d, seed++));
      const Tensor w = dev(test::random_normal_tensor({cols}, DType::f32, seed++, 1.0f, 0.3f));
      const Tensor dw0 = test::random_normal_tensor({cols}, DType::f32, seed++);

      const Tensor usum = dev_poisoned(s, d), uy = dev_poisoned(s, d), udx = dev_poisoned(s, d),
                   udsum = dev_poisoned(s, d), urstd = dev_poisoned({rows}, DType::f32),
                   udw = dev(dw0);
      add(usum, x, r);
      rmsnorm_forward(uy, urstd, usum, w, 1e-5f);
      rmsnorm_backward(udx, udw, dy, usum, urstd, w);
      add(udsum, udx, din);

      const Tensor fy = dev_poisoned(s, d), frstd = dev_poisoned({rows}, DType::f32),
                   fdw = dev(dw0);
      const Tensor fsum = x.clone(), fdsum = din.clone();  // in place: sum over x, dsum over din
      add_rmsnorm_forward(fy, fsum, frstd, fsum, r, w, 1e-5f);
      add_rmsnorm_backward(fdsum, fdw, dy, fdsum, fsum, frstd, w);
      EXPECT_TRUE(bit_identical(fsum, usum)) << "sum " << what;
      EXPECT_TRUE(bit_identical(fy, uy)) << "y " << what;
      EXPECT_TRUE(bit_identical(frstd, urstd)) << "rstd " << what;
      EXPECT_TRUE(bit_identical(fdsum, udsum)) << "dsum " << what;
      EXPECT_TRUE(bit_identical(fdw, udw)) << "dweight " << what;
    }
  }
}

}  // namespace
}  // namespace stoker::ops
