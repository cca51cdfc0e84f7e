// The nn ops on the GPU against the CPU reference, on fresh random inputs, odd sizes, aligned
// and misaligned (offset by one element) views, with outputs poisoned first:
// - BIT-identical where both backends run the same per-element math (ops/nn_math.h): ReLU, f32
//   GELU, dropout (same Philox mask), add_bias, MSE gradient, embedding lookup; bf16/f16 GELU
//   (a faster fp32 path on the GPU) within one ulp of the output dtype;
// - within a stated tolerance where the GPU reduces in fp32 and the CPU in fp64 (bias_grad,
//   layernorm, cross-entropy, MSE loss, embedding gradient — which uses float atomics);
// - bitwise reproducible run to run for every reduction that promises it (bias_grad, layernorm's
//   dgamma/dbeta, the cross-entropy and MSE losses), and free of host syncs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "stoker/ops/activation.h"
#include "stoker/ops/embedding.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layernorm.h"
#include "stoker/ops/loss.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

using test::bit_identical;
using test::gpu;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr int64_t kSizes[] = {1, 7, 1023, 4097, (1 << 20) + 3};

struct RowsCols {
  int64_t rows, cols;
};
// 64 x 64 and 8 x 4099 add an aligned vector path and the wide-row (block per row) path.
const std::vector<RowsCols> kMatrices = {{1, 1},     {3, 7},   {129, 1000},
                                         {4097, 33}, {64, 64}, {8, 4099}};

