// CPU max / average / global-average pooling against naive loops over each window, in both
// layouts, with poisoned outputs; padding behaviour (max never picks padding, average divides
// by kh * kw), NaN propagation, and the error messages for bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/conv_test_util.h"
#include "stoker/ops/pool.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const PoolCase kCases[] = {
    {.n = 2, .c = 3, .h = 8, .w = 8, .kh = 2, .kw = 2, .sh = 2, .sw = 2},
    {.n = 3, .c = 5, .h = 7, .w = 7, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1},
    {.n = 1, .c = 4, .h = 13, .w = 13, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1},
    {.n = 2, .c = 2, .h = 9, .w = 6, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 1},
    {.n = 2, .c = 3, .h = 5, .w = 7, .kh = 5, .kw = 5, .sh = 3, .sw = 3, .ph = 2, .pw = 2},
    {.n = 1, .c = 2, .h = 6, .w = 6, .kh = 1, .kw = 1, .sh = 2, .sw = 2},
};

struct MaxRef {
  std::vector<double> y, dx;
};

MaxRef naive_max(const PoolCase& t, Layout l, const std::vector<float>& x,
                 const std::vector<float>& dy) {
  MaxRef r{std::vector<double>(dy.size()), std::vector<double>(x.size(), 0.0)};
  for_each_window(t, l, [&](int64_t out, const std::vector<int64_t>& in) {
    int64_t arg = in.front();
    for (int64_t i : in)
      if (x[idx(i)] > x[idx(arg)]) arg = i;  // first maximum wins ties
    r.y[idx(out)] = x[idx(arg)];
    r.dx[idx(arg)] += dy[idx(out)];
  });
  return r;
}

struct AvgRef {
  std::vector<double> y, dx;
};

AvgRef naive_avg(const PoolCase& t, Layout l, const std::vector<float>& x,
                 const std::vector<float>& dy) {
  AvgRef r{std::vector<double>(dy.size()), std::vector<double>(x.size(), 0.0)};
  const double area = static_cast<double>(t.kh * t.kw);  // count_include_pad=True
  for_each_window(t, l, [&](int64_t out, const std::vector<int64_t>& in) {
    double sum = 0.0;
    for (int64_t i : in) {
      sum += x[idx(i)];
      r.dx[idx(i)] += dy[idx(out)] / area;
    }
    r.y[idx(out)] = sum / area;
  });
  return r;
}

class PoolCpu : public ::testing::TestWithParam<std::tuple<int, Layout>> {
 protected:
  const PoolCase& tcase() const { return kCases[std::get<0>(GetParam())]; }
  Layout layout() const { return std::get<1>(GetParam()); }
};

TEST_P(PoolCpu, MaxForwardBackwardMatchNaive) {
  const PoolCase& t = tcase();
  const Layout l = layout();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = random_tensor(shape4(t.x_dims(), l), dtype, 1);
    const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype, 2);
    const MaxRef ref = naive_max(t, l, x.to_floats(), dy.to_floats());
    const Tensor y = poisoned(shape4(t.y_dims(), l), dtype);
    ops::maxpool2d_forward(y, x, t.params(l));
    EXPECT_TRUE(all_close(y, ref.y, 0.0, 0.0)) << t.str() << " " << dtype_name(dtype);
    const Tensor dx = poisoned(shape4(t.x_dims(), l), dtype);
    ops::maxpool2d_backward(dx, dy, x, y, t.params(l));
    const double tol = dtype == DType::f32 ? 1e-6 : 1e-2;
    EXPECT_TRUE(all_close(dx, ref.dx, tol, tol)) << t.str() << " " << dtype_name(dtype);
  }
}

