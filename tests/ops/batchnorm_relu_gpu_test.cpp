// Batch norm with the fused ReLU (ops::BatchNormParams::relu) on the GPU: the NHWC training
// kernels (kernels/batchnorm_nhwc.cu, the ReLU inside their passes) against the CPU reference
// within the tolerances of batchnorm_gpu_test.cpp, on ResNet-like, odd-channel and misaligned
// shapes; against the unfused composition on the GPU (BN kernels then the ReLU kernels: the same
// bits); reruns bit-identical; the backward given beta (the mask rebuilt from x, y not read)
// against the one that reads y (the same bits); and the NCHW / evaluation paths (cuDNN then the
// ReLU kernel) against the CPU.
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
    ops::batchnorm_forward_train(o.y, {o.mean, o.invstd}, {o.rm, o.rv}, {xd, gamma, beta},
                                 with_relu);
    const Tensor mask = mask_y.defined() ? on(mask_y) : o.y;
    ops::batchnorm_backward({o.dx, o.dgamma, o.dbeta}, dyd, {xd, gamma}, {o.mean, o.invstd},
                            with_relu, mask);
  } else {
    const Tensor z = poisoned(shape, k.dtype, device);
    ops::batchnorm_forward_train(z, {o.mean, o.invstd}, {o.rm, o.rv}, {xd, gamma, beta}, plain);
    ops::relu_forward(o.y, z);
    const Tensor dz = poisoned(shape, k.dtype, device);
    ops::relu_backward(dz, dyd, mask_y.defined() ? on(mask_y) : o.y);
    ops::batchnorm_backward({o.dx, o.dgamma, o.dbeta}, dz, {xd, gamma}, {o.mean, o.invstd}, plain);
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

// Given beta, the NHWC backward rebuilds the ReLU's mask from x (kernels/batchnorm_nhwc.cu,
// Mask::x) instead of reading y: dx, dgamma and dbeta are the bits of the backward that reads
// the forward's y. Edge cases in the data: channel 0 holds a constant x and beta 0, so bn(x) is
// exactly 0 (masked); channel 1 a constant x and beta 1e-9, positive in f32 and bf16 but 0 once
// rounded to f16 (the mask must see y as stored); the last channel one NaN (NaN passes the mask).
struct MaskCase {
  Dims4 d;
  DType dtype;
  int64_t offset = 0;  // elements into their blocks for x and dy (1: the scalar path)
};

class BatchNormReluGpuMaskFromX : public ::testing::TestWithParam<MaskCase> {};

TEST_P(BatchNormReluGpuMaskFromX, SameBitsAsReadingYWhichIsNotRead) {
  STOKER_REQUIRE_GPU();
  const MaskCase k = GetParam();
  const Dims4& d = k.d;
  const std::string what = describe_bn_case(Layout::nhwc, d, k.dtype, k.offset);
  const ops::BatchNormParams p{.layout = Layout::nhwc, .relu = true};
  const Shape shape = shape4(d, Layout::nhwc);
  const int64_t n = shape.numel();
  std::vector<float> xv = random_floats(static_cast<size_t>(n), 81, -2.0f, 3.0f);
  std::vector<float> bv = random_floats(static_cast<size_t>(d.c), 82);
  for (int64_t i = 0; i < n; i += d.c) {
    xv[static_cast<size_t>(i)] = 0.75f;
    xv[static_cast<size_t>(i + 1)] = -1.25f;
  }
  bv[0] = 0.0f;
  bv[1] = 1e-9f;
  xv[static_cast<size_t>(n / 2 / d.c * d.c + d.c - 1)] = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = copy_at_offset(Tensor::from_floats(xv, shape, k.dtype), kGpu, k.offset);
  const Tensor dy = copy_at_offset(random_tensor(shape, k.dtype, 83), kGpu, k.offset);
  const Tensor gamma = random_tensor({d.c}, DType::f32, 84, 0.5f, 1.5f).to(kGpu);
  const Tensor beta = Tensor::from_floats(bv, {d.c}).to(kGpu);
  const Tensor dgamma0 = random_tensor({d.c}, DType::f32, 85).to(kGpu);
  const Tensor dbeta0 = random_tensor({d.c}, DType::f32, 86).to(kGpu);
  const Tensor y = poisoned(shape, k.dtype, kGpu);
  const Tensor mean = poisoned({d.c}, DType::f32, kGpu);
  const Tensor invstd = poisoned({d.c}, DType::f32, kGpu);
  ops::batchnorm_forward_train(y, {mean, invstd}, {}, {x, gamma, beta}, p);
  EXPECT_TRUE(partly_zero(y)) << what << ": the ReLU";

  struct Grads {
    Tensor dx, dgamma, dbeta;
  };
  const auto backward = [&](const Tensor& y_arg, const Tensor& beta_arg) {
    Grads g{poisoned(shape, k.dtype, kGpu), dgamma0.clone(), dbeta0.clone()};
    ops::batchnorm_backward({g.dx, g.dgamma, g.dbeta}, dy, {x, gamma, beta_arg}, {mean, invstd}, p,
                            y_arg);
    return g;
  };
  const auto expect_same = [&](const Grads& a, const Grads& b, const std::string& how) {
    EXPECT_TRUE(bit_identical(a.dx, b.dx)) << what << ": dx " << how;
    EXPECT_TRUE(bit_identical(a.dgamma, b.dgamma)) << what << ": dgamma " << how;
    EXPECT_TRUE(bit_identical(a.dbeta, b.dbeta)) << what << ": dbeta " << how;
  };
  const Grads read_y = backward(y, Tensor());
  expect_same(backward(y, beta), read_y, "with beta vs reading y");

  // y is not read, and takes no part in the choice of the vector width: a y of zeros (every
  // gradient masked, were it read) one element into its block (the scalar path, were its
  // alignment looked at) gives the same bits.
  const Tensor y_wrong = empty_at_offset(n, k.dtype, kGpu, 1).reshape(shape);
  ops::fill(y_wrong, 0.0);
  expect_same(backward(y_wrong, beta), read_y, "with beta and a wrong y");
  // So y may be left out altogether (what nn::BatchNorm2d does on this path).
  ASSERT_FALSE(ops::batchnorm_backward_reads_y(kGpu, p, true, false));
  expect_same(backward(Tensor(), beta), read_y, "with beta and no y");
  // Not vacuous: the backward that reads that y gives other gradients.
  EXPECT_FALSE(bit_identical(backward(y_wrong, Tensor()).dbeta, read_y.dbeta)) << what;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormReluGpuMaskFromX,
    ::testing::Values(
        // 16-byte packs; M = N*H*W odd for f16 and f32.
        MaskCase{{16, 64, 14, 14}, DType::bf16}, MaskCase{{5, 64, 7, 9}, DType::f16},
        MaskCase{{3, 64, 5, 7}, DType::f32},
        // Several channel tiles; C a multiple of the pack, not of the tile.
        MaskCase{{8, 256, 7, 7}, DType::f16}, MaskCase{{2, 24, 15, 17}, DType::f32},
        // C not a multiple of the pack: the scalar path.
        MaskCase{{4, 12, 9, 11}, DType::bf16}, MaskCase{{3, 7, 13, 5}, DType::f16},
        MaskCase{{5, 7, 9, 9}, DType::f32},
        // Misaligned x and dy: the scalar path.
        MaskCase{{4, 64, 11, 11}, DType::bf16, 1}, MaskCase{{3, 64, 7, 7}, DType::f16, 1}));

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
    ops::batchnorm_forward_eval(y_c, {x, gamma, beta}, {rm, rv}, p);
    const Tensor y_g = poisoned(shape4(d, l), DType::f32, kGpu);
    ops::batchnorm_forward_eval(y_g, {x.to(kGpu), gamma.to(kGpu), beta.to(kGpu)},
                                {rm.to(kGpu), rv.to(kGpu)}, p);
    EXPECT_TRUE(all_close(y_g, y_c, 1e-4, 1e-4)) << ops::layout_name(l);
    const std::vector<float> yv = y_g.to_floats();
    EXPECT_TRUE(std::all_of(yv.begin(), yv.end(), [](float v) { return v >= 0.0f; }));
  }
}

}  // namespace
}  // namespace stoker::test
