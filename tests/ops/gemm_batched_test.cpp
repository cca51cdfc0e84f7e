// ops::gemm_batched on the CPU against a loop of ops::gemm over the matrices: every transpose
// combination, f32 and half inputs with f32 and half outputs, alpha/beta (beta = 0 must ignore
// a NaN-poisoned C), rank-4 batches; plus its input validation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::ops {
namespace {

struct Case {
  Shape batch;
  int64_t m, n, k;
  bool ta, tb;
  DType in, out;
  float alpha, beta;
};

Shape with(const Shape& batch, int64_t r, int64_t c) {
  std::vector<int64_t> d;
  for (int i = 0; i < batch.rank(); ++i) d.push_back(batch[i]);
  d.push_back(r);
  d.push_back(c);
  return Shape(d);
}

void run_case(const Case& cs, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "batch " << cs.batch << " m=" << cs.m << " n=" << cs.n << " k="
                                  << cs.k << (cs.ta ? " A^T" : " A") << (cs.tb ? " B^T " : " B ")
                                  << dtype_name(cs.in) << "->" << dtype_name(cs.out)
                                  << " alpha=" << cs.alpha << " beta=" << cs.beta);
  const int64_t nb = cs.batch.numel();
  const Shape sa = cs.ta ? Shape{cs.k, cs.m} : Shape{cs.m, cs.k};
  const Shape sb = cs.tb ? Shape{cs.n, cs.k} : Shape{cs.k, cs.n};
  const Tensor a = test::random_tensor(with(cs.batch, sa[0], sa[1]), cs.in, seed);
  const Tensor b = test::random_tensor(with(cs.batch, sb[0], sb[1]), cs.in, seed + 1);
  Tensor c = cs.beta != 0.0f ? test::random_tensor(with(cs.batch, cs.m, cs.n), cs.out, seed + 2)
                             : test::poisoned(with(cs.batch, cs.m, cs.n), cs.out);
  const Tensor c0 = c.clone();
  const GemmOptions o{.trans_a = cs.ta, .trans_b = cs.tb, .alpha = cs.alpha, .beta = cs.beta};
  gemm_batched(c, a, b, o);
  const Tensor a3 = a.reshape({nb, sa[0], sa[1]}), b3 = b.reshape({nb, sb[0], sb[1]});
  const Tensor c3 = c.reshape({nb, cs.m, cs.n}), w3 = c0.clone().reshape({nb, cs.m, cs.n});
  for (int64_t i = 0; i < nb; ++i) {
    const Tensor want = w3.slice(i, i + 1).reshape({cs.m, cs.n});
    gemm(want, a3.slice(i, i + 1).reshape({sa[0], sa[1]}),
         b3.slice(i, i + 1).reshape({sb[0], sb[1]}), o);
    const std::vector<float> got = c3.slice(i, i + 1).to_floats(), ref = want.to_floats();
    for (size_t j = 0; j < got.size(); ++j)
      ASSERT_NEAR(got[j], ref[j], 1e-6 * (1.0 + std::fabs(ref[j])))
          << "matrix " << i << " element " << j;
  }
}

TEST(GemmBatched, MatchesLoopOfGemm) {
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& batch : {Shape{1}, Shape{5}, Shape{2, 3}}) {
        run_case({batch, 7, 13, 5, ta, tb, DType::f32, DType::f32, 1.0f, 0.0f}, seed);
        run_case({batch, 33, 17, 64, ta, tb, DType::f32, DType::f32, 0.5f, 1.0f}, seed + 3);
        seed += 6;
      }
  for (DType in : {DType::bf16, DType::f16})
    for (DType out : {DType::f32, in}) {
      run_case({Shape{6}, 16, 24, 40, false, true, in, out, 0.25f, 0.0f}, seed);
      run_case({Shape{3}, 9, 5, 11, true, false, in, out, 1.0f, 1.0f}, seed + 3);
      seed += 6;
    }
}

TEST(GemmBatched, EmptyInnerDimensionScalesC) {
  const Tensor a = Tensor::empty({2, 3, 0}, DType::f32), b = Tensor::empty({2, 0, 4}, DType::f32);
  const Tensor c = test::random_tensor({2, 3, 4}, DType::f32, 7);
  const std::vector<float> before = c.to_floats();
  gemm_batched(c, a, b, {.beta = 0.5f});
  const std::vector<float> after = c.to_floats();
  for (size_t i = 0; i < after.size(); ++i) ASSERT_FLOAT_EQ(after[i], 0.5f * before[i]);
}

TEST(GemmBatched, RejectsBadInputs) {
  const Tensor a = Tensor::empty({2, 3, 4}, DType::f32), b = Tensor::empty({3, 4, 5}, DType::f32);
  const Tensor c = Tensor::empty({2, 3, 5}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { gemm_batched(c, a, b); },
                                      {"batch dimensions differ", "no broadcasting"}));
  const Tensor a2 = Tensor::empty({3, 4}, DType::f32), b2 = Tensor::empty({4, 5}, DType::f32);
  EXPECT_TRUE(
      test::throws_error_with([&] { gemm_batched(c, a2, b2); }, {"rank >= 3", "ops::gemm"}));
  const Tensor b3 = Tensor::empty({2, 4, 5}, DType::f32), bias = Tensor::empty({5}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { gemm_batched(c, a, b3, {.bias = &bias}); }, {"bias"}));
  const Tensor b4 = Tensor::empty({2, 3, 5}, DType::f32);
  EXPECT_TRUE(test::throws_error_with([&] { gemm_batched(c, a, b4); }, {"inner dimensions"}));
}

}  // namespace
}  // namespace stoker::ops
