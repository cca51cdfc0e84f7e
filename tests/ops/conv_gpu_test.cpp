// cuDNN convolution against the CPU reference on fresh random inputs: odd shapes, strides,
// padding, dilation, groups, both layouts, poisoned outputs. fp32 runs without TF32 (the
// default), so it must match to ~1e-4 relative; f16/bf16 to their rounding. Also the per-channel
// bias kernels and layout conversion, which are exact or nearly so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "ops/conv_test_util.h"
#include "stoker/ops/conv.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Device kGpu = Device::cuda(0);

const ConvCase kCases[] = {
    {.n = 3, .c = 5, .h = 7, .w = 7, .k = 3, .r = 3, .s = 3},
    {.n = 3, .c = 5, .h = 13, .w = 13, .k = 5, .r = 3, .s = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1},
    {.n = 3, .c = 5, .h = 13, .w = 13, .k = 3, .r = 5, .s = 5, .ph = 1, .pw = 1},
    {.n = 3, .c = 5, .h = 7, .w = 7, .k = 5, .r = 5, .s = 5, .sh = 2, .sw = 2},
    {.n = 2,
     .c = 6,
     .h = 9,
     .w = 11,
     .k = 4,
     .r = 3,
     .s = 2,
     .sh = 2,
     .sw = 1,
     .ph = 1,
     .pw = 1,
     .dh = 2,
     .dw = 1,
     .groups = 2},
    {.n = 3,
     .c = 8,
     .h = 13,
     .w = 13,
     .k = 8,
     .r = 3,
     .s = 3,
     .sh = 2,
     .sw = 2,
     .ph = 1,
     .pw = 1,
     .groups = 8},
    {.n = 4, .c = 16, .h = 14, .w = 14, .k = 32, .r = 1, .s = 1},
    {.n = 2, .c = 32, .h = 28, .w = 28, .k = 64, .r = 3, .s = 3, .ph = 1, .pw = 1},
};

// Passes when the GPU result is within rtol of the CPU's, relative to the result's scale.
::testing::AssertionResult close_to(const Tensor& gpu, const Tensor& cpu, double rtol) {
  const std::vector<float> want = cpu.to_floats();
  const std::vector<double> w(want.begin(), want.end());
  return all_close(gpu.to_floats(), w, rtol, rtol * std::max(1.0, max_abs_of(w)));
}

class ConvGpu : public ::testing::TestWithParam<std::tuple<int, Layout, DType>> {
 protected:
  const ConvCase& tcase() const { return kCases[std::get<0>(GetParam())]; }
  Layout layout() const { return std::get<1>(GetParam()); }
  DType dtype() const { return std::get<2>(GetParam()); }
  double rtol() const {
    return dtype() == DType::f32 ? 1e-4 : (dtype() == DType::f16 ? 4e-3 : 2e-2);
  }
};

TEST_P(ConvGpu, ForwardMatchesCpu) {
  STOKER_REQUIRE_GPU();
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Tensor x = random_tensor(shape4(t.x_dims(), l), dtype(), 1);
  const Tensor w = random_tensor(shape4(t.w_dims(), l), dtype(), 2);
  const Tensor want = poisoned(shape4(t.y_dims(), l), dtype());
  ops::conv2d_forward(want, x, w, t.params(l));
  const Tensor y = poisoned(shape4(t.y_dims(), l), dtype(), kGpu);
  ops::conv2d_forward(y, x.to(kGpu), w.to(kGpu), t.params(l));
  EXPECT_TRUE(close_to(y, want, rtol())) << t.str() << " " << ops::layout_name(l);
}

TEST_P(ConvGpu, BackwardDataMatchesCpu) {
  STOKER_REQUIRE_GPU();
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype(), 3);
  const Tensor w = random_tensor(shape4(t.w_dims(), l), dtype(), 4);
  const Tensor want = poisoned(shape4(t.x_dims(), l), dtype());
  ops::conv2d_backward_data(want, dy, w, t.params(l));
  const Tensor dx = poisoned(shape4(t.x_dims(), l), dtype(), kGpu);
  ops::conv2d_backward_data(dx, dy.to(kGpu), w.to(kGpu), t.params(l));
  EXPECT_TRUE(close_to(dx, want, rtol())) << t.str() << " " << ops::layout_name(l);
}

