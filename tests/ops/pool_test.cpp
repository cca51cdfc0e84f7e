// CPU max / average / global-average pooling against naive loops over each window, in both
// layouts, with poisoned outputs; padding behaviour (max never picks padding, average divides
// by kh * kw), NaN propagation, and the error messages for bad inputs.
#include <gtest/gtest.h>

#include <cmath>

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