std::string label(DType d, int64_t rows, int64_t cols, int64_t offset) {
  return std::string(dtype_name(d)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
         " offset " + std::to_string(offset);
}

// A copy of host tensor `t` on the GPU, `offset` elements into its block (1 misaligns it).
Tensor dev(const Tensor& t, int64_t offset = 0) { return test::copy_at_offset(t, gpu(), offset); }

// A NaN-filled GPU tensor of `shape`, `offset` elements into its block.
Tensor dev_poisoned(const Shape& shape, DType d, int64_t offset = 0) {
  const Tensor t = test::empty_at_offset(shape.numel(), d, gpu(), offset).reshape(shape);
  test::poison(t);
  return t;
}

Tensor host_poisoned(const Shape& shape, DType d) { return test::poisoned(shape, d); }

// |got - want| <= atol + rtol * |want| elementwise (NaN must match NaN); reports the worst.
::testing::AssertionResult close_to(const Tensor& got, const Tensor& want, double rtol,
                                    double atol) {
  const std::vector<float> g = got.to_floats(), w = want.to_floats();
  if (g.size() != w.size())
    return ::testing::AssertionFailure() << got.str() << " vs " << want.str();
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(static_cast<double>(g[i]) - w[i]);
    const bool ok = std::isnan(w[i]) ? std::isnan(g[i])
                                     : !std::isnan(g[i]) && err <= atol + rtol * std::fabs(w[i]);
    if (!std::isnan(err)) worst = std::max(worst, err);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (std::getenv("STOKER_TEST_VERBOSE") != nullptr) {  // how tight the tolerance is
    double ratio = 0.0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double err = std::fabs(static_cast<double>(g[i]) - w[i]);
      if (!std::isnan(err)) ratio = std::max(ratio, err / (atol + rtol * std::fabs(w[i])));
    }
    std::printf("close_to %s: max error %.3g = %.3g of the tolerance\n", got.str().c_str(), worst,
                ratio);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const size_t f = static_cast<size_t>(first);
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements differ; first at " << first << ": gpu " << g[f]
         << ", cpu " << w[f] << " (max abs error " << worst << ")";
}

// One unit in the last place of the dtype, relative (a value computed in fp32 on one side and
// fp64 on the other may round to neighbouring half values).
double half_ulp_rtol(DType d) {
  return d == DType::f16 ? std::ldexp(1.0, -10) : d == DType::bf16 ? std::ldexp(1.0, -7) : 0.0;
}
// ... and below f16's normal range (6.1e-5) one subnormal step, absolute.
double half_ulp_atol(DType d) { return d == DType::f16 ? std::ldexp(1.0, -24) : 0.0; }

Tensor index_tensor(DType d, const std::vector<int64_t>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (d == DType::i32)
    return Tensor::from_vector<int32_t>(std::vector<int32_t>(v.begin(), v.end()), {n});
  return Tensor::from_vector<int64_t>(v, {n});
}

std::vector<int64_t> random_ids(int64_t n, int64_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::uniform_int_distribution<int64_t>(0, hi - 1)(gen);
  return v;
}

// Bound for a column sum computed in fp32 on the GPU vs fp64 on the CPU: a few ulps of the sum
// of magnitudes of what was added (`abs_sums[j]`).
::testing::AssertionResult column_sums_close(const Tensor& got, const Tensor& want,
                                             const std::vector<double>& abs_sums) {
  const std::vector<float> g = got.to_floats(), w = want.to_floats();
  if (std::getenv("STOKER_TEST_VERBOSE") != nullptr) {
    double ratio = 0.0;
    for (size_t j = 0; j < g.size(); ++j)
      ratio = std::max(ratio,
                       std::fabs(static_cast<double>(g[j]) - w[j]) / (4e-7 * abs_sums[j] + 1e-7));
    std::printf("column sums %s: max error = %.3g of the tolerance\n", got.str().c_str(), ratio);
  }
  for (size_t j = 0; j < g.size(); ++j) {
    const double tol = 4e-7 * abs_sums[j] + 1e-7;
    if (!(std::fabs(static_cast<double>(g[j]) - w[j]) <= tol))
      return ::testing::AssertionFailure() << "column " << j << ": gpu " << g[j] << ", cpu " << w[j]
                                           << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// sum_r |f(r, j)| + |init[j]| for an n x c host tensor.
std::vector<double> abs_column_sums(const Tensor& t, const Tensor& init, int64_t c) {
  const std::vector<float> v = t.to_floats(), i0 = init.to_floats();
  std::vector<double> s(i0.begin(), i0.end());
  for (double& x : s) x = std::fabs(x);
  for (size_t k = 0; k < v.size(); ++k) s[k % static_cast<size_t>(c)] += std::fabs(v[k]);
  return s;
}

// ---------------------------------------------------------------------------------------------

TEST(NnOpsGpuTest, ReluAndGeluAreBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        const Tensor x = test::random_normal_tensor({n}, d, seed++, 0.0f, 3.0f);
        const Tensor dy = test::random_normal_tensor({n}, d, seed++, 0.0f, 1.0f);
        const std::string what = std::string(dtype_name(d)) + " n " + std::to_string(n) +
                                 " offset " + std::to_string(offset);
        const Tensor gx = dev(x, offset), gdy = dev(dy, 1 - offset);
        // ReLU
        const Tensor y = host_poisoned({n}, d), dx = host_poisoned({n}, d);
        relu_forward(y, x);
        relu_backward(dx, dy, y);
        const Tensor gy = dev_poisoned({n}, d, offset), gdx = dev_poisoned({n}, d, offset);
        relu_forward(gy, gx);
        relu_backward(gdx, gdy, gy);
        ASSERT_TRUE(bit_identical(gy, y)) << "relu " << what;
        ASSERT_TRUE(bit_identical(gdx, dx)) << "relu' " << what;
        // GELU
        gelu_forward(y, x);
        gelu_backward(dx, dy, x);
        gelu_forward(gy, gx);
        gelu_backward(gdx, gdy, gx);
        if (d == DType::f32) {
          ASSERT_TRUE(bit_identical(gy, y)) << "gelu " << what;
          ASSERT_TRUE(bit_identical(gdx, dx)) << "gelu' " << what;
        } else {
          // One ulp of the output dtype; the derivative cancels near x = -0.75 (an absolute
          // term of the fp32 error times |dy| <= ~5).
          ASSERT_TRUE(close_to(gy, y, half_ulp_rtol(d), 1e-30 + half_ulp_atol(d)))
              << "gelu " << what;
          ASSERT_TRUE(close_to(gdx, dx, half_ulp_rtol(d), 1e-5 + half_ulp_atol(d)))
              << "gelu' " << what;
        }
      }
    }
  }
}