// accumulate: dx += the gradient (cuDNN's beta = 1), against the CPU's add.
TEST_P(ConvGpu, BackwardDataAccumulatesLikeCpu) {
  STOKER_REQUIRE_GPU();
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype(), 3);
  const Tensor w = random_tensor(shape4(t.w_dims(), l), dtype(), 4);
  const Tensor dx0 = random_tensor(shape4(t.x_dims(), l), dtype(), 8);
  const Tensor want = dx0.clone();
  ops::conv2d_backward_data(want, dy, w, t.params(l), /*accumulate=*/true);
  const Tensor dx = dx0.to(kGpu);
  ops::conv2d_backward_data(dx, dy.to(kGpu), w.to(kGpu), t.params(l), /*accumulate=*/true);
  EXPECT_TRUE(close_to(dx, want, rtol())) << t.str() << " " << ops::layout_name(l);
}

// dw accumulates: in the inputs' dtype and, for half inputs, also into an f32 gradient.
TEST_P(ConvGpu, BackwardFilterAccumulatesLikeCpu) {
  STOKER_REQUIRE_GPU();
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype(), 5);
  const Tensor x = random_tensor(shape4(t.x_dims(), l), dtype(), 6);
  for (const DType dw_dtype : {dtype(), DType::f32}) {
    const Tensor dw0 = random_tensor(shape4(t.w_dims(), l), dw_dtype, 7);
    const Tensor want = dw0.clone();
    ops::conv2d_backward_filter(want, dy, x, t.params(l));
    const Tensor dw = dw0.to(kGpu);
    ops::conv2d_backward_filter(dw, dy.to(kGpu), x.to(kGpu), t.params(l));
    EXPECT_TRUE(close_to(dw, want, rtol()))
        << t.str() << " " << ops::layout_name(l) << " dw " << dtype_name(dw_dtype);
  }
}

// accumulate = false (cuDNN's beta = 0; for an f32 dw of half inputs a cast of the scratch): a
// poisoned dw gets the same bits as accumulating into zeros.
TEST_P(ConvGpu, BackwardFilterOverwritesLikeAccumulatingIntoZeros) {
  STOKER_REQUIRE_GPU();
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype(), 5).to(kGpu);
  const Tensor x = random_tensor(shape4(t.x_dims(), l), dtype(), 6).to(kGpu);
  for (const DType dw_dtype : {dtype(), DType::f32}) {
    const Tensor want = Tensor::zeros(shape4(t.w_dims(), l), dw_dtype, kGpu);
    ops::conv2d_backward_filter(want, dy, x, t.params(l));
    const Tensor dw = poisoned(shape4(t.w_dims(), l), dw_dtype, kGpu);
    ops::conv2d_backward_filter(dw, dy, x, t.params(l), /*accumulate=*/false);
    EXPECT_TRUE(close_to(dw, want, 0.0))
        << t.str() << " " << ops::layout_name(l) << " dw " << dtype_name(dw_dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvGpu,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kCases))),
                       ::testing::Values(Layout::nchw, Layout::nhwc),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16)));

// Cached plans: the second call of a shape reuses the first's algorithm and gives the same bits.
TEST(ConvGpuPlans, RepeatedCallsAreDeterministic) {
  STOKER_REQUIRE_GPU();
  const ConvCase& t = kCases[1];
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    const Tensor x = random_tensor(shape4(t.x_dims(), l), DType::f32, 8).to(kGpu);
    const Tensor dy = random_tensor(shape4(t.y_dims(), l), DType::f32, 9).to(kGpu);
    const Tensor w = random_tensor(shape4(t.w_dims(), l), DType::f32, 10).to(kGpu);
    Tensor outs[2][3];
    for (auto& o : outs) {
      o[0] = poisoned(shape4(t.y_dims(), l), DType::f32, kGpu);
      o[1] = poisoned(shape4(t.x_dims(), l), DType::f32, kGpu);
      o[2] = Tensor::zeros(shape4(t.w_dims(), l), DType::f32, kGpu);
      ops::conv2d_forward(o[0], x, w, t.params(l));
      ops::conv2d_backward_data(o[1], dy, w, t.params(l));
      ops::conv2d_backward_filter(o[2], dy, x, t.params(l));
    }
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(bit_identical(outs[0][k], outs[1][k])) << k;
  }
}

