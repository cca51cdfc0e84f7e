// ops::batchnorm_forward_train_from_sums on the CPU: with the sums of x and x^2 it gives the
// plain training forward's statistics (to the one-pass form's rounding) and its y, with the
// fused ReLU and the residual too; sums that are not f32 [C] are refused naming them. And the
// CPU's conv2d_forward_stats feeds it: conv + sums, then from_sums, against conv then the plain
// batch norm.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/batchnorm.h"
#include "stoker/ops/conv.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

struct Fwd {
  Tensor y, mean, invstd, rm, rv;
};

Fwd forward(const BnInputs& in, const Tensor& residual, const Dims4& d, Layout l, bool relu,
            const Tensor& sum, const Tensor& sum_sq) {
  const ops::BatchNormParams p{.eps = 1e-5f, .momentum = 0.1f, .layout = l, .relu = relu};
  Fwd o{poisoned(shape4(d, l), in.x.dtype()), poisoned({d.c}, DType::f32),
        poisoned({d.c}, DType::f32), in.rm.clone(), in.rv.clone()};
  if (sum.defined()) {
    ops::batchnorm_forward_train_from_sums(o.y, {o.mean, o.invstd}, {o.rm, o.rv},
                                           {in.x, in.gamma, in.beta, residual}, {sum, sum_sq}, p);
  } else {
    ops::batchnorm_forward_train(o.y, {o.mean, o.invstd}, {o.rm, o.rv},
                                 {in.x, in.gamma, in.beta, residual}, p);
  }
  return o;
}

TEST(BatchNormFromSums, GivesThePlainForwardsStatisticsAndOutput) {
  const Dims4 d{.n = 3, .c = 5, .h = 4, .w = 6};
  for (const Layout l : {Layout::nchw, Layout::nhwc})
    for (const DType dt : {DType::f32, DType::bf16})
      for (const bool relu : {false, true})
        for (const bool res : {false, true}) {
          const std::string what =
              describe_bn_case(l, d, dt, 0) + (relu ? " relu" : "") + (res ? " residual" : "");
          const BnInputs in = make_bn_inputs(d, l, dt, 40);
          const Tensor r = res ? random_tensor(shape4(d, l), dt, 47) : Tensor();
          Tensor sum, sum_sq;
          channel_sums(in.x, l, sum, sum_sq);
          const Fwd want = forward(in, r, d, l, relu, Tensor(), Tensor());
          const Fwd got = forward(in, r, d, l, relu, sum, sum_sq);
          // x in [-2, 3]: |mean| below the spread, so the one-pass variance keeps ~6 digits of
          // f32 sums; y may differ by one rounding of its dtype where the scale moved.
          const double ry = dt == DType::f32 ? 1e-5 : 1e-2;
          EXPECT_TRUE(all_close(got.mean, want.mean, 1e-6, 1e-6)) << what;
          EXPECT_TRUE(all_close(got.invstd, want.invstd, 1e-5, 1e-6)) << what;
          EXPECT_TRUE(all_close(got.rm, want.rm, 1e-6, 1e-6)) << what;
          EXPECT_TRUE(all_close(got.rv, want.rv, 1e-5, 1e-6)) << what;
          EXPECT_TRUE(all_close(got.y, want.y, ry, ry)) << what;
          // Not a copy of the plain path: the statistics come from the sums given. Sums of a
          // shifted x shift the mean.
          const Tensor shifted = sum.clone();
          ops::fill(shifted, 0.0);
          const Fwd zero_mean = forward(in, r, d, l, relu, shifted, sum_sq);
          EXPECT_TRUE(all_close(zero_mean.mean, Tensor::zeros({d.c}, DType::f32), 0, 0)) << what;
        }
}

TEST(BatchNormFromSums, TheCpuConvolutionsSumsFeedIt) {
  const ConvCase t{.n = 2, .c = 3, .h = 7, .w = 7, .k = 4, .r = 3, .s = 3, .ph = 1, .pw = 1};
  const Layout l = Layout::nhwc;
  const Tensor x = random_tensor(shape4(t.x_dims(), l), DType::f32, 50);
  const Tensor w = random_tensor(shape4(t.w_dims(), l), DType::f32, 51, -0.3f, 0.3f);
  const Tensor y = poisoned(shape4(t.y_dims(), l), DType::f32);
  const Tensor sum = poisoned({t.k}, DType::f32), sum_sq = poisoned({t.k}, DType::f32);
  ASSERT_TRUE(ops::conv2d_forward_stats_supported(x, w, t.params(l)));
  ops::conv2d_forward_stats(y, sum, sum_sq, x, w, t.params(l));
  const Dims4 d = ops::dims4(y.shape(), l);
  BnInputs in = make_bn_inputs(d, l, DType::f32, 52);
  in.x = y;
  const Fwd got = forward(in, Tensor(), d, l, true, sum, sum_sq);
  const Fwd want = forward(in, Tensor(), d, l, true, Tensor(), Tensor());
  EXPECT_TRUE(all_close(got.mean, want.mean, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(got.invstd, want.invstd, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(got.y, want.y, 1e-5, 1e-5));
}

TEST(BatchNormFromSums, SumsOfTheWrongShapeOrDtypeAreRefusedNamingThem) {
  const Dims4 d{.n = 2, .c = 3, .h = 2, .w = 2};
  const Layout l = Layout::nhwc;
  const BnInputs in = make_bn_inputs(d, l, DType::f32, 60);
  Tensor sum, sum_sq;
  channel_sums(in.x, l, sum, sum_sq);
  const Tensor short_sum = Tensor::zeros({2}, DType::f32);
  const Tensor half_sq = Tensor::zeros({3}, DType::bf16);
  EXPECT_TRUE(throws_error_with([&] { forward(in, Tensor(), d, l, false, short_sum, sum_sq); },
                                {"batchnorm_forward_train_from_sums", "sum"}));
  EXPECT_TRUE(throws_error_with([&] { forward(in, Tensor(), d, l, false, sum, half_sq); },
                                {"batchnorm_forward_train_from_sums", "sum_sq"}));
}

}  // namespace
}  // namespace stoker::test
