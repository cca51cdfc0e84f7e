// Max / average pooling and the global-average kernels against the CPU reference on fresh random
// inputs (distinct values, so max pooling has no ties), odd shapes, both layouts, poisoned
// outputs. Max forward selects existing values and must match exactly; so must the NHWC max
// backward (stoker's kernels, the CPU's summation order), and a test of ties and NaNs below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/conv_test_util.h"
#include "stoker/ops/pool.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const Device kGpu = Device::cuda(0);

const PoolCase kCases[] = {
    {.n = 3, .c = 5, .h = 7, .w = 7, .kh = 2, .kw = 2, .sh = 2, .sw = 2},
    {.n = 3, .c = 5, .h = 13, .w = 13, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1},
    {.n = 3, .c = 5, .h = 13, .w = 13, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1},
    {.n = 2, .c = 3, .h = 9, .w = 6, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 1},
    {.n = 2, .c = 64, .h = 56, .w = 56, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1},
    {.n = 3, .c = 5, .h = 7, .w = 7, .kh = 5, .kw = 5, .sh = 3, .sw = 3, .ph = 2, .pw = 2},
    // stride above the kernel: some inputs are in no window (their gradient is 0)
    {.n = 2, .c = 16, .h = 11, .w = 10, .kh = 2, .kw = 3, .sh = 3, .sw = 4, .ph = 1, .pw = 1},
};

::testing::AssertionResult close_to(const Tensor& gpu, const Tensor& cpu, double rtol) {
  return all_close(gpu, cpu, rtol, rtol);
}

class PoolGpu : public ::testing::TestWithParam<std::tuple<int, Layout, DType>> {
 protected:
  const PoolCase& tcase() const { return kCases[std::get<0>(GetParam())]; }
  Layout layout() const { return std::get<1>(GetParam()); }
  DType dtype() const { return std::get<2>(GetParam()); }
  double rtol() const {
    return dtype() == DType::f32 ? 1e-5 : (dtype() == DType::f16 ? 2e-3 : 1e-2);
  }
};

TEST_P(PoolGpu, MaxForwardBackwardMatchCpu) {
  STOKER_REQUIRE_GPU();
  const PoolCase& t = tcase();
  const Layout l = layout();
  const Tensor x = random_tensor(shape4(t.x_dims(), l), dtype(), 1);
  const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype(), 2);
  const Tensor y_cpu = poisoned(shape4(t.y_dims(), l), dtype());
  ops::maxpool2d_forward(y_cpu, x, t.params(l));
  const Tensor x_gpu = x.to(kGpu);
  const Tensor y_gpu = poisoned(shape4(t.y_dims(), l), dtype(), kGpu);
  ops::maxpool2d_forward(y_gpu, x_gpu, t.params(l));
  EXPECT_TRUE(bit_identical(y_gpu, y_cpu)) << t.str() << " " << ops::layout_name(l);

  const Tensor dx_cpu = poisoned(shape4(t.x_dims(), l), dtype());
  ops::maxpool2d_backward(dx_cpu, dy, x, y_cpu, t.params(l));
  const Tensor dx_gpu = poisoned(shape4(t.x_dims(), l), dtype(), kGpu);
  ops::maxpool2d_backward(dx_gpu, dy.to(kGpu), x_gpu, y_gpu, t.params(l));
  if (l == Layout::nhwc) {  // stoker's kernels: the CPU's window rule and summation order
    EXPECT_TRUE(bit_identical(dx_gpu, dx_cpu)) << t.str() << " nhwc";
  } else {
    EXPECT_TRUE(close_to(dx_gpu, dx_cpu, rtol())) << t.str() << " nchw";
  }
}

