// ops::batchnorm_forward_train_from_sums on the GPU (NHWC: the statistics pass skipped, the
// normalize pass as the plain forward's): against the CPU's from_sums with the same sums, and
// against the GPU's plain forward; NCHW on the GPU is refused. Then the sums from cuDNN's fused
// convolution + statistics (where this GPU has the engine) feeding it, against convolution then
// the plain batch norm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "ops/batchnorm_test_util.h"
#include "stoker/ops/batchnorm.h"
#include "stoker/ops/conv.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Device kGpu = Device::cuda(0);

struct Fwd {
  Tensor y, mean, invstd, rm, rv;
};

Fwd forward(const Tensor& x, const BnInputs& in, const Tensor& residual, Layout l, bool relu,
            const Tensor& sum, const Tensor& sum_sq, Device dev) {
  const Dims4 d = ops::dims4(x.shape(), l);
  const ops::BatchNormParams p{.eps = 1e-5f, .momentum = 0.1f, .layout = l, .relu = relu};
  Fwd o{poisoned(x.shape(), x.dtype(), dev), poisoned({d.c}, DType::f32, dev),
        poisoned({d.c}, DType::f32, dev), in.rm.to(dev), in.rv.to(dev)};
  const Tensor g = in.gamma.to(dev), b = in.beta.to(dev);
  const Tensor xd = x.to(dev), r = residual.defined() ? residual.to(dev) : Tensor();
  if (sum.defined()) {
    ops::batchnorm_forward_train_from_sums(o.y, {o.mean, o.invstd}, {o.rm, o.rv}, {xd, g, b, r},
                                           {sum.to(dev), sum_sq.to(dev)}, p);
  } else {
    ops::batchnorm_forward_train(o.y, {o.mean, o.invstd}, {o.rm, o.rv}, {xd, g, b, r}, p);
  }
  return o;
}

// `rs`: the statistics' relative tolerance (1e-3 where the sums are of the values before their
// rounding to y's half dtype, as the fused convolution's epilogue gives them: each y differs
// from what was summed by up to half an ulp of its dtype).
void expect_close(const Fwd& got, const Fwd& want, DType dt, const std::string& what,
                  double rs = 1e-5) {
  const double ry = dt == DType::f32 ? 1e-4 : 2e-2;
  const double as = rs == 1e-5 ? 1e-5 : 1e-4;
  EXPECT_TRUE(all_close(got.mean, want.mean, rs, as)) << what << ": mean";
  EXPECT_TRUE(all_close(got.invstd, want.invstd, std::max(rs, 1e-4), 1e-5)) << what << ": invstd";
  EXPECT_TRUE(all_close(got.rm, want.rm, rs, as)) << what << ": running_mean";
  EXPECT_TRUE(all_close(got.rv, want.rv, std::max(rs, 1e-4), 1e-5)) << what << ": running_var";
  EXPECT_TRUE(all_close(got.y, want.y, ry, ry)) << what << ": y";
}

TEST(BatchNormFromSumsGpu, MatchesTheCpuAndThePlainForward) {
  STOKER_REQUIRE_GPU();
  const Dims4 d{.n = 4, .c = 64, .h = 7, .w = 9};
  const Layout l = Layout::nhwc;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const bool relu : {false, true})
      for (const bool res : {false, true}) {
        const std::string what =
            describe_bn_case(l, d, dt, 0) + (relu ? " relu" : "") + (res ? " residual" : "");
        const BnInputs in = make_bn_inputs(d, l, dt, 70);
        const Tensor r = res ? random_tensor(shape4(d, l), dt, 77) : Tensor();
        Tensor s, q;
        channel_sums(in.x, l, s, q);
        const Fwd cpu = forward(in.x, in, r, l, relu, s, q, Device::cpu());
        const Fwd gpu = forward(in.x, in, r, l, relu, s, q, kGpu);
        const Fwd gpu_plain = forward(in.x, in, r, l, relu, Tensor(), Tensor(), kGpu);
        expect_close(gpu, cpu, dt, what + " (GPU from sums vs CPU from sums)");
        expect_close(gpu, gpu_plain, dt, what + " (GPU from sums vs GPU plain)");
      }
}

TEST(BatchNormFromSumsGpu, NchwIsRefused) {
  STOKER_REQUIRE_GPU();
  const Dims4 d{.n = 2, .c = 4, .h = 3, .w = 3};
  const BnInputs in = make_bn_inputs(d, Layout::nchw, DType::f32, 80);
  const Tensor s = Tensor::zeros({d.c}, DType::f32), q = Tensor::zeros({d.c}, DType::f32);
  EXPECT_TRUE(
      throws_error_with([&] { forward(in.x, in, Tensor(), Layout::nchw, false, s, q, kGpu); },
                        {"batchnorm_forward_train_from_sums", "NCHW", "Layout::nhwc"}));
}

// ResNet-50 shapes: where cuDNN fuses the statistics into the convolution, those sums feed the
// batch norm and give what the convolution then the plain batch norm give.
TEST(BatchNormFromSumsGpu, TheFusedConvolutionsSumsFeedIt) {
  STOKER_REQUIRE_GPU();
  const ConvCase cases[] = {
      {.n = 8, .c = 64, .h = 28, .w = 28, .k = 256, .r = 1, .s = 1},
      {.n = 8, .c = 64, .h = 28, .w = 28, .k = 64, .r = 3, .s = 3, .ph = 1, .pw = 1},
  };
  const Layout l = Layout::nhwc;
  for (const DType dt : {DType::bf16, DType::f16})
    for (const ConvCase& t : cases) {
      const std::string what = t.str() + " " + std::string(dtype_name(dt));
      const Tensor x = random_tensor(shape4(t.x_dims(), l), dt, 81).to(kGpu);
      const Tensor w = random_tensor(shape4(t.w_dims(), l), dt, 82, -0.2f, 0.2f).to(kGpu);
      if (!ops::conv2d_forward_stats_supported(x, w, t.params(l))) {
        std::printf("batchnorm from sums: no fused engine for %s\n", what.c_str());
        continue;
      }
      const Tensor y = poisoned(shape4(t.y_dims(), l), dt, kGpu);
      const Tensor sum = poisoned({t.k}, DType::f32, kGpu), sq = poisoned({t.k}, DType::f32, kGpu);
      ops::conv2d_forward_stats(y, sum, sq, x, w, t.params(l));
      const Dims4 d = ops::dims4(y.shape(), l);
      const BnInputs in = make_bn_inputs(d, l, dt, 83);
      const Fwd got = forward(y, in, Tensor(), l, true, sum, sq, kGpu);
      const Fwd want = forward(y, in, Tensor(), l, true, Tensor(), Tensor(), kGpu);
      expect_close(got, want, dt, what, 1e-3);
      std::printf("batchnorm from sums: fed by the fused convolution for %s\n", what.c_str());
    }
}

}  // namespace
}  // namespace stoker::test
