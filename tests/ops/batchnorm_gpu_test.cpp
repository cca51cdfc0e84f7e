// cuDNN batch normalization against the CPU reference on fresh random inputs: training forward
// (output, saved mean / invstd, running statistics with the unbiased variance), evaluation
// forward, backward with dgamma / dbeta accumulated; odd shapes, both layouts, poisoned outputs,
// f32 and half inputs.
#include <gtest/gtest.h>

#include "ops/conv_test_util.h"
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
  ops::batchnorm_forward_train(y_c, mean_c, inv_c, rm_c, rv_c, x, gamma, beta, p);
  const Tensor dx_c = poisoned(shape4(d, l), dtype());
  ops::batchnorm_backward(dx_c, dg_c, db_c, dy, x, gamma, mean_c, inv_c, p);
  const Tensor ye_c = poisoned(shape4(d, l), dtype());
  ops::batchnorm_forward_eval(ye_c, x, gamma, beta, rm_c, rv_c, p);

  // GPU.
  const Tensor x_g = gpu(x), gamma_g = gpu(gamma), beta_g = gpu(beta);
  const Tensor rm_g = gpu(rm), rv_g = gpu(rv), dg_g = gpu(dgamma), db_g = gpu(dbeta);
  const Tensor y_g = poisoned(shape4(d, l), dtype(), kGpu);
  const Tensor mean_g = poisoned({d.c}, DType::f32, kGpu);
  const Tensor inv_g = poisoned({d.c}, DType::f32, kGpu);
  ops::batchnorm_forward_train(y_g, mean_g, inv_g, rm_g, rv_g, x_g, gamma_g, beta_g, p);
  const Tensor dx_g = poisoned(shape4(d, l), dtype(), kGpu);
  ops::batchnorm_backward(dx_g, dg_g, db_g, gpu(dy), x_g, gamma_g, mean_g, inv_g, p);
  const Tensor ye_g = poisoned(shape4(d, l), dtype(), kGpu);
  ops::batchnorm_forward_eval(ye_g, x_g, gamma_g, beta_g, rm_g, rv_g, p);

  const std::string what = core::detail::str(d.n, "x", d.c, "x", d.h, "x", d.w, " ",
                                             ops::layout_name(l), " ", dtype_name(dtype()));
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
  ops::batchnorm_forward_train(y_c, mean_c, inv_c, {}, {}, x, gamma, beta, p);
  const Tensor y_g = poisoned(shape4(d, l), dtype(), kGpu);
  const Tensor mean_g = poisoned({d.c}, DType::f32, kGpu);
  const Tensor inv_g = poisoned({d.c}, DType::f32, kGpu);
  ops::batchnorm_forward_train(y_g, mean_g, inv_g, {}, {}, x.to(kGpu), gamma.to(kGpu),
                               beta.to(kGpu), p);
  EXPECT_TRUE(all_close(y_g, y_c, rtol(), rtol()));
  EXPECT_TRUE(all_close(mean_g, mean_c, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormGpu,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kDims))),
                                            ::testing::Values(Layout::nchw, Layout::nhwc),
                                            ::testing::Values(DType::f32, DType::f16,
                                                              DType::bf16)));

}  // namespace
}  // namespace stoker::test
