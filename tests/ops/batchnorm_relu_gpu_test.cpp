// Batch norm with the fused ReLU (ops::BatchNormParams::relu) on the GPU: the NHWC training
// kernels (kernels/batchnorm_nhwc.cu, the ReLU inside their passes) against the CPU reference
// within the tolerances of batchnorm_gpu_test.cpp, on ResNet-like, odd-channel and misaligned
// shapes; against the unfused composition on the GPU (BN kernels then the ReLU kernels: the same
// bits); reruns bit-identical; and the NCHW / evaluation paths (cuDNN then the ReLU kernel)
// against the CPU.
#include <gtest/gtest.h>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/batchnorm.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Device kGpu = Device::cuda(0);

struct Case {
  Dims4 d;
  DType dtype;
  Layout layout = Layout::nhwc;
  int64_t offset = 0;  // elements into their blocks for x and dy (1: the scalar path)
};

// Training forward then backward on `device`, fused or as the composition. `mask_y`, when
// given, replaces the forward's output as the backward's mask source (so that the CPU reference
// masks exactly where the GPU did: the sign of bn(x) near 0 may differ between fp32 and fp64).
BnOutputs run(const Case& k, Device device, bool fused, const Tensor& mask_y = Tensor()) {
  const ops::BatchNormParams plain{.eps = 1e-5f, .momentum = 0.1f, .layout = k.layout};
  ops::BatchNormParams with_relu = plain;
  with_relu.relu = true;
  const Shape shape = shape4(k.d, k.layout);
  const int64_t c = k.d.c;
  const Tensor x = random_tensor(shape, k.dtype, 31, -2.0f, 3.0f);
  const Tensor dy = random_tensor(shape, k.dtype, 32);
  const auto on = [&](const Tensor& t) { return t.to(device); };
  BnOutputs o;
  o.rm = on(random_tensor({c}, DType::f32, 34));
  o.rv = on(random_tensor({c}, DType::f32, 35, 0.5f, 2.0f));
  o.dgamma = on(random_tensor({c}, DType::f32, 36));
  o.dbeta = on(random_tensor({c}, DType::f32, 37));
  const Tensor gamma = on(random_tensor({c}, DType::f32, 38, 0.5f, 1.5f));
  const Tensor beta = on(random_tensor({c}, DType::f32, 39));
  const Tensor xd = k.offset == 0 ? on(x) : copy_at_offset(x, device, k.offset);
  const Tensor dyd = k.offset == 0 ? on(dy) : copy_at_offset(dy, device, k.offset);
  o.y = poisoned(shape, k.dtype, device);
  o.mean = poisoned({c}, DType::f32, device);
  o.invstd = poisoned({c}, DType::f32, device);
  o.dx = poisoned(shape, k.dtype, device);
  if (fused) {
    ops::batchnorm_forward_train(o.y, o.mean, o.invstd, o.rm, o.rv, xd, gamma, beta, with_relu);
    const Tensor mask = mask_y.defined() ? on(mask_y) : o.y;
    ops::batchnorm_backward(o.dx, o.dgamma, o.dbeta, dyd, xd, gamma, o.mean, o.invstd, with_relu,
                            mask);
  } else {
    const Tensor z = poisoned(shape, k.dtype, device);
    ops::batchnorm_forward_train(z, o.mean, o.invstd, o.rm, o.rv, xd, gamma, beta, plain);
    ops::relu_forward(o.y, z);
    const Tensor dz = poisoned(shape, k.dtype, device);
    ops::relu_backward(dz, dyd, mask_y.defined() ? on(mask_y) : o.y);
    ops::batchnorm_backward(o.dx, o.dgamma, o.dbeta, dz, xd, gamma, o.mean, o.invstd, plain);
  }
  return o;
}

class BatchNormReluGpu : public ::testing::TestWithParam<Case> {};

