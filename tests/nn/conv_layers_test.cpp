// Conv2d, BatchNorm2d and the pooling modules on the CPU: every backward (input gradient and
// accumulated parameter gradients) against central finite differences of L = sum(y * g) in
// fp32 on small shapes, in both layouts; PyTorch's parameter names, shapes and initialization;
// BatchNorm's running statistics against the update formula and its eval mode; and a small
// network composed in a Sequential.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "ops/conv_test_util.h"
#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/conv2d.h"
#include "stoker/nn/pool.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

struct FdOptions {
  double eps = 1e-2;
  double rtol = 2e-2;
  double atol = 2e-3;
  int max_coords = 48;  // per tensor: all of them when fewer, else an even spread
};

// Coordinates to probe in a tensor of n elements.
std::vector<int64_t> probe(int64_t n, int max_coords) {
  std::vector<int64_t> at;
  const int64_t step = std::max<int64_t>(1, n / max_coords);
  for (int64_t i = 0; i < n && static_cast<int>(at.size()) < max_coords; i += step) at.push_back(i);
  if (at.back() != n - 1) at.push_back(n - 1);
  return at;
}

// Compares m's backward with central differences of L(x, params) = sum(m.forward(x) * g):
// the returned dx and every parameter's gradient (which must ACCUMULATE onto its prior value).
void check_gradients(nn::Module& m, const Tensor& x_in, const FdOptions& o, uint32_t seed = 7) {
  const Tensor x = x_in.clone();
  const Tensor y = m.forward(x);
  const std::vector<float> g = random_floats(static_cast<size_t>(y.numel()), seed);
  const Tensor gt = Tensor::from_floats(g, y.shape(), y.dtype());
  // Gradients start from random values: the module must add to them.
  std::vector<std::vector<float>> before;
  for (nn::Parameter* p : m.parameters()) {
    const Tensor start = random_tensor(p->shape(), DType::f32, seed + 100);
    ops::copy(p->grad(), start);
    before.push_back(start.to_floats());
  }
  const std::vector<float> dx = m.backward(gt).to_floats();
  const auto loss = [&] { return dot(m.forward(x).to_floats(), g); };

  auto check = [&](float* data, int64_t n, const std::vector<float>& analytic,
                   const std::string& what) {
    for (int64_t i : probe(n, o.max_coords)) {
      const float v = data[i];
      data[i] = static_cast<float>(v + o.eps);
      const double up = loss();
      data[i] = static_cast<float>(v - o.eps);
      const double down = loss();
      data[i] = v;
      const double fd = (up - down) / (2.0 * o.eps);
      EXPECT_NEAR(analytic[idx(i)], fd, o.atol + o.rtol * std::fabs(fd))
          << m.describe() << ": d L / d " << what << "[" << i << "]";
    }
  };
  check(x.data<float>(), x.numel(), dx, "x");
  size_t k = 0;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<float> grad = p->grad().to_floats();
    for (size_t i = 0; i < grad.size(); ++i) grad[i] -= before[k][i];
    check(p->value().data<float>(), p->numel(), grad, name);
    ++k;
  }
}

// ---- Conv2d ----

struct ConvModuleCase {
  int64_t in, out, kernel;
  nn::Conv2dOptions options;
  Dims4 x;
};

const ConvModuleCase kConvCases[] = {
    {3, 4, 3, {.padding = 1}, {2, 3, 5, 5}},
    {3, 4, 3, {.stride = 2, .layout = Layout::nhwc}, {2, 3, 7, 6}},
    {4, 6, 3, {.padding = 2, .dilation = 2, .groups = 2}, {2, 4, 6, 6}},
    {4,
     4,
     2,
     {.stride = 2, .padding = 1, .groups = 2, .bias = false, .layout = Layout::nhwc},
     {1, 4, 5, 7}},
    {2, 3, 1, {}, {3, 2, 3, 4}},
};

TEST(Conv2dModule, GradientsMatchFiniteDifferences) {
  for (const ConvModuleCase& c : kConvCases) {
    nn::manual_seed(1);
    nn::Conv2d conv(c.in, c.out, c.kernel, c.options);
    check_gradients(conv, random_tensor(shape4(c.x, c.options.layout), DType::f32, 3), {});
  }
}

