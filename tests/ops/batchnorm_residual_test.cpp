// Batch norm with a residual input (a ResNet block's tail, y = act(bn(x) + r)) on the CPU against
// the composition it is defined as: batchnorm_forward_train / _eval, add(y, r, y) (nn::Residual's
// add: shortcut + body) and relu_forward; backward relu_backward into dz, then
// batchnorm_backward of dz, with dz the residual's gradient. Same bits for y, the statistics,
// dx, dgamma, dbeta and dresidual, both layouts, f32 and bf16, with and without the ReLU; the
// residual and the mask are shown to matter; aliasing; the argument checks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/batchnorm.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Dims4 kDims[] = {{3, 5, 7, 7}, {2, 4, 13, 5}, {8, 3, 1, 1}, {1, 6, 4, 9}, {4, 19, 3, 3}};

Tensor make_residual(const Dims4& d, Layout l, DType dt, uint32_t seed) {
  return random_tensor(shape4(d, l), dt, seed, -1.5f, 1.5f);
}

class BatchNormResidualCpu : public ::testing::TestWithParam<std::tuple<int, Layout, DType, bool>> {
};

TEST_P(BatchNormResidualCpu, FusedEqualsTheCompositionBitForBit) {
  const Dims4& d = kDims[std::get<0>(GetParam())];
  const Layout l = std::get<1>(GetParam());
  const DType dt = std::get<2>(GetParam());
  const bool relu = std::get<3>(GetParam());
  const BnInputs in = make_bn_inputs(d, l, dt, 80);
  const Tensor res = make_residual(d, l, dt, 90);
  const BnRun f = run_batchnorm(in, res, d, l, relu, /*fused=*/true);
  const BnRun u = run_batchnorm(in, res, d, l, relu, /*fused=*/false);
  const std::string what = fmt::format("{}x{}x{}x{} {} {}{}", d.n, d.c, d.h, d.w,
                                       ops::layout_name(l), dtype_name(dt), relu ? " relu" : "");
  expect_bn_runs_identical(f, u, what);

  // Not vacuous: the residual changed y (against the op without it) ...
  ops::BatchNormParams p{.layout = l, .relu = relu};
  const Tensor y0 = poisoned(shape4(d, l), dt);
  const Tensor m0 = poisoned({d.c}, DType::f32), s0 = poisoned({d.c}, DType::f32);
  ops::batchnorm_forward_train(y0, {m0, s0}, {}, {in.x, in.gamma, in.beta}, p);
  EXPECT_FALSE(bit_identical(y0, f.y)) << what;
  if (!relu) {
    EXPECT_TRUE(bit_identical(f.dr, in.dy)) << what << ": without the ReLU dr is dy";
    return;
  }
  // ... the ReLU zeroed part of y (and not all of it), dr is dy masked there ...
  const std::vector<float> yv = f.y.to_floats(), dyv = in.dy.to_floats(), drv = f.dr.to_floats();
  int64_t zeros = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    zeros += yv[i] == 0.0f;
    ASSERT_EQ(drv[i], yv[i] > 0.0f ? dyv[i] : 0.0f) << what << " element " << i;
  }
  EXPECT_GT(zeros, 0) << what;
  EXPECT_LT(zeros, f.y.numel()) << what;
  // ... and the backward used the mask of y (bn(x) + r), not of bn(x): the fused-ReLU backward
  // with the residual-free output y0 differs.
  const Tensor dx0 = poisoned(shape4(d, l), dt);
  const Tensor dg = in.dgamma.clone(), db = in.dbeta.clone();
  ops::batchnorm_backward({dx0, dg, db}, in.dy, {in.x, in.gamma}, {f.mean, f.invstd}, p, y0);
  EXPECT_FALSE(bit_identical(dx0, f.dx)) << what;
  EXPECT_FALSE(bit_identical(db, f.dbeta)) << what;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormResidualCpu,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kDims))),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::Values(DType::f32, DType::bf16),
                                            ::testing::Bool()));

