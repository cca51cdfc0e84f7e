// Batch norm with a residual input (the ResNet block tail y = act(bn(x) + r)) on the GPU: the
// NHWC training kernels (kernels/batchnorm_nhwc.cu: the add and the ReLU in the normalize pass,
// dresidual written by the sums pass) against the CPU reference within the tolerances of
// batchnorm_test_util.h; against the unfused composition on the GPU (BN kernels, the add kernel,
// the ReLU kernels: the same bits); reruns bit-identical; and the NCHW / evaluation paths (cuDNN,
// then add and ReLU) against the CPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/batchnorm.h"
#include "stoker/ops/elementwise.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Device kGpu = Device::cuda(0);

struct Case {
  Dims4 d;
  DType dtype;
  Layout layout = Layout::nhwc;
  int64_t offset = 0;  // elements into their blocks for x, dy and r (1: the scalar path)
};

struct Out {
  BnOutputs bn;
  Tensor dr;
};

// Training forward then backward with the residual and the ReLU on `device`, fused or composed.
// `mask_y`, when given, replaces the forward's output as the backward's mask source (the CPU
// reference then masks exactly where the GPU did).
Out run(const Case& k, Device device, bool fused, const Tensor& mask_y = Tensor()) {
  const ops::BatchNormParams plain{.eps = 1e-5f, .momentum = 0.1f, .layout = k.layout};
  ops::BatchNormParams p = plain;
  p.relu = true;
  const Shape shape = shape4(k.d, k.layout);
  const int64_t c = k.d.c;
  const Tensor x = random_tensor(shape, k.dtype, 131, -2.0f, 3.0f);
  const Tensor dy = random_tensor(shape, k.dtype, 132);
  const Tensor r = random_tensor(shape, k.dtype, 133, -1.5f, 1.5f);
  const auto on = [&](const Tensor& t) { return t.to(device); };
  const auto at = [&](const Tensor& t) {
    return k.offset == 0 ? on(t) : copy_at_offset(t, device, k.offset);
  };
  Out o;
  BnOutputs& b = o.bn;
  b.rm = on(random_tensor({c}, DType::f32, 134));
  b.rv = on(random_tensor({c}, DType::f32, 135, 0.5f, 2.0f));
  b.dgamma = on(random_tensor({c}, DType::f32, 136));
  b.dbeta = on(random_tensor({c}, DType::f32, 137));
  const Tensor gamma = on(random_tensor({c}, DType::f32, 138, 0.5f, 1.5f));
  const Tensor beta = on(random_tensor({c}, DType::f32, 139));
  const Tensor xd = at(x), dyd = at(dy), rd = at(r);
  b.y = poisoned(shape, k.dtype, device);
  b.mean = poisoned({c}, DType::f32, device);
  b.invstd = poisoned({c}, DType::f32, device);
  b.dx = poisoned(shape, k.dtype, device);
  o.dr = poisoned(shape, k.dtype, device);
  if (fused) {
    ops::batchnorm_forward_train(b.y, {b.mean, b.invstd}, {b.rm, b.rv}, {xd, gamma, beta, rd}, p);
    ops::batchnorm_backward({b.dx, b.dgamma, b.dbeta, o.dr}, dyd, {xd, gamma}, {b.mean, b.invstd},
                            p, mask_y.defined() ? on(mask_y) : b.y);
  } else {
    const Tensor z = poisoned(shape, k.dtype, device);
    ops::batchnorm_forward_train(z, {b.mean, b.invstd}, {b.rm, b.rv}, {xd, gamma, beta}, plain);
    const Tensor sum = poisoned(shape, k.dtype, device);
    ops::add(sum, rd, z);
    ops::relu_forward(b.y, sum);
    ops::relu_backward(o.dr, dyd, mask_y.defined() ? on(mask_y) : b.y);
    ops::batchnorm_backward({b.dx, b.dgamma, b.dbeta}, o.dr, {xd, gamma}, {b.mean, b.invstd},
                            plain);
  }
  return o;
}

class BatchNormResidualGpu : public ::testing::TestWithParam<Case> {};

