// Batch norm with the fused ReLU (ops::BatchNormParams::relu) on the CPU against the unfused
// composition it is defined as: batchnorm_forward_train / _eval then relu_forward, and
// relu_backward then batchnorm_backward. Same bits for y, the saved and running statistics, dx,
// dgamma and dbeta, in both layouts, f32 and bf16; the mask is shown to matter (the fused
// backward differs from the plain one of the unmasked dy); aliasing; the backward's optional beta
// (ignored here); the argument checks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/batchnorm.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Dims4 kDims[] = {{3, 5, 7, 7}, {2, 4, 13, 5}, {8, 3, 1, 1}, {1, 6, 4, 9}, {4, 19, 3, 3}};

class BatchNormReluCpu : public ::testing::TestWithParam<std::tuple<int, Layout, DType>> {};

TEST_P(BatchNormReluCpu, FusedEqualsTheCompositionBitForBit) {
  const Dims4& d = kDims[std::get<0>(GetParam())];
  const Layout l = std::get<1>(GetParam());
  const DType dt = std::get<2>(GetParam());
  const BnInputs in = make_bn_inputs(d, l, dt, 50);
  const BnRun f = run_batchnorm(in, Tensor(), d, l, /*relu=*/true, /*fused=*/true);
  const BnRun u = run_batchnorm(in, Tensor(), d, l, /*relu=*/true, /*fused=*/false);
  const std::string what =
      fmt::format("{}x{}x{}x{} {} {}", d.n, d.c, d.h, d.w, ops::layout_name(l), dtype_name(dt));
  expect_bn_runs_identical(f, u, what);

  // Not vacuous: the ReLU zeroed part of y (and not all of it) ...
  EXPECT_TRUE(partly_zero(f.y)) << what;
  // ... and the backward used the mask: the plain backward of the unmasked dy differs.
  const ops::BatchNormParams plain{.layout = l};
  const Tensor dx_plain = poisoned(shape4(d, l), dt);
  const Tensor dg = in.dgamma.clone(), db = in.dbeta.clone();
  ops::batchnorm_backward({dx_plain, dg, db}, in.dy, {in.x, in.gamma}, {f.mean, f.invstd}, plain);
  EXPECT_FALSE(bit_identical(dx_plain, f.dx)) << what;
  EXPECT_FALSE(bit_identical(db, f.dbeta)) << what;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormReluCpu,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kDims))),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::Values(DType::f32, DType::bf16)));

// The mask comes from y alone: where the forward's output is 0, dy has no effect on anything.
TEST(BatchNormReluCpuMask, GradientIgnoresDyWhereYIsZero) {
  const Dims4 d{4, 6, 5, 5};
  const Layout l = Layout::nhwc;
  const BnInputs in = make_bn_inputs(d, l, DType::f32, 60);
  const BnRun f = run_batchnorm(in, Tensor(), d, l, /*relu=*/true, /*fused=*/true);
  // Change dy wherever y == 0: dx, dgamma, dbeta stay the same bits.
  std::vector<float> dy = in.dy.to_floats();
  const std::vector<float> y = f.y.to_floats();
  for (size_t i = 0; i < dy.size(); ++i)
    if (y[i] == 0.0f) dy[i] = 1000.0f + static_cast<float>(i);
  const BnInputs changed{in.x,      in.gamma, in.beta,
                         in.rm,     in.rv,    Tensor::from_vector(dy, in.dy.shape()),
                         in.dgamma, in.dbeta};
  const BnRun g = run_batchnorm(changed, Tensor(), d, l, /*relu=*/true, /*fused=*/true);
  EXPECT_TRUE(bit_identical(g.dx, f.dx));
  EXPECT_TRUE(bit_identical(g.dgamma, f.dgamma));
  EXPECT_TRUE(bit_identical(g.dbeta, f.dbeta));
}

// dx may alias dy or y: each element is read before it is written.
TEST(BatchNormReluCpuAlias, DxOverDyOrY) {
  const Dims4 d{3, 5, 7, 7};
  const Layout l = Layout::nhwc;
  const BnInputs in = make_bn_inputs(d, l, DType::bf16, 70);
  const BnRun f = run_batchnorm(in, Tensor(), d, l, /*relu=*/true, /*fused=*/true);
  const ops::BatchNormParams p{.layout = l, .relu = true};
  {
    const Tensor dy = in.dy.clone(), dg = in.dgamma.clone(), db = in.dbeta.clone();
    ops::batchnorm_backward({dy, dg, db}, dy, {in.x, in.gamma}, {f.mean, f.invstd}, p, f.y);
    EXPECT_TRUE(bit_identical(dy, f.dx));
    EXPECT_TRUE(bit_identical(dg, f.dgamma));
  }
  {
    const Tensor y = f.y.clone(), dg = in.dgamma.clone(), db = in.dbeta.clone();
    ops::batchnorm_backward({y, dg, db}, in.dy, {in.x, in.gamma}, {f.mean, f.invstd}, p, y);
    EXPECT_TRUE(bit_identical(y, f.dx));
    EXPECT_TRUE(bit_identical(db, f.dbeta));
  }
}