TEST(Conv2dModule, ParametersFollowPyTorch) {
  nn::manual_seed(2);
  nn::Conv2d conv(6, 8, 3, {.groups = 2, .layout = Layout::nhwc});
  const auto named = conv.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(named[1].first, "bias");
  EXPECT_EQ(conv.weight().shape(), (Shape{8, 3, 3, 3}));  // KCRS master even for NHWC
  EXPECT_EQ(conv.bias().shape(), (Shape{8}));
  const float bound = 1.0f / std::sqrt(3.0f * 3 * 3);  // fan_in = in/groups * k * k
  for (nn::Parameter* p : conv.parameters()) {
    const std::vector<float> v = p->value().to_floats();
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    EXPECT_GE(*lo, -bound);
    EXPECT_LE(*hi, bound);
    EXPECT_GT(*hi - *lo, bound / 2);  // spread over the interval, not a constant
  }
  nn::Conv2d plain(3, 5, 3, 1, 0, false);
  EXPECT_EQ(plain.named_parameters().size(), 1u);
  EXPECT_FALSE(plain.has_bias());
}

TEST(Conv2dModule, NhwcMatchesNchwWithTheSameWeights) {
  const Dims4 xd{2, 4, 7, 7};
  nn::manual_seed(3);
  nn::Conv2d a(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  nn::Conv2d b(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2, .layout = Layout::nhwc});
  b.weight().set_value(a.weight().value());
  b.bias().set_value(a.bias().value());
  const Tensor x = random_tensor(shape4(xd, Layout::nchw), DType::f32, 4);
  const Tensor xh = Tensor::from_floats(transpose4(x.to_floats(), xd, Layout::nchw, Layout::nhwc),
                                        shape4(xd, Layout::nhwc));
  const Tensor ya = a.forward(x), yb = b.forward(xh);
  const Dims4 yd = ops::dims4(ya.shape(), Layout::nchw);
  EXPECT_TRUE(all_close(transpose4(yb.to_floats(), yd, Layout::nhwc, Layout::nchw), ya.to_floats(),
                        1e-5, 1e-6));
  const Tensor g = random_tensor(ya.shape(), DType::f32, 5);
  const Tensor gh =
      Tensor::from_floats(transpose4(g.to_floats(), yd, Layout::nchw, Layout::nhwc), yb.shape());
  const Tensor dxa = a.backward(g), dxb = b.backward(gh);
  EXPECT_TRUE(all_close(transpose4(dxb.to_floats(), xd, Layout::nhwc, Layout::nchw),
                        dxa.to_floats(), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(b.weight().grad(), a.weight().grad(), 1e-5, 1e-5));  // both KCRS
  EXPECT_TRUE(all_close(b.bias().grad(), a.bias().grad(), 1e-5, 1e-5));
}

TEST(Conv2dModule, GradientsAccumulateAndReportReady) {
  nn::manual_seed(4);
  nn::Conv2d conv(3, 4, 3, {.padding = 1, .layout = Layout::nhwc});
  int ready = 0;
  for (nn::Parameter* p : conv.parameters())
    p->add_grad_ready_hook([&](nn::Parameter&) { ++ready; });
  const Tensor x = random_tensor({2, 5, 5, 3}, DType::f32, 6);
  const Tensor g = random_tensor({2, 5, 5, 4}, DType::f32, 7);
  conv.forward(x);
  conv.backward(g);
  const std::vector<float> once = conv.weight().grad().to_floats();
  conv.forward(x);
  conv.backward(g);
  std::vector<float> twice(once.size());
  std::transform(once.begin(), once.end(), twice.begin(), [](float v) { return 2 * v; });
  EXPECT_TRUE(all_close(conv.weight().grad().to_floats(), twice, 1e-6, 1e-6));
  EXPECT_EQ(ready, 4);  // weight and bias, twice
}

// input_grad = false (a network's first conv): the same parameter gradients, no dx.
TEST(Conv2dModule, WithoutInputGradKeepsParameterGradients) {
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    nn::manual_seed(5);
    nn::Conv2d a(3, 4, 3, {.stride = 2, .padding = 1, .layout = layout});
    nn::manual_seed(5);
    nn::Conv2d b(3, 4, 3, {.stride = 2, .padding = 1, .layout = layout, .input_grad = false});
    const Shape xs = layout == Layout::nchw ? Shape{2, 3, 6, 6} : Shape{2, 6, 6, 3};
    const Tensor x = random_tensor(xs, DType::f32, 8);
    const Tensor ya = a.forward(x);
    EXPECT_TRUE(all_close(b.forward(x), ya, 0.0, 0.0));
    const Tensor g = random_tensor(ya.shape(), DType::f32, 9);
    EXPECT_TRUE(a.backward(g).defined());
    EXPECT_FALSE(b.backward(g).defined());
    EXPECT_TRUE(all_close(b.weight().grad(), a.weight().grad(), 0.0, 0.0));
    EXPECT_TRUE(all_close(b.bias().grad(), a.bias().grad(), 0.0, 0.0));
  }
}