TEST_P(PoolGpu, AvgForwardBackwardMatchCpu) {
  STOKER_REQUIRE_GPU();
  const PoolCase& t = tcase();
  const Layout l = layout();
  const Tensor x = random_tensor(shape4(t.x_dims(), l), dtype(), 3);
  const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype(), 4);
  const Tensor y_cpu = poisoned(shape4(t.y_dims(), l), dtype());
  ops::avgpool2d_forward(y_cpu, x, t.params(l));
  const Tensor y_gpu = poisoned(shape4(t.y_dims(), l), dtype(), kGpu);
  ops::avgpool2d_forward(y_gpu, x.to(kGpu), t.params(l));
  EXPECT_TRUE(close_to(y_gpu, y_cpu, rtol())) << t.str() << " " << ops::layout_name(l);

  const Tensor dx_cpu = poisoned(shape4(t.x_dims(), l), dtype());
  ops::avgpool2d_backward(dx_cpu, dy, t.params(l));
  const Tensor dx_gpu = poisoned(shape4(t.x_dims(), l), dtype(), kGpu);
  ops::avgpool2d_backward(dx_gpu, dy.to(kGpu), t.params(l));
  EXPECT_TRUE(close_to(dx_gpu, dx_cpu, rtol())) << t.str() << " " << ops::layout_name(l);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PoolGpu,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kCases))),
                       ::testing::Values(Layout::nchw, Layout::nhwc),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16)));

TEST(PoolGpuSemantics, MaxPropagatesNaNAndNeverSelectsPadding) {
  STOKER_REQUIRE_GPU();
  std::vector<float> v = random_floats(2 * 16, 5, -2.0f, -1.0f);
  v[5] = kNaN;  // channel 0, row 1, col 1: inside all four 3x3 windows of channel 0
  const Tensor x = Tensor::from_floats(v, {1, 2, 4, 4}).to(kGpu);
  const Tensor y = poisoned({1, 2, 2, 2}, DType::f32, kGpu);
  ops::maxpool2d_forward(y, x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  const std::vector<float> out = y.to_floats();
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  for (size_t i = 4; i < out.size(); ++i) {
    EXPECT_FALSE(std::isnan(out[i])) << i;
    EXPECT_LT(out[i], -0.5f) << i;  // a padded zero would win otherwise
  }
}

// Ties, NaNs and -inf windows in NHWC (stoker's kernels): the gradient goes where the CPU sends
// it — the first maximum in row-major window order, the first NaN, the first element of an all
// -inf window — with the same bits, for the vector (C = 16) and the scalar (C = 3) path.
TEST(PoolGpuSemantics, NhwcMaxBackwardTiesNaNsAndInfinitiesMatchCpu) {
  STOKER_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t c : {16, 3}) {
    for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const PoolCase t{
          .n = 2, .c = c, .h = 9, .w = 8, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1};
      const ops::Pool2dParams p = t.params(Layout::nhwc);
      // Values from a set of 3: many ties; a few NaNs and -infs, and one plane all -inf.
      std::vector<float> v = random_floats(2 * 9 * 8 * c, 11, 0.0f, 3.0f);
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = std::floor(v[i]);
        if (i % 37 == 5) v[i] = kNaN;
        if (i % 23 == 7) v[i] = -inf;
        if (i % static_cast<size_t>(c) == 1 && i < v.size() / 2) v[i] = -inf;  // n 0, channel 1
      }
      const Tensor x = Tensor::from_floats(v, shape4(t.x_dims(), Layout::nhwc), dt);
      const Tensor dy = random_tensor(shape4(t.y_dims(), Layout::nhwc), dt, 12);
      const Tensor y = Tensor::empty(shape4(t.y_dims(), Layout::nhwc), dt);
      ops::maxpool2d_forward(y, x, p);
      const Tensor dx_cpu = poisoned(shape4(t.x_dims(), Layout::nhwc), dt);
      ops::maxpool2d_backward(dx_cpu, dy, x, y, p);
      const Tensor dx_gpu = poisoned(shape4(t.x_dims(), Layout::nhwc), dt, kGpu);
      ops::maxpool2d_backward(dx_gpu, dy.to(kGpu), x.to(kGpu), y.to(kGpu), p);
      EXPECT_TRUE(bit_identical(dx_gpu, dx_cpu)) << "C " << c << " " << dtype_name(dt);
    }
  }
}