TEST(NnOpsGpuTest, ActivationsInPlace) {
  STOKER_REQUIRE_GPU();
  for (DType d : kFloatTypes) {
    const Tensor x = test::random_normal_tensor({4097}, d, 7, 0.0f, 2.0f);
    const Tensor dy = test::random_normal_tensor({4097}, d, 8);
    const Tensor gx = dev(x), gdy = dev(dy);
    const Tensor gdy_out = dev_poisoned({4097}, d, 0);
    gelu_backward(gdy_out, gdy, gx);  // out of place: what in place must reproduce
    gelu_backward(dy, dy, x);
    gelu_backward(gdy, gdy, gx);
    if (d == DType::f32) EXPECT_TRUE(bit_identical(gdy, dy)) << dtype_name(d);
    EXPECT_TRUE(bit_identical(gdy, gdy_out)) << dtype_name(d);
    relu_forward(x, x);
    relu_forward(gx, gx);
    EXPECT_TRUE(bit_identical(gx, x)) << dtype_name(d);
  }
}

TEST(NnOpsGpuTest, DropoutMasksAreBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (float p : {0.0f, 0.3f, 0.9f}) {
        for (int64_t offset : {0, 1}) {
          const uint64_t s = 77 + seed, philox_offset = 5 * seed;
          const Tensor x = test::random_normal_tensor({n}, d, seed++);
          const Tensor dy = test::random_normal_tensor({n}, d, seed++);
          const Tensor y = host_poisoned({n}, d), dx = host_poisoned({n}, d);
          dropout_forward(y, x, p, s, philox_offset);
          dropout_backward(dx, dy, p, s, philox_offset);
          const Tensor gy = dev_poisoned({n}, d, offset), gdx = dev_poisoned({n}, d, 0);
          dropout_forward(gy, dev(x, offset), p, s, philox_offset);
          dropout_backward(gdx, dev(dy, offset), p, s, philox_offset);
          const std::string what = std::string(dtype_name(d)) + " n " + std::to_string(n) + " p " +
                                   std::to_string(p) + " offset " + std::to_string(offset);
          ASSERT_TRUE(bit_identical(gy, y)) << what;
          ASSERT_TRUE(bit_identical(gdx, dx)) << what;
        }
      }
    }
  }
}

TEST(NnOpsGpuTest, AddBiasIsBitIdenticalToCpu) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 200;
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : kMatrices) {
      for (int64_t offset : {0, 1}) {
        const Tensor y = test::random_normal_tensor({rows, cols}, d, seed++, 0.0f, 3.0f);
        const Tensor b = test::random_normal_tensor({cols}, DType::f32, seed++);
        const Tensor gy = dev(y, offset);
        add_bias(y, b);
        add_bias(gy, dev(b, offset));
        ASSERT_TRUE(bit_identical(gy, y)) << label(d, rows, cols, offset);
      }
    }
  }
}

TEST(NnOpsGpuTest, BiasGradMatchesCpuAndIsDeterministic) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 300;
  std::vector<RowsCols> shapes = kMatrices;
  shapes.push_back({100003, 8});  // many row chunks, few columns
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : shapes) {
      for (int64_t offset : {0, 1}) {
        const Tensor dy = test::random_normal_tensor({rows, cols}, d, seed++);
        const Tensor db0 = test::random_normal_tensor({cols}, DType::f32, seed++);
        const Tensor db = db0.clone();
        bias_grad(db, dy);
        const Tensor gdy = dev(dy, offset);
        const Tensor g1 = dev(db0, offset), g2 = dev(db0, 0);
        bias_grad(g1, gdy);
        bias_grad(g2, gdy);
        const std::string what = label(d, rows, cols, offset);
        ASSERT_TRUE(column_sums_close(g1, db, abs_column_sums(dy, db0, cols))) << what;
        ASSERT_TRUE(bit_identical(g1, g2)) << "run to run " << what;
      }
    }
  }
}