// y may alias x or the residual; dresidual may alias dy, dx may alias dy (dresidual elsewhere).
TEST(BatchNormResidualCpuAlias, OutputsOverInputs) {
  const Dims4 d{3, 5, 7, 7};
  const Layout l = Layout::nhwc;
  const DType dt = DType::bf16;
  const BnInputs in = make_bn_inputs(d, l, dt, 100);
  const Tensor res = make_residual(d, l, dt, 110);
  const BnRun f = run_batchnorm(in, res, d, l, /*relu=*/true, /*fused=*/true);
  const ops::BatchNormParams p{.layout = l, .relu = true};
  const Tensor m = poisoned({d.c}, DType::f32), s = poisoned({d.c}, DType::f32);
  {
    const Tensor x = in.x.clone();
    ops::batchnorm_forward_train(x, {m, s}, {}, {x, in.gamma, in.beta, res}, p);
    EXPECT_TRUE(bit_identical(x, f.y));
  }
  {
    const Tensor r = res.clone();
    ops::batchnorm_forward_train(r, {m, s}, {}, {in.x, in.gamma, in.beta, r}, p);
    EXPECT_TRUE(bit_identical(r, f.y));
  }
  {
    const Tensor dy = in.dy.clone(), dx = poisoned(shape4(d, l), dt);
    const Tensor dg = in.dgamma.clone(), db = in.dbeta.clone();
    ops::batchnorm_backward({dx, dg, db, dy}, dy, {in.x, in.gamma}, {f.mean, f.invstd}, p, f.y);
    EXPECT_TRUE(bit_identical(dy, f.dr));
    EXPECT_TRUE(bit_identical(dx, f.dx));
    EXPECT_TRUE(bit_identical(dg, f.dgamma));
  }
  {
    const Tensor dy = in.dy.clone(), dr = poisoned(shape4(d, l), dt);
    const Tensor dg = in.dgamma.clone(), db = in.dbeta.clone();
    ops::batchnorm_backward({dy, dg, db, dr}, dy, {in.x, in.gamma}, {f.mean, f.invstd}, p, f.y);
    EXPECT_TRUE(bit_identical(dy, f.dx));
    EXPECT_TRUE(bit_identical(dr, f.dr));
    EXPECT_TRUE(bit_identical(db, f.dbeta));
  }
}

TEST(BatchNormResidualCpuErrors, ResidualAndDresidualAreChecked) {
  const Tensor x = random_tensor({2, 3, 4, 4}, DType::f32, 1);
  const Tensor y = Tensor::empty({2, 3, 4, 4}, DType::f32);
  const Tensor dx = Tensor::empty({2, 3, 4, 4}, DType::f32);
  const Tensor c3 = random_tensor({3}, DType::f32, 2, 0.5f, 1.5f);
  const Tensor m = Tensor::empty({3}, DType::f32), s = Tensor::empty({3}, DType::f32);
  const ops::BatchNormParams relu{.relu = true};
  const Tensor bad_shape = Tensor::empty({2, 3, 4, 5}, DType::f32);
  const Tensor bad_dtype = Tensor::empty({2, 3, 4, 4}, DType::bf16);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_forward_train(y, {m, s}, {}, {x, c3, c3, bad_shape}, relu);
      },
      {"ops::batchnorm_forward_train", "residual is f32[2, 3, 4, 5]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_forward_eval(y, {x, c3, c3, bad_dtype}, {c3, c3}, relu);
      },
      {"ops::batchnorm_forward_eval", "residual"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3, bad_shape}, x, {x, c3}, {c3, c3}, relu, x);
      },
      {"ops::batchnorm_backward", "dresidual is f32[2, 3, 4, 5]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3, dx}, x, {x, c3}, {c3, c3}, relu, x);
      },
      {"ops::batchnorm_backward", "aliases dx", "its own buffer"}));
}

}  // namespace
}  // namespace stoker::test