TEST(Conv2dModule, BadInputNamesTheModule) {
  nn::Conv2d conv(3, 4, 3);
  const Tensor nhwc = random_tensor({2, 8, 8, 3}, DType::f32, 1);
  EXPECT_TRUE(
      throws_error_with([&] { conv.forward(nhwc); },
                        {"Conv2d(3, 4, kernel 3)", "has 8 channels in NCHW", "expected 3"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        conv.forward(random_tensor({3, 8, 8}, DType::f32, 2));
      },
      {"Conv2d(3, 4, kernel 3)", "must be rank 4"}));
  EXPECT_TRUE(
      throws_error_with([&] { nn::Conv2d(6, 4, 3, {.groups = 4}); }, {"groups 4 must divide"}));
  nn::Conv2d fresh(3, 4, 3);
  EXPECT_TRUE(throws_error_with([&] { fresh.backward(nhwc); }, {"before forward"}));
}

// ---- BatchNorm2d ----

TEST(BatchNorm2dModule, TrainGradientsMatchFiniteDifferences) {
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    nn::BatchNorm2d bn(3, 1e-5f, 0.1f, l);
    // Non-trivial affine parameters so that dgamma/dbeta and the gamma path are exercised.
    bn.weight().set_value(Tensor::from_floats({0.5f, 1.5f, -1.0f}, {3}));
    bn.bias().set_value(Tensor::from_floats({0.1f, -0.2f, 0.3f}, {3}));
    check_gradients(bn, random_tensor(shape4({3, 3, 4, 3}, l), DType::f32, 8, -1.0f, 2.0f),
                    {.eps = 1e-2, .rtol = 3e-2, .atol = 3e-3});
  }
}

TEST(BatchNorm2dModule, RunningStatisticsFollowPyTorchsUpdate) {
  const Dims4 d{4, 2, 3, 3};
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    nn::BatchNorm2d bn(2, 1e-5f, 0.25f, l);
    std::vector<double> rm{0.0, 0.0}, rv{1.0, 1.0};
    for (uint32_t step = 0; step < 3; ++step) {
      const Tensor x = random_tensor(shape4(d, l), DType::f32, 10 + step, -1.0f, 3.0f);
      bn.forward(x);
      const std::vector<float> xv = x.to_floats();
      for (int64_t c = 0; c < d.c; ++c) {
        double sum = 0.0, sq = 0.0;
        const double m = static_cast<double>(d.n * d.h * d.w);
        for (int64_t n = 0; n < d.n; ++n)
          for (int64_t h = 0; h < d.h; ++h)
            for (int64_t w = 0; w < d.w; ++w) sum += xv[idx(at4(d, l, n, c, h, w))];
        const double mean = sum / m;
        for (int64_t n = 0; n < d.n; ++n)
          for (int64_t h = 0; h < d.h; ++h)
            for (int64_t w = 0; w < d.w; ++w)
              sq += std::pow(xv[idx(at4(d, l, n, c, h, w))] - mean, 2);
        rm[idx(c)] = 0.75 * rm[idx(c)] + 0.25 * mean;
        rv[idx(c)] = 0.75 * rv[idx(c)] + 0.25 * sq / (m - 1.0);  // unbiased
      }
    }
    EXPECT_TRUE(all_close(bn.running_mean(), rm, 1e-5, 1e-6)) << ops::layout_name(l);
    EXPECT_TRUE(all_close(bn.running_var(), rv, 1e-5, 1e-6)) << ops::layout_name(l);
  }
}

TEST(BatchNorm2dModule, EvalModeUsesRunningStatisticsAndFrozenGradients) {
  const Dims4 d{2, 3, 4, 4};
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    nn::BatchNorm2d bn(3, 1e-5f, 0.1f, l);
    bn.weight().set_value(Tensor::from_floats({0.5f, 1.5f, -1.0f}, {3}));
    for (uint32_t step = 0; step < 2; ++step)
      bn.forward(random_tensor(shape4(d, l), DType::f32, step));
    bn.set_training(false);
    const std::vector<float> rm = bn.running_mean().to_floats(), rv = bn.running_var().to_floats();
    const Tensor x = random_tensor(shape4(d, l), DType::f32, 20);
    const std::vector<float> xv = x.to_floats(), yv = bn.forward(x).to_floats();
    const std::vector<float> g = bn.weight().value().to_floats();
    std::vector<double> want(xv.size());
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t h = 0; h < d.h; ++h)
          for (int64_t w = 0; w < d.w; ++w) {
            const size_t i = idx(at4(d, l, n, c, h, w));
            want[i] = (xv[i] - rm[idx(c)]) / std::sqrt(rv[idx(c)] + 1e-5) * g[idx(c)];
          }
    EXPECT_TRUE(all_close(yv, want, 1e-5, 1e-6));
    // Running statistics stay put in eval mode; the backward is that of the fixed affine map.
    check_gradients(bn, x, {});
    EXPECT_TRUE(all_close(bn.running_mean().to_floats(), rm, 0.0, 0.0));
  }
}