TEST(NnOpsGpuTest, LayerNormMatchesCpuAndParameterGradsAreDeterministic) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 400;
  for (DType d : kFloatTypes) {
    for (const auto& [rows, cols] : kMatrices) {
      for (int64_t offset : {0, 1}) {
        const Shape s{rows, cols};
        const Tensor x = test::random_normal_tensor(s, d, seed++, 1.0f, 2.0f);
        const Tensor dy = test::random_normal_tensor(s, d, seed++);
        const Tensor gamma = test::random_normal_tensor({cols}, DType::f32, seed++, 1.0f, 0.3f);
        const Tensor beta = test::random_normal_tensor({cols}, DType::f32, seed++);
        const Tensor dg0 = test::random_normal_tensor({cols}, DType::f32, seed++);
        const Tensor db0 = test::random_normal_tensor({cols}, DType::f32, seed++);
        const std::string what = label(d, rows, cols, offset);

        const Tensor y = host_poisoned(s, d), dx = host_poisoned(s, d);
        const Tensor mean = host_poisoned({rows}, DType::f32),
                     rstd = host_poisoned({rows}, DType::f32);
        const Tensor dg = dg0.clone(), db = db0.clone();
        layernorm_forward(y, mean, rstd, x, gamma, beta, 1e-5f);
        layernorm_backward(dx, dg, db, dy, x, mean, rstd, gamma);

        const Tensor gx = dev(x, offset), gdy = dev(dy, offset), ggamma = dev(gamma);
        const Tensor gy = dev_poisoned(s, d, offset), gdx = dev_poisoned(s, d, offset);
        const Tensor gmean = dev_poisoned({rows}, DType::f32),
                     grstd = dev_poisoned({rows}, DType::f32);
        const Tensor gdg = dev(dg0), gdb = dev(db0), gdg2 = dev(dg0), gdb2 = dev(db0);
        layernorm_forward(gy, gmean, grstd, gx, ggamma, dev(beta), 1e-5f);
        layernorm_backward(gdx, gdg, gdb, gdy, gx, gmean, grstd, ggamma);
        layernorm_backward(gdx, gdg2, gdb2, gdy, gx, gmean, grstd, ggamma);

        // fp32 two-pass statistics vs fp64: a few ulps.
        EXPECT_TRUE(close_to(gmean, mean, 1e-6, 1e-6)) << "mean " << what;
        EXPECT_TRUE(close_to(grstd, rstd, 2e-6, 0.0)) << "rstd " << what;
        // y = xhat * gamma + beta with |xhat| up to ~5: a few ulps of its largest term.
        EXPECT_TRUE(close_to(gy, y, 1e-5 + half_ulp_rtol(d), 1e-5 + half_ulp_atol(d)))
            << "y " << what;
        // dx = rstd * (g - mean(g) - xhat mean(g xhat)): cancelling terms of size ~|g|.
        EXPECT_TRUE(close_to(gdx, dx, 1e-5 + half_ulp_rtol(d), 2e-5 + half_ulp_atol(d)))
            << "dx " << what;
        std::vector<float> xhat_dy;  // |dy * xhat|, for the dgamma bound
        {
          const std::vector<float> xv = x.to_floats(), gv = dy.to_floats(), m = mean.to_floats(),
                                   r = rstd.to_floats();
          for (size_t k = 0; k < xv.size(); ++k) {
            const size_t row = k / static_cast<size_t>(cols);
            xhat_dy.push_back(std::fabs(gv[k] * (xv[k] - m[row]) * r[row]));
          }
        }
        EXPECT_TRUE(
            column_sums_close(gdg, dg, abs_column_sums(Tensor::from_floats(xhat_dy, s), dg0, cols)))
            << "dgamma " << what;
        EXPECT_TRUE(column_sums_close(gdb, db, abs_column_sums(dy, db0, cols))) << "dbeta " << what;
        EXPECT_TRUE(bit_identical(gdg, gdg2)) << "dgamma run to run " << what;
        EXPECT_TRUE(bit_identical(gdb, gdb2)) << "dbeta run to run " << what;
      }
    }
  }
}