// The argmax pair in NHWC (stoker's kernels, vector and scalar paths): y, every argmax byte and
// dx equal the CPU's bit for bit, with ties, NaNs and -inf windows, into poisoned outputs; and
// dx equals the plain maxpool2d_backward's on the GPU.
TEST(PoolGpuSemantics, NhwcArgmaxPairMatchesCpuBitForBit) {
  STOKER_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  for (const PoolCase& base : kCases) {
    for (const int64_t c : {base.c, int64_t{16}}) {
      for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
        PoolCase t = base;
        t.c = c;
        SCOPED_TRACE(t.str() + " " + std::string(dtype_name(dt)));
        const ops::Pool2dParams p = t.params(Layout::nhwc);
        const Shape xs = shape4(t.x_dims(), Layout::nhwc), ys = shape4(t.y_dims(), Layout::nhwc);
        ASSERT_TRUE(ops::maxpool2d_argmax_supported(kGpu, xs, p));
        std::vector<float> v = random_floats(static_cast<size_t>(xs.numel()), 13, 0.0f, 3.0f);
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] = std::floor(v[i]);
          if (i % 37 == 5) v[i] = kNaN;
          if (i % 23 == 7) v[i] = -inf;
        }
        const Tensor x = Tensor::from_floats(v, xs, dt);
        const Tensor dy = random_tensor(ys, dt, 14);
        const Tensor y_cpu = Tensor::empty(ys, dt);
        const Tensor arg_cpu = Tensor::empty(ys, DType::u8);
        ops::maxpool2d_forward_argmax(y_cpu, arg_cpu, x, p);
        const Tensor dx_cpu = Tensor::empty(xs, dt);
        ops::maxpool2d_backward_argmax(dx_cpu, dy, arg_cpu, p);

        const Tensor x_gpu = x.to(kGpu), dy_gpu = dy.to(kGpu);
        const Tensor y_gpu = poisoned(ys, dt, kGpu);
        const Tensor arg_gpu = Tensor::zeros(ys, DType::u8, kGpu);
        ops::maxpool2d_forward_argmax(y_gpu, arg_gpu, x_gpu, p);
        EXPECT_TRUE(identical_up_to_nan_payload(y_gpu, y_cpu)) << "y";
        EXPECT_TRUE(bit_identical(arg_gpu, arg_cpu)) << "argmax";
        const Tensor dx_gpu = poisoned(xs, dt, kGpu);
        ops::maxpool2d_backward_argmax(dx_gpu, dy_gpu, arg_gpu, p);
        EXPECT_TRUE(bit_identical(dx_gpu, dx_cpu)) << "dx";
        const Tensor dx_plain = poisoned(xs, dt, kGpu);
        ops::maxpool2d_backward(dx_plain, dy_gpu, x_gpu, y_gpu, p);
        EXPECT_TRUE(bit_identical(dx_gpu, dx_plain)) << "dx vs maxpool2d_backward";
      }
    }
  }
}

TEST(GlobalAvgPoolGpu, ForwardBackwardMatchCpu) {
  STOKER_REQUIRE_GPU();
  const Dims4 dims[] = {
      {3, 5, 7, 7}, {3, 5, 13, 13}, {2, 2048, 7, 7}, {4, 3, 1, 1}, {2, 7, 112, 96}};
  for (const Dims4& d : dims) {
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      for (const DType dtype : {DType::f32, DType::bf16}) {
        const Tensor x = random_tensor(shape4(d, l), dtype, 6);
        const Tensor dy = random_tensor({d.n, d.c}, dtype, 7);
        const Tensor y_cpu = poisoned({d.n, d.c}, dtype);
        ops::global_avgpool_forward(y_cpu, x, l);
        const Tensor y_gpu = poisoned({d.n, d.c}, dtype, kGpu);
        ops::global_avgpool_forward(y_gpu, x.to(kGpu), l);
        const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
        EXPECT_TRUE(all_close(y_gpu, y_cpu, tol, tol))
            << d.n << "x" << d.c << "x" << d.h << "x" << d.w << " " << ops::layout_name(l);
        const Tensor dx_cpu = poisoned(shape4(d, l), dtype);
        ops::global_avgpool_backward(dx_cpu, dy, l);
        const Tensor dx_gpu = poisoned(shape4(d, l), dtype, kGpu);
        ops::global_avgpool_backward(dx_gpu, dy.to(kGpu), l);
        EXPECT_TRUE(bit_identical(dx_gpu, dx_cpu));
      }
    }
  }
}

}  // namespace
}  // namespace stoker::test