TEST(BatchNorm2dModule, NamesBuffersAndInitialValues) {
  nn::BatchNorm2d bn(4);
  const auto named = bn.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(named[1].first, "bias");
  EXPECT_TRUE(matches_rounded(bn.weight().value(), {1, 1, 1, 1}));
  EXPECT_TRUE(matches_rounded(bn.bias().value(), {0, 0, 0, 0}));
  std::vector<std::string> buffers;
  bn.visit_buffers("bn1", [&](const std::string& n, Tensor& t) {
    buffers.push_back(n);
    EXPECT_EQ(t.shape(), (Shape{4}));
  });
  EXPECT_EQ(buffers, (std::vector<std::string>{"bn1.running_mean", "bn1.running_var"}));
  EXPECT_TRUE(matches_rounded(bn.running_mean(), {0, 0, 0, 0}));
  EXPECT_TRUE(matches_rounded(bn.running_var(), {1, 1, 1, 1}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        bn.forward(random_tensor({2, 3, 4, 4}, DType::f32, 1));
      },
      {"BatchNorm2d(4", "has 3 channels in NCHW", "expected 4"}));
}

// ---- pooling ----

// Values on a 0.05 grid in random order: every window's maximum is unique with a margin far
// above the finite-difference step, so max pooling is differentiable at the probe points.
Tensor separated(const Shape& shape, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  std::iota(v.begin(), v.end(), 0.0f);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  for (float& x : v) x = x * 0.05f - 1.0f;
  return Tensor::from_floats(v, shape);
}

TEST(PoolModules, GradientsMatchFiniteDifferences) {
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    const Shape shape = shape4({2, 3, 7, 6}, l);
    nn::MaxPool2d maxpool(3, 2, 1, l);
    check_gradients(maxpool, separated(shape, 1), {.eps = 1e-3, .atol = 5e-3, .max_coords = 84});
    nn::AvgPool2d avgpool(3, 2, 1, l);
    check_gradients(avgpool, random_tensor(shape, DType::f32, 2), {});
    nn::AvgPool2d avg_default_stride(2, 0, 0, l);  // stride 0 = kernel
    EXPECT_EQ(avg_default_stride.params().stride[0], 2);
    check_gradients(avg_default_stride, random_tensor(shape, DType::f32, 3), {});
    nn::GlobalAvgPool gap(l);
    check_gradients(gap, random_tensor(shape, DType::f32, 4), {});
    EXPECT_EQ(gap.forward(random_tensor(shape, DType::f32, 5)).shape(), (Shape{2, 3}));
  }
}

TEST(PoolModules, BadArguments) {
  EXPECT_TRUE(throws_error_with([] { nn::MaxPool2d(2, 2, 2); }, {"MaxPool2d(2", "padding"}));
  nn::GlobalAvgPool gap;
  EXPECT_TRUE(throws_error_with(
      [&] {
        gap.backward(Tensor::zeros({2, 3}, DType::f32));
      },
      {"before forward"}));
}

// ---- composition ----

TEST(ConvNetwork, SequentialOfConvBatchNormPoolGradientsMatchFiniteDifferences) {
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    nn::manual_seed(9);
    nn::Sequential net(
        nn::make<nn::Conv2d>(2, 4, 3, 1, 1, false, l), nn::make<nn::BatchNorm2d>(4, 1e-5f, 0.1f, l),
        nn::make<nn::AvgPool2d>(2, 2, 0, l), nn::make<nn::Conv2d>(4, 3, 3, 1, 1, true, l),
        nn::make<nn::GlobalAvgPool>(l));
    const auto named = net.named_parameters();
    ASSERT_EQ(named.size(), 5u);
    EXPECT_EQ(named[0].first, "0.weight");
    EXPECT_EQ(named[1].first, "1.weight");
    EXPECT_EQ(named[4].first, "3.bias");
    check_gradients(net, random_tensor(shape4({3, 2, 6, 6}, l), DType::f32, 11),
                    {.eps = 1e-2, .rtol = 3e-2, .atol = 3e-3, .max_coords = 24});
  }
}

}  // namespace
}  // namespace stoker::test