TEST_P(BatchNormResidualGpu, MatchesCpuAndTheUnfusedComposition) {
  STOKER_REQUIRE_GPU();
  const Case k = GetParam();
  const Dims4& d = k.d;
  const std::string what = describe_bn_case(k.layout, d, k.dtype, k.offset);
  const Out g = run(k, kGpu, /*fused=*/true);
  const Out c = run(k, Device::cpu(), /*fused=*/true, g.bn.y.to(Device::cpu()));
  expect_bn_outputs_close(g.bn, c.bn, k.dtype, static_cast<double>(d.n * d.h * d.w), what);
  // The same mask on both sides: dr is dy or 0, exactly.
  EXPECT_TRUE(bit_identical(g.dr.to(Device::cpu()), c.dr)) << what << ": dresidual";
  EXPECT_TRUE(partly_zero(g.bn.y)) << what;

  const Out u = run(k, kGpu, /*fused=*/false);
  if (k.layout == Layout::nchw) {  // cuDNN's reductions: tolerances only
    expect_bn_outputs_close(g.bn, u.bn, k.dtype, static_cast<double>(d.n * d.h * d.w),
                            what + " vs unfused");
    return;
  }
  EXPECT_TRUE(bit_identical(g.bn.y, u.bn.y)) << what << ": y vs unfused";
  EXPECT_TRUE(bit_identical(g.bn.rv, u.bn.rv)) << what << ": running_var vs unfused";
  EXPECT_TRUE(bit_identical(g.dr, u.dr)) << what << ": dresidual vs unfused";
  EXPECT_TRUE(bit_identical(g.bn.dx, u.bn.dx)) << what << ": dx vs unfused";
  EXPECT_TRUE(bit_identical(g.bn.dgamma, u.bn.dgamma)) << what << ": dgamma vs unfused";
  EXPECT_TRUE(bit_identical(g.bn.dbeta, u.bn.dbeta)) << what << ": dbeta vs unfused";

  const Out g2 = run(k, kGpu, /*fused=*/true);
  EXPECT_TRUE(bit_identical(g2.bn.y, g.bn.y)) << what << ": y rerun";
  EXPECT_TRUE(bit_identical(g2.bn.dx, g.bn.dx)) << what << ": dx rerun";
  EXPECT_TRUE(bit_identical(g2.dr, g.dr)) << what << ": dresidual rerun";
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormResidualGpu,
                         ::testing::Values(Case{{16, 64, 28, 28}, DType::bf16},
                                           Case{{8, 512, 7, 7}, DType::f32},
                                           Case{{8, 256, 7, 7}, DType::f16},
                                           Case{{16, 3, 37, 41}, DType::f32},
                                           Case{{8, 130, 19, 23}, DType::bf16},
                                           Case{{8, 64, 30, 30}, DType::bf16, Layout::nhwc, 1},
                                           Case{{4, 72, 33, 33}, DType::bf16},
                                           Case{{3, 5, 13, 13}, DType::f32, Layout::nchw},
                                           Case{{4, 16, 9, 9}, DType::bf16, Layout::nchw}));

// The evaluation forward with a residual (cuDNN, then add and ReLU) in both layouts.
TEST(BatchNormResidualGpuEval, MatchesCpu) {
  STOKER_REQUIRE_GPU();
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    const Dims4 d{4, 24, 9, 11};
    const ops::BatchNormParams p{.eps = 1e-3f, .layout = l, .relu = true};
    const Tensor x = random_tensor(shape4(d, l), DType::f32, 141, -2.0f, 3.0f);
    const Tensor r = random_tensor(shape4(d, l), DType::f32, 146);
    const Tensor gamma = random_tensor({d.c}, DType::f32, 142, 0.5f, 1.5f);
    const Tensor beta = random_tensor({d.c}, DType::f32, 143);
    const Tensor rm = random_tensor({d.c}, DType::f32, 144);
    const Tensor rv = random_tensor({d.c}, DType::f32, 145, 0.5f, 2.0f);
    const Tensor y_c = poisoned(shape4(d, l), DType::f32);
    ops::batchnorm_forward_eval(y_c, {x, gamma, beta, r}, {rm, rv}, p);
    const Tensor y_g = poisoned(shape4(d, l), DType::f32, kGpu);
    ops::batchnorm_forward_eval(y_g, {x.to(kGpu), gamma.to(kGpu), beta.to(kGpu), r.to(kGpu)},
                                {rm.to(kGpu), rv.to(kGpu)}, p);
    EXPECT_TRUE(all_close(y_g, y_c, 1e-4, 1e-4)) << ops::layout_name(l);
    const std::vector<float> yv = y_g.to_floats();
    EXPECT_TRUE(std::all_of(yv.begin(), yv.end(), [](float v) { return v >= 0.0f; }));
  }
}

}  // namespace
}  // namespace stoker::test