TEST(NnOpsGpuTest, EmbeddingLookupIsBitIdenticalAndGradientMatches) {
  STOKER_REQUIRE_GPU();
  uint32_t seed = 500;
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> cases = {
      {1, 1, 1}, {10, 7, 15}, {1000, 33, 4097}, {50, 128, 1023}, {7, 64, 100000}};
  for (DType id_type : {DType::i32, DType::i64}) {
    for (DType out : kFloatTypes) {
      for (const auto& [v, dim, n] : cases) {
        for (int64_t offset : {0, 1}) {
          const Tensor ids = index_tensor(id_type, random_ids(n, v, seed++));
          const Tensor table = test::random_normal_tensor({v, dim}, DType::f32, seed++);
          const Tensor y = host_poisoned({n, dim}, out);
          embedding_forward(y, ids, table);
          const Tensor gy = dev_poisoned({n, dim}, out, offset);
          const Tensor gtable = dev(table, offset);
          embedding_forward(gy, dev(ids), gtable);
          const std::string what = std::string(dtype_name(out)) + " V " + std::to_string(v) +
                                   " D " + std::to_string(dim) + " N " + std::to_string(n) +
                                   " offset " + std::to_string(offset);
          ASSERT_TRUE(bit_identical(gy, y)) << what;

          // Gradient: float atomics on the GPU, ordered fp32 adds on the CPU. Repeated ids add in
          // different orders: bound by ~8 ulps of the sum of magnitudes added into each element.
          const Tensor dy = test::random_normal_tensor({n, dim}, out, seed++);
          const Tensor dt0 = test::random_normal_tensor({v, dim}, DType::f32, seed++);
          const Tensor dt = dt0.clone();
          embedding_backward(dt, dy, ids);
          const Tensor gdt = dev(dt0, offset);
          embedding_backward(gdt, dev(dy, offset), dev(ids));
          std::vector<float> mag = dt0.to_floats();
          for (float& m : mag) m = std::fabs(m);
          {
            const std::vector<float> g = dy.to_floats();
            std::vector<int64_t> iv;
            if (ids.dtype() == DType::i64) {
              iv = ids.to_vector<int64_t>();
            } else {
              const std::vector<int32_t> i32 = ids.to_vector<int32_t>();
              iv.assign(i32.begin(), i32.end());
            }
            for (int64_t r = 0; r < n; ++r)
              for (int64_t j = 0; j < dim; ++j)
                mag[static_cast<size_t>(iv[static_cast<size_t>(r)] * dim + j)] +=
                    std::fabs(g[static_cast<size_t>(r * dim + j)]);
          }
          const std::vector<float> got = gdt.to_floats(), want = dt.to_floats();
          for (size_t k = 0; k < got.size(); ++k) {
            const double tol = 1e-6 * mag[k] + 1e-7;
            ASSERT_LE(std::fabs(static_cast<double>(got[k]) - want[k]), tol) << what << " at " << k;
          }
        }
      }
    }
  }
}

TEST(NnOpsGpuTest, EmbeddingOutOfRangeIdWritesNanRows) {
  STOKER_REQUIRE_GPU();
  const Tensor table = test::random_normal_tensor({10, 8}, DType::f32, 3);
  const Tensor ids = index_tensor(DType::i64, {1, 10, -1, 9});
  const Tensor gy = dev_poisoned({4, 8}, DType::f32);
  ops::fill(gy, 0.0);
  embedding_forward(gy, dev(ids), dev(table));
  const std::vector<float> y = gy.to_floats(), t = table.to_floats();
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(y[j], t[8 + j]);
    EXPECT_TRUE(std::isnan(y[8 + j]));
    EXPECT_TRUE(std::isnan(y[16 + j]));
    EXPECT_EQ(y[24 + j], t[72 + j]);
  }
  // The backward skips the bad rows instead of writing out of bounds.
  const Tensor gdt = dev(Tensor::zeros({10, 8}, DType::f32));
  embedding_backward(gdt, dev(Tensor::from_floats(std::vector<float>(32, 1.0f), {4, 8})), dev(ids));
  const std::vector<float> dt = gdt.to_floats();
  float total = 0.0f;
  for (float v : dt) total += v;
  EXPECT_EQ(total, 16.0f);
}