// The argmax pair: y bit for bit maxpool2d_forward's, each byte naming the element the naive
// reference picked (its position in the unpadded window), and dx bit for bit
// maxpool2d_backward's — with ties, NaNs and -inf windows (values from a small set).
TEST_P(PoolCpu, MaxArgmaxPairGivesThePlainOpsBits) {
  const PoolCase& t = tcase();
  const Layout l = layout();
  const ops::Pool2dParams p = t.params(l);
  const float inf = std::numeric_limits<float>::infinity();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(t.str() + " " + std::string(ops::layout_name(l)) + " " +
                 std::string(dtype_name(dtype)));
    std::vector<float> v =
        random_floats(static_cast<size_t>(shape4(t.x_dims(), l).numel()), 7, 0.0f, 3.0f);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = std::floor(v[i]);
      if (i % 29 == 4) v[i] = kNaN;
      if (i % 17 == 3) v[i] = -inf;
    }
    const Tensor x = Tensor::from_floats(v, shape4(t.x_dims(), l), dtype);
    const Tensor dy = random_tensor(shape4(t.y_dims(), l), dtype, 8);
    const Tensor y_ref = Tensor::empty(shape4(t.y_dims(), l), dtype);
    ops::maxpool2d_forward(y_ref, x, p);
    const Tensor dx_ref = Tensor::empty(shape4(t.x_dims(), l), dtype);
    ops::maxpool2d_backward(dx_ref, dy, x, y_ref, p);

    ASSERT_TRUE(ops::maxpool2d_argmax_supported(Device::cpu(), x.shape(), p));
    const Tensor y = poisoned(shape4(t.y_dims(), l), dtype);
    const Tensor argmax = Tensor::empty(y.shape(), DType::u8);
    std::memset(argmax.data(), 0xff, argmax.nbytes());  // poisoned: the forward writes all
    ops::maxpool2d_forward_argmax(y, argmax, x, p);
    EXPECT_TRUE(bit_identical(y, y_ref)) << "y";
    const Tensor dx = poisoned(shape4(t.x_dims(), l), dtype);
    ops::maxpool2d_backward_argmax(dx, dy, argmax, p);
    EXPECT_TRUE(bit_identical(dx, dx_ref)) << "dx";
    // Every byte is a position of its window, inside x, holding the output's value.
    const std::vector<float> xs = x.to_floats(), ys = y.to_floats();
    const auto* bytes = static_cast<const uint8_t*>(argmax.data());
    const Dims4 xd = t.x_dims(), yd = t.y_dims();
    for (int64_t n = 0; n < t.n; ++n)
      for (int64_t c = 0; c < t.c; ++c)
        for (int64_t oh = 0; oh < t.oh(); ++oh)
          for (int64_t ow = 0; ow < t.ow(); ++ow) {
            const int64_t out = at4(yd, l, n, c, oh, ow);
            const int64_t b = bytes[out];
            ASSERT_LT(b, t.kh * t.kw) << "output " << out;
            const int64_t h = oh * t.sh - t.ph + b / t.kw, w = ow * t.sw - t.pw + b % t.kw;
            ASSERT_TRUE(h >= 0 && h < t.h && w >= 0 && w < t.w)
                << "output " << out << " picks padding";
            const float picked = xs[idx(at4(xd, l, n, c, h, w))], want = ys[idx(out)];
            EXPECT_TRUE(picked == want || (std::isnan(picked) && std::isnan(want)))
                << "output " << out << ": byte " << b << " holds " << picked << ", y is " << want;
          }
  }
}

TEST_P(PoolCpu, AvgForwardBackwardMatchNaive) {
  const PoolCase& t = tcase();
  const Layout l = layout();
  const Tensor x = random_tensor(shape4(t.x_dims(), l), DType::f32, 3);
  const Tensor dy = random_tensor(shape4(t.y_dims(), l), DType::f32, 4);
  const AvgRef ref = naive_avg(t, l, x.to_floats(), dy.to_floats());
  const Tensor y = poisoned(shape4(t.y_dims(), l), DType::f32);
  ops::avgpool2d_forward(y, x, t.params(l));
  EXPECT_TRUE(all_close(y, ref.y, 1e-6, 1e-6)) << t.str();
  const Tensor dx = poisoned(shape4(t.x_dims(), l), DType::f32);
  ops::avgpool2d_backward(dx, dy, t.params(l));
  EXPECT_TRUE(all_close(dx, ref.dx, 1e-6, 1e-6)) << t.str();
}

INSTANTIATE_TEST_SUITE_P(Cases, PoolCpu,
                         ::testing::Combine(::testing::Range(0,
                                                             static_cast<int>(std::size(kCases))),
                                            ::testing::Values(Layout::nchw, Layout::nhwc)));

TEST(PoolCpuSemantics, MaxNeverSelectsPadding) {
  const PoolCase t{
      .n = 1, .c = 2, .h = 4, .w = 4, .kh = 3, .kw = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1};
  const Tensor x = random_tensor(shape4(t.x_dims(), Layout::nchw), DType::f32, 5, -2.0f, -1.0f);
  const Tensor y = poisoned(shape4(t.y_dims(), Layout::nchw), DType::f32);
  ops::maxpool2d_forward(y, x, t.params(Layout::nchw));
  for (float v : y.to_floats()) EXPECT_LT(v, -0.5f);  // a padded zero would win otherwise
}