// Tolerances as BatchNormGpu / BatchNormNhwcGpu (batchnorm_gpu_test.cpp).
TEST_P(BatchNormReluGpu, MatchesCpuAndTheUnfusedComposition) {
  STOKER_REQUIRE_GPU();
  const Case k = GetParam();
  const Dims4& d = k.d;
  const std::string what = describe_bn_case(k.layout, d, k.dtype, k.offset);
  const BnOutputs g = run(k, kGpu, /*fused=*/true);
  const BnOutputs c = run(k, Device::cpu(), /*fused=*/true, g.y.to(Device::cpu()));
  expect_bn_outputs_close(g, c, k.dtype, static_cast<double>(d.n * d.h * d.w), what);
  EXPECT_TRUE(partly_zero(g.y)) << what << ": the ReLU";

  // The unfused composition on the GPU: the same kernels' arithmetic, so the same bits (NHWC:
  // stoker's deterministic kernels; NCHW runs the composition itself through cuDNN, whose
  // reductions are not promised to be deterministic, so it is only held to the tolerances).
  const BnOutputs u = run(k, kGpu, /*fused=*/false);
  if (k.layout == Layout::nchw) {
    expect_bn_outputs_close(g, u, k.dtype, static_cast<double>(d.n * d.h * d.w),
                            what + " vs unfused");
    return;
  }
  EXPECT_TRUE(bit_identical(g.y, u.y)) << what << ": y vs unfused";
  EXPECT_TRUE(bit_identical(g.mean, u.mean)) << what << ": save_mean vs unfused";
  EXPECT_TRUE(bit_identical(g.rv, u.rv)) << what << ": running_var vs unfused";
  EXPECT_TRUE(bit_identical(g.dx, u.dx)) << what << ": dx vs unfused";
  EXPECT_TRUE(bit_identical(g.dgamma, u.dgamma)) << what << ": dgamma vs unfused";
  EXPECT_TRUE(bit_identical(g.dbeta, u.dbeta)) << what << ": dbeta vs unfused";

  // Deterministic.
  const BnOutputs g2 = run(k, kGpu, /*fused=*/true);
  EXPECT_TRUE(bit_identical(g2.y, g.y)) << what << ": y rerun";
  EXPECT_TRUE(bit_identical(g2.dx, g.dx)) << what << ": dx rerun";
  EXPECT_TRUE(bit_identical(g2.dgamma, g.dgamma)) << what << ": dgamma rerun";
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormReluGpu,
                         ::testing::Values(
                             // ResNet-like stage-1 slice, 16-byte packs.
                             Case{{16, 64, 28, 28}, DType::bf16},
                             // Many channels, few values per channel.
                             Case{{8, 512, 7, 7}, DType::f32}, Case{{8, 512, 7, 7}, DType::f16},
                             // Odd channel counts (scalar path; partial channel tiles).
                             Case{{16, 3, 37, 41}, DType::f32}, Case{{8, 130, 19, 23}, DType::bf16},
                             // C a multiple of the pack, tensors misaligned: the scalar path.
                             Case{{8, 64, 30, 30}, DType::bf16, Layout::nhwc, 1},
                             Case{{8, 64, 30, 30}, DType::f32, Layout::nhwc, 1},
                             // C a multiple of the pack but not of the 64-channel tile.
                             Case{{4, 72, 33, 33}, DType::bf16},
                             // NCHW: cuDNN then the ReLU kernels.
                             Case{{3, 5, 13, 13}, DType::f32, Layout::nchw},
                             Case{{4, 16, 9, 9}, DType::bf16, Layout::nchw}));

// The evaluation forward (cuDNN, then the ReLU kernel in place) in both layouts.
TEST(BatchNormReluGpuEval, MatchesCpu) {
  STOKER_REQUIRE_GPU();
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    const Dims4 d{4, 24, 9, 11};
    const ops::BatchNormParams p{.eps = 1e-3f, .layout = l, .relu = true};
    const Tensor x = random_tensor(shape4(d, l), DType::f32, 41, -2.0f, 3.0f);
    const Tensor gamma = random_tensor({d.c}, DType::f32, 42, 0.5f, 1.5f);
    const Tensor beta = random_tensor({d.c}, DType::f32, 43);
    const Tensor rm = random_tensor({d.c}, DType::f32, 44);
    const Tensor rv = random_tensor({d.c}, DType::f32, 45, 0.5f, 2.0f);
    const Tensor y_c = poisoned(shape4(d, l), DType::f32);
    ops::batchnorm_forward_eval(y_c, x, gamma, beta, rm, rv, p);
    const Tensor y_g = poisoned(shape4(d, l), DType::f32, kGpu);
    ops::batchnorm_forward_eval(y_g, x.to(kGpu), gamma.to(kGpu), beta.to(kGpu), rm.to(kGpu),
                                rv.to(kGpu), p);
    EXPECT_TRUE(all_close(y_g, y_c, 1e-4, 1e-4)) << ops::layout_name(l);
    const std::vector<float> yv = y_g.to_floats();
    EXPECT_TRUE(std::all_of(yv.begin(), yv.end(), [](float v) { return v >= 0.0f; }));
  }
}

}  // namespace
}  // namespace stoker::test
