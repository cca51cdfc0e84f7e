// cuDNN batch normalization against the CPU reference on fresh random inputs: training forward
// (output, saved mean / invstd, running statistics with the unbiased variance), evaluation
// forward, backward with dgamma / dbeta accumulated; odd shapes, both layouts, poisoned outputs,
// f32 and half inputs. BatchNormNhwcGpu: stoker's own NHWC training kernels
// (kernels/batchnorm_nhwc.cu) on large and odd-channel shapes, misaligned tensors (scalar path),
// aliasing and bit-identical reruns.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/batchnorm.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Device kGpu = Device::cuda(0);

const Dims4 kDims[] = {{3, 5, 7, 7}, {3, 5, 13, 13}, {2, 64, 28, 28}, {16, 3, 1, 1}, {1, 7, 5, 9}};

class BatchNormGpu : public ::testing::TestWithParam<std::tuple<int, Layout, DType>> {
 protected:
  const Dims4& dims() const { return kDims[std::get<0>(GetParam())]; }
  Layout layout() const { return std::get<1>(GetParam()); }
  DType dtype() const { return std::get<2>(GetParam()); }
  double rtol() const {
    return dtype() == DType::f32 ? 1e-4 : (dtype() == DType::f16 ? 4e-3 : 2e-2);
  }
};

TEST_P(BatchNormGpu, TrainEvalAndBackwardMatchCpu) {
  STOKER_REQUIRE_GPU();
  const Dims4& d = dims();
  const Layout l = layout();
  const ops::BatchNormParams p{.eps = 1e-5f, .momentum = 0.1f, .layout = l};
  const Tensor x = random_tensor(shape4(d, l), dtype(), 1, -2.0f, 3.0f);
  const Tensor gamma = random_tensor({d.c}, DType::f32, 2, 0.5f, 1.5f);
  const Tensor beta = random_tensor({d.c}, DType::f32, 3);
  const Tensor rm = random_tensor({d.c}, DType::f32, 4);
  const Tensor rv = random_tensor({d.c}, DType::f32, 5, 0.5f, 2.0f);
  const Tensor dy = random_tensor(shape4(d, l), dtype(), 6);
  const Tensor dgamma = random_tensor({d.c}, DType::f32, 7);
  const Tensor dbeta = random_tensor({d.c}, DType::f32, 8);
  const auto gpu = [](const Tensor& t) { return t.to(kGpu); };

  // CPU reference.
  const Tensor rm_c = rm.clone(), rv_c = rv.clone(), dg_c = dgamma.clone(), db_c = dbeta.clone();
  const Tensor y_c = poisoned(shape4(d, l), dtype());
  const Tensor mean_c = poisoned({d.c}, DType::f32), inv_c = poisoned({d.c}, DType::f32);
  ops::batchnorm_forward_train(y_c, {mean_c, inv_c}, {rm_c, rv_c}, {x, gamma, beta}, p);
  const Tensor dx_c = poisoned(shape4(d, l), dtype());
  ops::batchnorm_backward({dx_c, dg_c, db_c}, dy, {x, gamma}, {mean_c, inv_c}, p);
  const Tensor ye_c = poisoned(shape4(d, l), dtype());
  ops::batchnorm_forward_eval(ye_c, {x, gamma, beta}, {rm_c, rv_c}, p);

  // GPU.
  const Tensor x_g = gpu(x), gamma_g = gpu(gamma), beta_g = gpu(beta);
  const Tensor rm_g = gpu(rm), rv_g = gpu(rv), dg_g = gpu(dgamma), db_g = gpu(dbeta);
  const Tensor y_g = poisoned(shape4(d, l), dtype(), kGpu);
  const Tensor mean_g = poisoned({d.c}, DType::f32, kGpu);
  const Tensor inv_g = poisoned({d.c}, DType::f32, kGpu);
  ops::batchnorm_forward_train(y_g, {mean_g, inv_g}, {rm_g, rv_g}, {x_g, gamma_g, beta_g}, p);
  const Tensor dx_g = poisoned(shape4(d, l), dtype(), kGpu);
  ops::batchnorm_backward({dx_g, dg_g, db_g}, gpu(dy), {x_g, gamma_g}, {mean_g, inv_g}, p);
  const Tensor ye_g = poisoned(shape4(d, l), dtype(), kGpu);
  ops::batchnorm_forward_eval(ye_g, {x_g, gamma_g, beta_g}, {rm_g, rv_g}, p);

  const std::string what = fmt::format("{}x{}x{}x{} {} {}", d.n, d.c, d.h, d.w, ops::layout_name(l),
                                       dtype_name(dtype()));
  const double r = rtol();
  EXPECT_TRUE(all_close(y_g, y_c, r, r)) << what << ": y";
  EXPECT_TRUE(all_close(mean_g, mean_c, 1e-5, 1e-5)) << what << ": save_mean";
  EXPECT_TRUE(all_close(inv_g, inv_c, 1e-4, 1e-5)) << what << ": save_invstd";
  EXPECT_TRUE(all_close(rm_g, rm_c, 1e-5, 1e-5)) << what << ": running_mean";
  EXPECT_TRUE(all_close(rv_g, rv_c, 1e-4, 1e-5)) << what << ": running_var";
  EXPECT_TRUE(all_close(ye_g, ye_c, r, r)) << what << ": eval y";
  // Gradients: the scale of dgamma / dbeta grows with N*H*W.
  const double m = static_cast<double>(d.n * d.h * d.w);
  const double rdx = dtype() == DType::f32 ? r : 4 * r;
  EXPECT_TRUE(all_close(dx_g, dx_c, rdx, rdx)) << what << ": dx";
  EXPECT_TRUE(all_close(dg_g, dg_c, r, r * std::sqrt(m))) << what << ": dgamma";
  EXPECT_TRUE(all_close(db_g, db_c, r, r * std::sqrt(m))) << what << ": dbeta";
}