TEST(PoolCpuSemantics, MaxPropagatesNaN) {
  std::vector<float> v = random_floats(16, 6);
  v[5] = kNaN;  // row 1, col 1: inside the first 2x2 window only
  const Tensor x = Tensor::from_floats(v, {1, 1, 4, 4});
  const Tensor y = poisoned({1, 1, 2, 2}, DType::f32);
  ops::maxpool2d_forward(y, x, {.kernel = {2, 2}, .stride = {2, 2}});
  const std::vector<float> out = y.to_floats();
  EXPECT_TRUE(std::isnan(out[0]));
  for (size_t i = 1; i < 4; ++i) EXPECT_FALSE(std::isnan(out[i]));
}

TEST(PoolCpuSemantics, AvgCountsPaddingInTheDivisor) {
  const Tensor x = Tensor::from_floats(std::vector<float>(9, 1.0f), {1, 1, 3, 3});
  const Tensor y = poisoned({1, 1, 2, 2}, DType::f32);
  ops::avgpool2d_forward(y, x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  // Each corner window covers 4 of the 9 positions inside the image.
  EXPECT_TRUE(matches_rounded(y, {4.0f / 9, 4.0f / 9, 4.0f / 9, 4.0f / 9}));
}

TEST(GlobalAvgPoolCpu, ForwardBackwardMatchNaive) {
  const Dims4 d{3, 5, 7, 6};
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    const Tensor x = random_tensor(shape4(d, l), DType::f32, 7);
    const Tensor dy = random_tensor({d.n, d.c}, DType::f32, 8);
    const std::vector<float> xv = x.to_floats(), gv = dy.to_floats();
    std::vector<double> want_y(idx(d.n * d.c), 0.0), want_dx(xv.size());
    const double hw = static_cast<double>(d.h * d.w);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t h = 0; h < d.h; ++h)
          for (int64_t w = 0; w < d.w; ++w) {
            want_y[idx(n * d.c + c)] += xv[idx(at4(d, l, n, c, h, w))] / hw;
            want_dx[idx(at4(d, l, n, c, h, w))] = gv[idx(n * d.c + c)] / hw;
          }
    const Tensor y = poisoned({d.n, d.c}, DType::f32);
    ops::global_avgpool_forward(y, x, l);
    EXPECT_TRUE(all_close(y, want_y, 1e-6, 1e-7)) << ops::layout_name(l);
    const Tensor dx = poisoned(shape4(d, l), DType::f32);
    ops::global_avgpool_backward(dx, dy, l);
    EXPECT_TRUE(all_close(dx, want_dx, 1e-6, 1e-8)) << ops::layout_name(l);
  }
}

TEST(PoolCpuShape, OutputShapeFollowsTheFormula) {
  EXPECT_EQ(ops::pool2d_output_shape({2, 3, 7, 8},
                                     {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 0}}),
            (Shape{2, 3, 4, 4}));
  EXPECT_EQ(ops::pool2d_output_shape(
                {2, 7, 8, 3},
                {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 0}, .layout = Layout::nhwc}),
            (Shape{2, 4, 4, 3}));
}