TEST(NnOpsGpuTest, CrossEntropyMatchesCpuAndLossIsDeterministic) {
  STOKER_REQUIRE_GPU();
  uint32_t seed = 600;
  std::vector<RowsCols> shapes = kMatrices;
  shapes.push_back({5, 50257});  // a vocabulary-sized row (block per row)
  for (DType d : kFloatTypes) {
    for (DType td : {DType::i32, DType::i64}) {
      for (const auto& [n, c] : shapes) {
        for (float s : {0.0f, 0.1f}) {
          const int64_t offset = (seed % 2);
          const Tensor logits = test::random_normal_tensor({n, c}, d, seed++, 0.0f, 3.0f);
          std::vector<int64_t> t = random_ids(n, c, seed++);
          for (size_t i = 1; i < t.size(); i += 3) t[i] = -100;  // ignored rows
          const Tensor target = index_tensor(td, t);
          const Tensor loss = host_poisoned({}, DType::f32), count = host_poisoned({}, DType::f32);
          const Tensor lse = host_poisoned({n}, DType::f32), dl = host_poisoned({n, c}, d);
          cross_entropy_forward(loss, count, lse, logits, target, -100, s);
          cross_entropy_backward(dl, logits, target, lse, count, -100, s, 0.5f);

          const Tensor gl = dev(logits, offset), gt = dev(target);
          const Tensor gloss = dev_poisoned({}, DType::f32), gcount = dev_poisoned({}, DType::f32);
          const Tensor glse = dev_poisoned({n}, DType::f32), gdl = dev_poisoned({n, c}, d, offset);
          const Tensor gloss2 = dev_poisoned({}, DType::f32),
                       gcount2 = dev_poisoned({}, DType::f32);
          const Tensor glse2 = dev_poisoned({n}, DType::f32);
          const uint64_t syncs = core::host_sync_count();
          cross_entropy_forward(gloss, gcount, glse, gl, gt, -100, s);
          cross_entropy_backward(gdl, gl, gt, glse, gcount, -100, s, 0.5f);
          cross_entropy_forward(gloss2, gcount2, glse2, gl, gt, -100, s);
          EXPECT_EQ(core::host_sync_count(), syncs) << "cross-entropy synced the host";

          const std::string what = label(d, n, c, offset) + " s " + std::to_string(s);
          EXPECT_EQ(gcount.item(), count.item()) << what;
          // fp32 row sums and means over up to 4097 rows vs fp64.
          EXPECT_TRUE(close_to(gloss, loss, 2e-6, 0.0)) << "loss " << what;
          EXPECT_TRUE(close_to(glse, lse, 1e-6, 1e-6)) << "lse " << what;
          // dlogits = (p - target) * scale / count: exp of (x - lse) in fp32, lse within 1e-6.
          const double unit = 0.5 / std::max(1.0, count.item());
          EXPECT_TRUE(close_to(gdl, dl, 1e-5 + half_ulp_rtol(d), 1e-6 * unit + half_ulp_atol(d)))
              << "dlogits " << what;
          EXPECT_TRUE(bit_identical(gloss, gloss2)) << "loss run to run " << what;
          EXPECT_TRUE(bit_identical(glse, glse2)) << "lse run to run " << what;
        }
      }
    }
  }
}

TEST(NnOpsGpuTest, CrossEntropyBadTargetIsNanAndAllIgnoredIsNan) {
  STOKER_REQUIRE_GPU();
  const Tensor logits = dev(test::random_normal_tensor({4, 3}, DType::f32, 9));
  const Tensor loss = dev_poisoned({}, DType::f32), count = dev_poisoned({}, DType::f32);
  const Tensor lse = dev_poisoned({4}, DType::f32), dl = dev_poisoned({4, 3}, DType::f32);
  const Tensor bad = dev(index_tensor(DType::i64, {0, -100, 3, 1}));
  cross_entropy_forward(loss, count, lse, logits, bad, -100, 0.0f);
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_EQ(count.item(), 3.0);
  cross_entropy_backward(dl, logits, bad, lse, count, -100, 0.0f, 1.0f);
  const std::vector<float> d = dl.to_floats();
  EXPECT_EQ(d[3], 0.0f);          // ignored row: zeros
  EXPECT_TRUE(std::isnan(d[6]));  // bad row: NaN
  EXPECT_FALSE(std::isnan(d[0]));

  const Tensor ignored = dev(index_tensor(DType::i32, {-100, -100, -100, -100}));
  cross_entropy_forward(loss, count, lse, logits, ignored, -100, 0.1f);
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_EQ(count.item(), 0.0);
  cross_entropy_backward(dl, logits, ignored, lse, count, -100, 0.1f, 1.0f);
  for (float v : dl.to_floats()) EXPECT_EQ(v, 0.0f);
}