// Timed algorithms (set_conv_autotune): every pass still matches the CPU, and the search, which
// runs every candidate on the call's buffers, leaves the accumulated filter gradient as the
// one chosen algorithm's dw += (not the candidates' sum).
TEST(ConvGpuPlans, TimedAlgorithmsMatchTheCpuAndKeepTheAccumulation) {
  STOKER_REQUIRE_GPU();
  ops::set_conv_autotune(true);
  for (const int i : {1, 4, 6, 7})
    for (const Layout l : {Layout::nchw, Layout::nhwc})
      for (const DType dt : {DType::f32, DType::bf16}) {
        const ConvCase& t = kCases[i];
        const double rtol = dt == DType::f32 ? 1e-4 : 2e-2;
        SCOPED_TRACE(t.str() + " " + std::string(ops::layout_name(l)) + " " +
                     std::string(dtype_name(dt)));
        // A batch no other test uses, so that these problems are planned here, timed.
        ConvCase tt = t;
        tt.n = t.n + 3;
        const Tensor x = random_tensor(shape4(tt.x_dims(), l), dt, 13);
        const Tensor w = random_tensor(shape4(tt.w_dims(), l), dt, 14);
        const Tensor dy = random_tensor(shape4(tt.y_dims(), l), dt, 15);
        const Tensor y_want = poisoned(shape4(tt.y_dims(), l), dt);
        ops::conv2d_forward(y_want, x, w, tt.params(l));
        const Tensor y = poisoned(shape4(tt.y_dims(), l), dt, kGpu);
        ops::conv2d_forward(y, x.to(kGpu), w.to(kGpu), tt.params(l));
        EXPECT_TRUE(close_to(y, y_want, rtol)) << "forward";
        const Tensor dx_want = poisoned(shape4(tt.x_dims(), l), dt);
        ops::conv2d_backward_data(dx_want, dy, w, tt.params(l));
        const Tensor dx = poisoned(shape4(tt.x_dims(), l), dt, kGpu);
        ops::conv2d_backward_data(dx, dy.to(kGpu), w.to(kGpu), tt.params(l));
        EXPECT_TRUE(close_to(dx, dx_want, rtol)) << "backward data";
        // Accumulating (its own plan: a batch one larger): the search must not add into dx.
        ConvCase ta = tt;
        ta.n = tt.n + 1;
        const Tensor dya = random_tensor(shape4(ta.y_dims(), l), dt, 17);
        const Tensor dxa0 = random_tensor(shape4(ta.x_dims(), l), dt, 18);
        const Tensor dxa_want = dxa0.clone();
        ops::conv2d_backward_data(dxa_want, dya, w, ta.params(l), /*accumulate=*/true);
        const Tensor dxa = dxa0.to(kGpu);
        ops::conv2d_backward_data(dxa, dya.to(kGpu), w.to(kGpu), ta.params(l), true);
        EXPECT_TRUE(close_to(dxa, dxa_want, rtol)) << "backward data, accumulated";
        const Tensor dw0 = random_tensor(shape4(tt.w_dims(), l), dt, 16);
        const Tensor dw_want = dw0.clone();
        ops::conv2d_backward_filter(dw_want, dy, x, tt.params(l));
        const Tensor dw = dw0.to(kGpu);
        ops::conv2d_backward_filter(dw, dy.to(kGpu), x.to(kGpu), tt.params(l));
        EXPECT_TRUE(close_to(dw, dw_want, rtol)) << "backward filter";
      }
  ops::set_conv_autotune(false);
}