// The backward's optional beta (from which a backend may rebuild the mask) is accepted and
// ignored on the CPU, which reads y: the same bits with it as without, with the fused ReLU and
// without (nn::BatchNorm2d passes it either way).
TEST(BatchNormReluCpuBeta, AcceptedAndIgnored) {
  const Dims4 d{3, 5, 7, 7};
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    for (const bool relu : {true, false}) {
      const BnInputs in = make_bn_inputs(d, l, DType::bf16, 90);
      const BnRun f = run_batchnorm(in, Tensor(), d, l, relu, /*fused=*/true);
      const ops::BatchNormParams p{.layout = l, .relu = relu};
      const Tensor dx = poisoned(shape4(d, l), DType::bf16);
      const Tensor dg = in.dgamma.clone(), db = in.dbeta.clone();
      ops::batchnorm_backward({dx, dg, db}, in.dy, {in.x, in.gamma, in.beta}, {f.mean, f.invstd}, p,
                              relu ? f.y : Tensor());
      const std::string what = fmt::format("{}{}", ops::layout_name(l), relu ? " relu" : "");
      EXPECT_TRUE(bit_identical(dx, f.dx)) << what;
      EXPECT_TRUE(bit_identical(dg, f.dgamma)) << what;
      EXPECT_TRUE(bit_identical(db, f.dbeta)) << what;
    }
  }
}

// BatchNormInput carries the forward's residual; the backward reads none (its gradient is the
// output grads.dresidual), so one given there is refused rather than silently ignored.
TEST(BatchNormReluCpuErrors, ResidualIsRefusedInTheBackward) {
  const Tensor x = random_tensor({2, 3, 4, 4}, DType::f32, 1);
  const Tensor dx = Tensor::empty({2, 3, 4, 4}, DType::f32);
  const Tensor c3 = random_tensor({3}, DType::f32, 2, 0.5f, 1.5f);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3, c3, x}, {c3, c3}, {});
      },
      {"ops::batchnorm_backward", "in.residual", "grads.dresidual"}));
}

TEST(BatchNormReluCpuErrors, BetaIsOneF32PerChannel) {
  const Tensor x = random_tensor({2, 3, 4, 4}, DType::f32, 1);
  const Tensor dx = Tensor::empty({2, 3, 4, 4}, DType::f32);
  const Tensor c3 = random_tensor({3}, DType::f32, 2, 0.5f, 1.5f);
  const ops::BatchNormParams relu{.relu = true};
  const Tensor beta4 = random_tensor({4}, DType::f32, 3);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3, beta4}, {c3, c3}, relu, x);
      },
      {"ops::batchnorm_backward", "beta is f32[4]", "expected f32[3]", "one value per channel"}));
  const Tensor beta_half = random_tensor({3}, DType::bf16, 3);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3, beta_half}, {c3, c3}, relu, x);
      },
      {"ops::batchnorm_backward", "beta is bf16[3]", "expected f32[3]"}));
}

// Only the CUDA NHWC kernels, given beta and no residual gradient, rebuild the ReLU's mask from x.
TEST(BatchNormReluCpuSemantics, WhichBackendsReadY) {
  const ops::BatchNormParams nhwc_relu{.layout = Layout::nhwc, .relu = true};
  const ops::BatchNormParams nchw_relu{.layout = Layout::nchw, .relu = true};
  const ops::BatchNormParams nhwc_plain{.layout = Layout::nhwc};
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  EXPECT_FALSE(ops::batchnorm_backward_reads_y(gpu, nhwc_relu, true, false));
  EXPECT_TRUE(ops::batchnorm_backward_reads_y(gpu, nhwc_relu, false, false));  // no beta
  EXPECT_TRUE(ops::batchnorm_backward_reads_y(gpu, nhwc_relu, true, true));    // residual tail
  EXPECT_TRUE(ops::batchnorm_backward_reads_y(gpu, nchw_relu, true, false));   // cuDNN
  EXPECT_TRUE(ops::batchnorm_backward_reads_y(cpu, nhwc_relu, true, false));
  EXPECT_FALSE(ops::batchnorm_backward_reads_y(gpu, nhwc_plain, true, false));  // no ReLU: no y
  EXPECT_FALSE(ops::batchnorm_backward_reads_y(cpu, nhwc_plain, false, false));
}

TEST(BatchNormReluCpuErrors, YMustComeExactlyWithRelu) {
  const Tensor x = random_tensor({2, 3, 4, 4}, DType::f32, 1);
  const Tensor dx = Tensor::empty({2, 3, 4, 4}, DType::f32);
  const Tensor c3 = random_tensor({3}, DType::f32, 2, 0.5f, 1.5f);
  const ops::BatchNormParams relu{.relu = true};
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3}, {c3, c3}, relu);
      },
      {"ops::batchnorm_backward", "params.relu is set but y is undefined", "relu(bn(x))"}));
  // The CPU reads y even given beta (its forward normalized with fp64 statistics).
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3, c3}, {c3, c3}, relu);
      },
      {"ops::batchnorm_backward", "y is undefined", "batchnorm_backward_reads_y"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3}, {c3, c3}, {}, x);
      },
      {"ops::batchnorm_backward", "y f32[2, 3, 4, 4]", "is given but params.relu is not set"}));
  const Tensor y_bad = Tensor::empty({2, 3, 4, 5}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3}, {c3, c3}, relu, y_bad);
      },
      {"ops::batchnorm_backward", "y is f32[2, 3, 4, 5]"}));
  const Tensor y_half = Tensor::empty({2, 3, 4, 4}, DType::bf16);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::batchnorm_backward({dx, c3, c3}, x, {x, c3}, {c3, c3}, relu, y_half);
      },
      {"ops::batchnorm_backward", "y"}));
}

}  // namespace
}  // namespace stoker::test