TEST(NnOpsGpuTest, MseMatchesCpuAndIsDeterministic) {
  STOKER_REQUIRE_GPU();
  uint64_t seed = 700;
  for (DType d : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        const Tensor p = test::random_normal_tensor({n}, d, seed++);
        const Tensor t = test::random_normal_tensor({n}, d, seed++);
        const Tensor loss = host_poisoned({}, DType::f32), dp = host_poisoned({n}, d);
        mse_forward(loss, p, t);
        mse_backward(dp, p, t, 0.25f);
        const Tensor gp = dev(p, offset), gt = dev(t, offset);
        const Tensor gloss = dev_poisoned({}, DType::f32), gloss2 = dev_poisoned({}, DType::f32);
        const Tensor gdp = dev_poisoned({n}, d, 1 - offset);
        const uint64_t syncs = core::host_sync_count();
        mse_forward(gloss, gp, gt);
        mse_forward(gloss2, gp, gt);
        mse_backward(gdp, gp, gt, 0.25f);
        EXPECT_EQ(core::host_sync_count(), syncs) << "mse synced the host";
        const std::string what = std::string(dtype_name(d)) + " n " + std::to_string(n);
        EXPECT_TRUE(close_to(gloss, loss, 2e-6, 0.0)) << what;
        EXPECT_TRUE(bit_identical(gloss, gloss2)) << "run to run " << what;
        EXPECT_TRUE(bit_identical(gdp, dp)) << what;
      }
    }
  }
}

TEST(NnOpsGpuTest, MixedDevicesThrowNamingBoth) {
  STOKER_REQUIRE_GPU();
  const Tensor h = Tensor::zeros({4, 3}, DType::f32);
  const Tensor g = dev(h);
  EXPECT_TRUE(
      test::throws_error_with([&] { relu_forward(g, h); }, {"relu_forward", "cuda:0", "cpu"}));
  EXPECT_TRUE(test::throws_error_with([&] { add_bias(g, Tensor::zeros({3}, DType::f32)); },
                                      {"add_bias", "cuda:0", "cpu"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        layernorm_forward(g, dev(Tensor::zeros({4}, DType::f32)), Tensor::zeros({4}, DType::f32), g,
                          dev(Tensor::zeros({3}, DType::f32)), dev(Tensor::zeros({3}, DType::f32)),
                          1e-5f);
      },
      {"layernorm_forward", "rstd", "cpu"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        embedding_forward(g, Tensor::zeros({4}, DType::i64),
                          dev(Tensor::zeros({10, 3}, DType::f32)));
      },
      {"embedding_forward", "ids", "cpu"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        cross_entropy_forward(Tensor::zeros({}, DType::f32), dev(Tensor::zeros({}, DType::f32)),
                              dev(Tensor::zeros({4}, DType::f32)), g,
                              dev(Tensor::zeros({4}, DType::i64)), -100, 0.0f);
      },
      {"cross_entropy_forward", "loss", "cpu"}));
}