// The convolution with its output's statistics in one cuDNN graph, on ResNet-50's shapes (a
// 1x1, a 3x3 and a strided 3x3, NHWC bf16 and f16): where cuDNN has a fused engine, y matches
// the plain convolution and the sums match the CPU's sums of that y; where it has none, the op
// refuses with cuDNN's reason (printed: what this GPU and cuDNN support). f32 is refused (the
// fused engines would compute it in TF32).
TEST(ConvGpuStats, FusedStatisticsMatchTheOutputOrAreRefused) {
  STOKER_REQUIRE_GPU();
  const ConvCase cases[] = {
      {.n = 8, .c = 64, .h = 28, .w = 28, .k = 256, .r = 1, .s = 1},
      {.n = 8, .c = 64, .h = 28, .w = 28, .k = 64, .r = 3, .s = 3, .ph = 1, .pw = 1},
      {.n = 8,
       .c = 128,
       .h = 28,
       .w = 28,
       .k = 128,
       .r = 3,
       .s = 3,
       .sh = 2,
       .sw = 2,
       .ph = 1,
       .pw = 1},
  };
  int fused = 0;
  for (const DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const ConvCase& t : cases) {
      const Layout l = Layout::nhwc;
      const std::string what = t.str() + " " + std::string(dtype_name(dt));
      const Tensor x = random_tensor(shape4(t.x_dims(), l), dt, 21).to(kGpu);
      const Tensor w = random_tensor(shape4(t.w_dims(), l), dt, 22, -0.2f, 0.2f).to(kGpu);
      const Tensor y = poisoned(shape4(t.y_dims(), l), dt, kGpu);
      const Tensor sum = poisoned({t.k}, DType::f32, kGpu), sq = poisoned({t.k}, DType::f32, kGpu);
      if (!ops::conv2d_forward_stats_supported(x, w, t.params(l))) {
        const std::string e = [&] {
          try {
            ops::conv2d_forward_stats(y, sum, sq, x, w, t.params(l));
          } catch (const Error& err) {
            return std::string(err.what());
          }
          return std::string("no error");
        }();
        EXPECT_NE(e.find("cuDNN has no fused engine"), std::string::npos) << what << ": " << e;
        if (dt == DType::f32) EXPECT_NE(e.find("f32 is not fused"), std::string::npos) << e;
        std::printf("conv2d_forward_stats: not fused for %s: %s\n", what.c_str(), e.c_str());
        continue;
      }
      EXPECT_NE(dt, DType::f32) << what << ": f32 must not take the TF32 engines";
      ++fused;
      ops::conv2d_forward_stats(y, sum, sq, x, w, t.params(l));
      const Tensor want = poisoned(shape4(t.y_dims(), l), dt, kGpu);
      ops::conv2d_forward(want, x, w, t.params(l));
      EXPECT_TRUE(close_to(y, want.to(Device::cpu()), dt == DType::f32 ? 1e-4 : 1e-2)) << what;
      // The CPU's sums of the y the graph wrote; the graph's come from the unrounded values.
      const Tensor cs = poisoned({t.k}, DType::f32), cq = poisoned({t.k}, DType::f32);
      const Tensor yc = poisoned(shape4(t.y_dims(), l), dt);
      ops::conv2d_forward_stats(yc, cs, cq, x.to(Device::cpu()), w.to(Device::cpu()), t.params(l));
      const double m = static_cast<double>(t.n * t.oh() * t.ow());
      const double rtol = dt == DType::f32 ? 1e-4 : 1e-2;
      const std::vector<float> gs = sum.to_floats(), gq = sq.to_floats();
      const std::vector<float> ws = cs.to_floats(), wq = cq.to_floats();
      for (int64_t c = 0; c < t.k; ++c) {
        const size_t i = static_cast<size_t>(c);
        // Bounds from the squares' sum: |sum| <= sqrt(m * sum_sq).
        EXPECT_NEAR(gs[i], ws[i], rtol * std::sqrt(m * wq[i]) + 1e-3) << what << " sum " << c;
        EXPECT_NEAR(gq[i], wq[i], rtol * wq[i] + 1e-3) << what << " sum_sq " << c;
      }
      std::printf("conv2d_forward_stats: fused for %s\n", what.c_str());
    }
  std::printf("conv2d_forward_stats: %d of 6 half-precision problems fused\n", fused);
}