TEST_P(BatchNormGpu, WithoutRunningStatistics) {
  STOKER_REQUIRE_GPU();
  const Dims4& d = dims();
  const Layout l = layout();
  const ops::BatchNormParams p{.layout = l};
  const Tensor x = random_tensor(shape4(d, l), dtype(), 9);
  const Tensor gamma = random_tensor({d.c}, DType::f32, 10);
  const Tensor beta = random_tensor({d.c}, DType::f32, 11);
  const Tensor y_c = poisoned(shape4(d, l), dtype());
  const Tensor mean_c = poisoned({d.c}, DType::f32), inv_c = poisoned({d.c}, DType::f32);
  ops::batchnorm_forward_train(y_c, {mean_c, inv_c}, {}, {x, gamma, beta}, p);
  const Tensor y_g = poisoned(shape4(d, l), dtype(), kGpu);
  const Tensor mean_g = poisoned({d.c}, DType::f32, kGpu);
  const Tensor inv_g = poisoned({d.c}, DType::f32, kGpu);
  ops::batchnorm_forward_train(y_g, {mean_g, inv_g}, {},
                               {x.to(kGpu), gamma.to(kGpu), beta.to(kGpu)}, p);
  EXPECT_TRUE(all_close(y_g, y_c, rtol(), rtol()));
  EXPECT_TRUE(all_close(mean_g, mean_c, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormGpu,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kDims))),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::Values(DType::f32, DType::f16,
                                                              DType::bf16)));

// ---- NHWC training kernels (kernels/batchnorm_nhwc.cu) ----

// Training forward then backward on `device`; x and dy are placed `offset` elements into their
// blocks (offset 1 misaligns every row: the scalar path).
BnOutputs run_nhwc(const Dims4& d, DType dtype, Device device, int64_t offset = 0) {
  const ops::BatchNormParams p{.eps = 1e-5f, .momentum = 0.1f, .layout = Layout::nhwc};
  const Shape shape = shape4(d, Layout::nhwc);
  const Tensor x = random_tensor(shape, dtype, 21, -2.0f, 3.0f);
  const Tensor dy = random_tensor(shape, dtype, 22);
  const auto on = [&](const Tensor& t) { return t.to(device); };
  BnOutputs o;
  o.rm = on(random_tensor({d.c}, DType::f32, 24));
  o.rv = on(random_tensor({d.c}, DType::f32, 25, 0.5f, 2.0f));
  o.dgamma = on(random_tensor({d.c}, DType::f32, 26));
  o.dbeta = on(random_tensor({d.c}, DType::f32, 27));
  const Tensor gamma = on(random_tensor({d.c}, DType::f32, 28, 0.5f, 1.5f));
  const Tensor beta = on(random_tensor({d.c}, DType::f32, 29));
  const Tensor xd = offset == 0 ? on(x) : copy_at_offset(x, device, offset);
  const Tensor dyd = offset == 0 ? on(dy) : copy_at_offset(dy, device, offset);
  o.y = poisoned(shape, dtype, device);
  o.mean = poisoned({d.c}, DType::f32, device);
  o.invstd = poisoned({d.c}, DType::f32, device);
  ops::batchnorm_forward_train(o.y, {o.mean, o.invstd}, {o.rm, o.rv}, {xd, gamma, beta}, p);
  o.dx = poisoned(shape, dtype, device);
  ops::batchnorm_backward({o.dx, o.dgamma, o.dbeta}, dyd, {xd, gamma}, {o.mean, o.invstd}, p);
  return o;
}

class BatchNormNhwcGpu : public ::testing::TestWithParam<std::tuple<Dims4, DType, int64_t>> {};