// Effective bandwidth of the kernels (bytes a single ideal pass would move / median time), for
// docs/benchmarks.md; not part of the suite (run with --gtest_also_run_disabled_tests).
TEST(NnOpsGpuTest, DISABLED_Bandwidth) {
  STOKER_REQUIRE_GPU();
  const core::Device g = gpu();
  const core::Stream stream = core::current_stream(g);
  const auto time_ms = [&](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) {
      core::Event a = core::Event::create(g, true), b = core::Event::create(g, true);
      a.record(stream);
      for (int i = 0; i < 10; ++i) f();
      b.record(stream);
      b.synchronize();
      ms.push_back(core::Event::elapsed_ms(a, b) / 10.0f);
    }
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(ms[ms.size() / 2]);
  };
  const auto report = [](const std::string& what, double bytes, double ms) {
    std::printf("BW %-52s %9.4f ms %8.1f GB/s\n", what.c_str(), ms, bytes / ms / 1e6);
  };
  const auto randn = [&](const Shape& s, DType d) {
    Tensor t = Tensor::empty(s, d, g);
    random_normal(t, 0.0f, 1.0f, 1, 0);
    return t;
  };
  const int64_t n = int64_t{1} << 26;
  {
    const Tensor x = randn({n}, DType::f32), y = randn({n}, DType::f32);
    report("relu_forward f32 64Mi", 8.0 * n, time_ms([&] { relu_forward(y, x); }));
    report("mse_forward f32 64Mi", 8.0 * n,
           time_ms([&] { mse_forward(Tensor::empty({}, DType::f32, g), x, y); }));
  }
  {
    const Tensor x = randn({n}, DType::bf16), y = randn({n}, DType::bf16),
                 dy = randn({n}, DType::bf16);
    report("gelu_forward bf16 64Mi", 4.0 * n, time_ms([&] { gelu_forward(y, x); }));
    report("gelu_backward bf16 64Mi", 6.0 * n, time_ms([&] { gelu_backward(y, dy, x); }));
    report("dropout_forward bf16 64Mi p=0.1", 4.0 * n,
           time_ms([&] { dropout_forward(y, x, 0.1f, 1, 0); }));
  }
  for (const auto& [rows, cols] : std::vector<RowsCols>{{16384, 4096}, {65536, 768}}) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    const double e = static_cast<double>(rows) * cols;
    const Tensor x = randn({rows, cols}, DType::bf16), y = randn({rows, cols}, DType::bf16);
    const Tensor dy = randn({rows, cols}, DType::bf16);
    const Tensor b = randn({cols}, DType::f32), gamma = randn({cols}, DType::f32),
                 db = randn({cols}, DType::f32);
    const Tensor mean = randn({rows}, DType::f32), rstd = randn({rows}, DType::f32);
    report("add_bias bf16 " + shape, 4.0 * e, time_ms([&] { add_bias(y, b); }));
    report("bias_grad bf16 " + shape, 2.0 * e, time_ms([&] { bias_grad(db, dy); }));
    report("layernorm_forward bf16 " + shape, 4.0 * e,
           time_ms([&] { layernorm_forward(y, mean, rstd, x, gamma, b, 1e-5f); }));
    report("layernorm_backward bf16 " + shape + " (3 passes ideal)", 6.0 * e,
           time_ms([&] { layernorm_backward(y, gamma, db, dy, x, mean, rstd, b); }));
  }
  {
    const int64_t rows = 8192, cols = 50257;
    const Tensor logits = randn({rows, cols}, DType::bf16), dl = randn({rows, cols}, DType::bf16);
    const Tensor target = dev(index_tensor(DType::i64, random_ids(rows, cols, 5)));
    const Tensor loss = Tensor::empty({}, DType::f32, g), count = Tensor::empty({}, DType::f32, g);
    const Tensor lse = Tensor::empty({rows}, DType::f32, g);
    const double e = static_cast<double>(rows) * cols;
    report("cross_entropy_forward bf16 8192x50257", 2.0 * e,
           time_ms([&] { cross_entropy_forward(loss, count, lse, logits, target, -100, 0.1f); }));
    report("cross_entropy_backward bf16 8192x50257", 4.0 * e, time_ms([&] {
             cross_entropy_backward(dl, logits, target, lse, count, -100, 0.1f, 1.0f);
           }));
  }
  {
    const int64_t ids_n = 65536, v = 50257, d = 768;
    const Tensor table = randn({v, d}, DType::f32), y = randn({ids_n, d}, DType::f32);
    const Tensor ids = dev(index_tensor(DType::i64, random_ids(ids_n, v, 6)));
    report("embedding_forward f32 65536 ids x 768", 8.0 * ids_n * d,
           time_ms([&] { embedding_forward(y, ids, table); }));
    report("embedding_backward f32 65536 ids x 768", 12.0 * ids_n * d,
           time_ms([&] { embedding_backward(table, y, ids); }));
  }
}

}  // namespace
}  // namespace stoker::ops