// With TF32 allowed the results change (tensor cores) but stay within TF32's precision.
TEST(ConvGpuPlans, Tf32IsOptIn) {
  STOKER_REQUIRE_GPU();
  const ConvCase& t = kCases[7];
  const Tensor x = random_tensor(shape4(t.x_dims(), Layout::nhwc), DType::f32, 11);
  const Tensor w = random_tensor(shape4(t.w_dims(), Layout::nhwc), DType::f32, 12);
  const Tensor want = poisoned(shape4(t.y_dims(), Layout::nhwc), DType::f32);
  ops::conv2d_forward(want, x, w, t.params(Layout::nhwc));
  ops::set_allow_tf32(true);
  const Tensor y = poisoned(shape4(t.y_dims(), Layout::nhwc), DType::f32, kGpu);
  ops::conv2d_forward(y, x.to(kGpu), w.to(kGpu), t.params(Layout::nhwc));
  ops::set_allow_tf32(false);
  EXPECT_TRUE(close_to(y, want, 5e-3));
  const Tensor exact = poisoned(shape4(t.y_dims(), Layout::nhwc), DType::f32, kGpu);
  ops::conv2d_forward(exact, x.to(kGpu), w.to(kGpu), t.params(Layout::nhwc));
  EXPECT_TRUE(close_to(exact, want, 1e-4));
}

TEST(ChannelOpsGpu, BiasAndLayoutConversionMatchCpu) {
  STOKER_REQUIRE_GPU();
  const Dims4 d{3, 5, 13, 7};
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const Tensor y = random_tensor(shape4(d, l), dtype, 13);
      const Tensor bias = random_tensor({d.c}, DType::f32, 14);
      const Tensor y_gpu = y.to(kGpu);
      ops::add_channel_bias(y, bias, l);
      ops::add_channel_bias(y_gpu, bias.to(kGpu), l);
      EXPECT_TRUE(bit_identical(y_gpu, y)) << ops::layout_name(l) << " " << dtype_name(dtype);

      const Tensor dbias = random_tensor({d.c}, DType::f32, 15);
      const Tensor dbias_gpu = dbias.to(kGpu);
      ops::channel_bias_grad(dbias, y, l);
      ops::channel_bias_grad(dbias_gpu, y_gpu, l);
      EXPECT_TRUE(close_to(dbias_gpu, dbias, 1e-5));

      const Layout other = l == Layout::nchw ? Layout::nhwc : Layout::nchw;
      const Tensor t_cpu = poisoned(shape4(d, other), DType::f32);
      const Tensor t_gpu = poisoned(shape4(d, other), DType::f32, kGpu);
      ops::convert_layout(t_cpu, y, l, other);
      ops::convert_layout(t_gpu, y_gpu, l, other);
      EXPECT_TRUE(bit_identical(t_gpu, t_cpu));
    }
  }
}

// Large reductions take the split-and-fold path of the bias gradient.
TEST(ChannelOpsGpu, LargeBiasGradientIsDeterministicAndMatchesCpu) {
  STOKER_REQUIRE_GPU();
  const Dims4 d{16, 24, 56, 56};
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    const Tensor dy = random_tensor(shape4(d, l), DType::f32, 16);
    const Tensor want = Tensor::zeros({d.c}, DType::f32);
    ops::channel_bias_grad(want, dy, l);
    const Tensor dy_gpu = dy.to(kGpu);
    const Tensor a = Tensor::zeros({d.c}, DType::f32, kGpu);
    const Tensor b = Tensor::zeros({d.c}, DType::f32, kGpu);
    ops::channel_bias_grad(a, dy_gpu, l);
    ops::channel_bias_grad(b, dy_gpu, l);
    EXPECT_TRUE(bit_identical(a, b));
    EXPECT_TRUE(all_close(a, want, 1e-4, 2e-2));
  }
}

TEST(ConvGpuErrors, MixedDevicesAreRejected) {
  STOKER_REQUIRE_GPU();
  const Tensor x = random_tensor({1, 3, 8, 8}, DType::f32, 1).to(kGpu);
  const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 2);
  const Tensor y = Tensor::empty({1, 4, 6, 6}, DType::f32, kGpu);
  EXPECT_TRUE(throws_error_with([&] { ops::conv2d_forward(y, x, w, {}); },
                                {"ops::conv2d_forward", "expected both on one device"}));
}

}  // namespace
}  // namespace stoker::test