// A byte that names no element of x (padding, or past the window) drops its window's gradient
// instead of writing out of bounds; the other windows' gradients arrive as usual.
TEST(PoolCpuSemantics, ArgmaxBackwardDropsBytesThatNameNoElement) {
  const ops::Pool2dParams p{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const Tensor dy = Tensor::from_floats({1.0f, 2.0f, 3.0f, 4.0f}, {1, 1, 2, 2});
  const Tensor argmax = Tensor::empty({1, 1, 2, 2}, DType::u8);
  auto* b = static_cast<uint8_t*>(argmax.data());
  b[0] = 0;    // window (0, 0) starts at (-1, -1): padding
  b[1] = 200;  // past the 9 positions
  b[2] = 4;    // window (1, 0): its centre (2, 0)
  b[3] = 8;    // window (1, 1): its last position (3, 3)
  const Tensor dx = poisoned({1, 1, 4, 4}, DType::f32);
  ops::maxpool2d_backward_argmax(dx, dy, argmax, p);
  std::vector<float> want(16, 0.0f);
  want[2 * 4 + 0] = 3.0f;
  want[3 * 4 + 3] = 4.0f;
  EXPECT_EQ(dx.to_floats(), want);
}

TEST(PoolCpuErrors, ArgmaxArguments) {
  const ops::Pool2dParams p{.kernel = {2, 2}, .stride = {2, 2}};
  const Tensor x = random_tensor({2, 3, 8, 8}, DType::f32, 1);
  const Tensor y = Tensor::empty({2, 3, 4, 4}, DType::f32);
  const Tensor not_bytes = Tensor::empty({2, 3, 4, 4}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::maxpool2d_forward_argmax(y, not_bytes, x, p); },
      {"ops::maxpool2d_forward_argmax", "argmax is f32[2, 3, 4, 4]", "expected u8"}));
  const Tensor wrong_shape = Tensor::empty({2, 3, 4, 5}, DType::u8);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::maxpool2d_forward_argmax(y, wrong_shape, x, p); },
      {"ops::maxpool2d_forward_argmax", "argmax", "expected [2, 3, 4, 4]", "the shape of y"}));
  const Tensor argmax = Tensor::empty({2, 3, 4, 4}, DType::u8);
  const Tensor dx = Tensor::empty({2, 3, 8, 8}, DType::f32);
  const Tensor undefined;
  EXPECT_TRUE(throws_error_with([&] { ops::maxpool2d_backward_argmax(dx, y, undefined, p); },
                                {"ops::maxpool2d_backward_argmax", "argmax"}));
  // A 17x17 window has 289 positions, more than a byte holds.
  const ops::Pool2dParams big{.kernel = {17, 17}, .stride = {1, 1}};
  EXPECT_FALSE(ops::maxpool2d_argmax_supported(Device::cpu(), x.shape(), big));
  const Tensor x_big = random_tensor({1, 1, 17, 17}, DType::f32, 2);
  const Tensor y_big = Tensor::empty({1, 1, 1, 1}, DType::f32);
  const Tensor arg_big = Tensor::empty({1, 1, 1, 1}, DType::u8);
  EXPECT_TRUE(throws_error_with([&] { ops::maxpool2d_forward_argmax(y_big, arg_big, x_big, big); },
                                {"ops::maxpool2d_forward_argmax", "17x17 window",
                                 "more than 256 positions", "maxpool2d_forward"}));
  // CUDA runs NHWC only; the CPU both.
  EXPECT_TRUE(ops::maxpool2d_argmax_supported(Device::cpu(), x.shape(), p));
  EXPECT_FALSE(ops::maxpool2d_argmax_supported(Device::cuda(0), x.shape(), p));
  ops::Pool2dParams nhwc = p;
  nhwc.layout = Layout::nhwc;
  EXPECT_TRUE(ops::maxpool2d_argmax_supported(Device::cuda(0), {2, 8, 8, 3}, nhwc));
}

TEST(PoolCpuErrors, BadParametersAndShapes) {
  const Tensor x = random_tensor({2, 3, 8, 8}, DType::f32, 1);
  const Tensor y = Tensor::empty({2, 3, 4, 4}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::maxpool2d_forward(y, x, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {2, 2}});
      },
      {"ops::maxpool2d_forward", "invalid padding", "padding <= kernel / 2"}));
  const Tensor x3 = random_tensor({3, 8, 8}, DType::f32, 2);
  EXPECT_TRUE(
      throws_error_with([&] { ops::avgpool2d_forward(y, x3, {}); },
                        {"ops::avgpool2d_forward", "x is f32[3, 8, 8]", "expected rank 4"}));
  const Tensor wrong = Tensor::empty({2, 4, 4, 3}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::maxpool2d_forward(wrong, x, {}); },
      {"ops::maxpool2d_forward", "y is f32[2, 4, 4, 3]", "expected [2, 3, 4, 4]"}));
  const Tensor y16 = Tensor::empty({2, 3, 4, 4}, DType::f16);
  EXPECT_TRUE(throws_error_with([&] { ops::avgpool2d_forward(y16, x, {}); },
                                {"ops::avgpool2d_forward", "expected equal dtypes"}));
  const Tensor dx = Tensor::empty({2, 3, 8, 8}, DType::f32);
  const Tensor dy = Tensor::empty({2, 3, 3, 3}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { ops::maxpool2d_backward(dx, dy, x, y, {}); },
                                {"ops::maxpool2d_backward", "dy is f32[2, 3, 3, 3]"}));
}

TEST(PoolCpuErrors, GlobalAverageShapes) {
  const Tensor x = random_tensor({2, 8, 8, 3}, DType::f32, 1);  // NHWC data
  const Tensor y = Tensor::empty({2, 3}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::global_avgpool_forward(y, x, Layout::nchw); },
      {"ops::global_avgpool_forward", "y is f32[2, 3]", "expected [2, 8]", "NCHW"}));
  ops::global_avgpool_forward(y, x, Layout::nhwc);  // the right layout is accepted
}

}  // namespace
}  // namespace stoker::test