// Tolerances: y and dx as in BatchNormGpu (f32 1e-4; f16 4e-3; bf16 2e-2, dx 4x for the halves:
// one output rounding away from the fp64 reference); the statistics are fp32 Welford per thread,
// merged with Chan's formula (fp32 within a block, fp64 across blocks), so they stay within
// 1e-5 (mean) / 1e-4 (invstd, running_var) of the fp64 two-pass reference even over 200k values
// per channel; dgamma / dbeta are sums of M terms: absolute slack rtol * sqrt(M).
TEST_P(BatchNormNhwcGpu, MatchesCpuAndIsDeterministic) {
  STOKER_REQUIRE_GPU();
  const auto [d, dtype, offset] = GetParam();
  const BnOutputs c = run_nhwc(d, dtype, Device::cpu());
  const BnOutputs g = run_nhwc(d, dtype, kGpu, offset);
  const std::string what =
      fmt::format("NHWC {}x{}x{}x{} {} offset {}", d.n, d.h, d.w, d.c, dtype_name(dtype), offset);
  expect_bn_outputs_close(g, c, dtype, static_cast<double>(d.n * d.h * d.w), what);
  // Fixed reduction order, no atomics: a rerun has the same bits.
  const BnOutputs g2 = run_nhwc(d, dtype, kGpu, offset);
  EXPECT_TRUE(bit_identical(g2.y, g.y)) << what << ": y rerun";
  EXPECT_TRUE(bit_identical(g2.mean, g.mean)) << what << ": save_mean rerun";
  EXPECT_TRUE(bit_identical(g2.invstd, g.invstd)) << what << ": save_invstd rerun";
  EXPECT_TRUE(bit_identical(g2.rm, g.rm)) << what << ": running_mean rerun";
  EXPECT_TRUE(bit_identical(g2.rv, g.rv)) << what << ": running_var rerun";
  EXPECT_TRUE(bit_identical(g2.dx, g.dx)) << what << ": dx rerun";
  EXPECT_TRUE(bit_identical(g2.dgamma, g.dgamma)) << what << ": dgamma rerun";
  EXPECT_TRUE(bit_identical(g2.dbeta, g.dbeta)) << what << ": dbeta rerun";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormNhwcGpu,
    ::testing::Values(
        // ResNet stage 1: 200704 values per channel, 16-byte packs.
        std::make_tuple(Dims4{64, 64, 56, 56}, DType::bf16, int64_t{0}),
        // ResNet-50 last stage: 1568 values per channel, 2048 channels.
        std::make_tuple(Dims4{32, 2048, 7, 7}, DType::f32, int64_t{0}),
        std::make_tuple(Dims4{32, 2048, 7, 7}, DType::f16, int64_t{0}),
        // Odd channel counts (scalar path; partial channel tiles).
        std::make_tuple(Dims4{16, 3, 37, 41}, DType::f32, int64_t{0}),
        std::make_tuple(Dims4{16, 3, 37, 41}, DType::bf16, int64_t{0}),
        std::make_tuple(Dims4{8, 130, 19, 23}, DType::f32, int64_t{0}),
        std::make_tuple(Dims4{8, 130, 19, 23}, DType::f16, int64_t{0}),
        // C a multiple of the pack but the tensors misaligned: the scalar path.
        std::make_tuple(Dims4{8, 64, 30, 30}, DType::bf16, int64_t{1}),
        std::make_tuple(Dims4{8, 64, 30, 30}, DType::f32, int64_t{1}),
        // C a multiple of the pack but not of the 64-channel tile.
        std::make_tuple(Dims4{4, 72, 33, 33}, DType::bf16, int64_t{0})));

// dx may alias dy and y may alias x (as the layers' in-place paths do): the same values.
TEST(BatchNormNhwcGpuAlias, InPlaceForwardAndBackward) {
  STOKER_REQUIRE_GPU();
  const Dims4 d{8, 64, 20, 20};
  const DType dt = DType::bf16;
  const BnOutputs ref = run_nhwc(d, dt, kGpu);
  const ops::BatchNormParams p{.layout = Layout::nhwc};
  const Shape shape = shape4(d, Layout::nhwc);
  const Tensor x = random_tensor(shape, dt, 21, -2.0f, 3.0f).to(kGpu);
  const Tensor dy = random_tensor(shape, dt, 22).to(kGpu);
  const Tensor gamma = random_tensor({d.c}, DType::f32, 28, 0.5f, 1.5f).to(kGpu);
  const Tensor beta = random_tensor({d.c}, DType::f32, 29).to(kGpu);
  const Tensor dg = random_tensor({d.c}, DType::f32, 26).to(kGpu);
  const Tensor db = random_tensor({d.c}, DType::f32, 27).to(kGpu);
  const Tensor mean = poisoned({d.c}, DType::f32, kGpu), inv = poisoned({d.c}, DType::f32, kGpu);
  // Backward first (dx over dy), from the reference's saved statistics and the original x.
  ops::batchnorm_backward({dy, dg, db}, dy, {x, gamma}, {ref.mean, ref.invstd}, p);
  EXPECT_TRUE(bit_identical(dy, ref.dx));
  EXPECT_TRUE(bit_identical(dg, ref.dgamma));
  EXPECT_TRUE(bit_identical(db, ref.dbeta));
  // Then the forward in place (y over x), without running statistics.
  ops::batchnorm_forward_train(x, {mean, inv}, {}, {x, gamma, beta}, p);
  EXPECT_TRUE(bit_identical(x, ref.y));
  EXPECT_TRUE(bit_identical(mean, ref.mean));
  EXPECT_TRUE(bit_identical(inv, ref.invstd));
}

}  // namespace
}  // namespace stoker::test
