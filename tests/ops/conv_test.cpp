// CPU convolution (im2col + BLAS) against naive fp64 loops written from the definition, for
// strides, padding, dilation, groups and both layouts; outputs are poisoned first so unwritten
// elements fail. Also: NHWC results equal NCHW results transposed, half inputs, the per-channel
// bias ops, layout conversion, and the error messages for bad inputs.
#include <gtest/gtest.h>

#include "ops/conv_test_util.h"
#include "stoker/core/op_listener.h"
#include "stoker/ops/conv.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::test {
namespace {

using ops::shape4;

const ConvCase kCases[] = {
    {.n = 2, .c = 3, .h = 7, .w = 7, .k = 4, .r = 3, .s = 3},
    {.n = 3, .c = 5, .h = 13, .w = 13, .k = 6, .r = 5, .s = 5, .sh = 2, .sw = 2, .ph = 1, .pw = 1},
    {.n = 2, .c = 4, .h = 9, .w = 6, .k = 3, .r = 3, .s = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0},
    {.n = 1, .c = 2, .h = 10, .w = 11, .k = 3, .r = 3, .s = 3, .ph = 2, .pw = 2, .dh = 2, .dw = 2},
    {.n = 2, .c = 6, .h = 8, .w = 8, .k = 4, .r = 3, .s = 3, .ph = 1, .pw = 1, .groups = 2},
    {.n = 2,
     .c = 4,
     .h = 7,
     .w = 7,
     .k = 4,
     .r = 3,
     .s = 3,
     .sh = 2,
     .sw = 2,
     .ph = 1,
     .pw = 1,
     .groups = 4},
    {.n = 3, .c = 8, .h = 5, .w = 5, .k = 16, .r = 1, .s = 1},
    {.n = 1, .c = 3, .h = 4, .w = 5, .k = 2, .r = 3, .s = 3, .sh = 1, .sw = 2, .ph = 3, .pw = 2},
    {.n = 2,
     .c = 6,
     .h = 6,
     .w = 7,
     .k = 9,
     .r = 2,
     .s = 3,
     .sh = 3,
     .sw = 2,
     .ph = 1,
     .pw = 1,
     .dh = 2,
     .dw = 1,
     .groups = 3},
};

struct Inputs {
  Tensor x, w, dy, dw0;
};

Inputs make_inputs(const ConvCase& t, Layout l, DType dtype, uint32_t seed) {
  return {random_tensor(shape4(t.x_dims(), l), dtype, seed),
          random_tensor(shape4(t.w_dims(), l), dtype, seed + 1),
          random_tensor(shape4(t.y_dims(), l), dtype, seed + 2),
          random_tensor(shape4(t.w_dims(), l), DType::f32, seed + 3)};
}

class ConvCpu : public ::testing::TestWithParam<std::tuple<int, Layout>> {
 protected:
  const ConvCase& tcase() const { return kCases[std::get<0>(GetParam())]; }
  Layout layout() const { return std::get<1>(GetParam()); }
};

TEST_P(ConvCpu, ForwardMatchesNaive) {
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Inputs in = make_inputs(t, l, DType::f32, 11);
  const Tensor y = poisoned(shape4(t.y_dims(), l), DType::f32);
  ops::conv2d_forward(y, in.x, in.w, t.params(l));
  EXPECT_TRUE(
      all_close(y, naive_conv_forward(t, l, in.x.to_floats(), in.w.to_floats()), 1e-5, 1e-5))
      << t.str() << " " << ops::layout_name(l);
}

TEST_P(ConvCpu, BackwardDataMatchesNaive) {
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Inputs in = make_inputs(t, l, DType::f32, 21);
  const Tensor dx = poisoned(shape4(t.x_dims(), l), DType::f32);
  ops::conv2d_backward_data(dx, in.dy, in.w, t.params(l));
  EXPECT_TRUE(all_close(dx, naive_conv_backward_data(t, l, in.dy.to_floats(), in.w.to_floats()),
                        1e-5, 1e-5))
      << t.str() << " " << ops::layout_name(l);
}

// accumulate: dx += the gradient, with the bits of the gradient rounded to dx's dtype and then
// added (ops::add), in f32 and bf16.
TEST_P(ConvCpu, BackwardDataAccumulatesLikeAnAdd) {
  const ConvCase& t = tcase();
  const Layout l = layout();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Inputs in = make_inputs(t, l, dtype, 22);
    const Tensor dx0 = random_tensor(shape4(t.x_dims(), l), dtype, 23);
    const Tensor part = poisoned(shape4(t.x_dims(), l), dtype);
    ops::conv2d_backward_data(part, in.dy, in.w, t.params(l));
    const Tensor want = Tensor::empty(part.shape(), dtype);
    ops::add(want, dx0, part);
    const Tensor dx = dx0.clone();
    ops::conv2d_backward_data(dx, in.dy, in.w, t.params(l), /*accumulate=*/true);
    EXPECT_TRUE(bit_identical(dx, want))
        << t.str() << " " << ops::layout_name(l) << " " << dtype_name(dtype);
    EXPECT_FALSE(bit_identical(dx, dx0)) << "the accumulation added nothing";
  }
}

// y and its per-channel sums: y is conv2d_forward's, the sums are those of y as stored.
TEST_P(ConvCpu, ForwardStatsAreTheOutputsSums) {
  const ConvCase& t = tcase();
  const Layout l = layout();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Inputs in = make_inputs(t, l, dtype, 24);
    ASSERT_TRUE(ops::conv2d_forward_stats_supported(in.x, in.w, t.params(l)));
    const Tensor want = poisoned(shape4(t.y_dims(), l), dtype);
    ops::conv2d_forward(want, in.x, in.w, t.params(l));
    const Tensor y = poisoned(shape4(t.y_dims(), l), dtype);
    const Tensor sum = poisoned({t.k}, DType::f32), sq = poisoned({t.k}, DType::f32);
    ops::conv2d_forward_stats(y, sum, sq, in.x, in.w, t.params(l));
    EXPECT_TRUE(bit_identical(y, want)) << t.str();
    std::vector<double> s(static_cast<size_t>(t.k), 0.0), q(static_cast<size_t>(t.k), 0.0);
    const std::vector<float> v = want.to_floats();
    const Dims4 d = t.y_dims();
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t h = 0; h < d.h; ++h)
          for (int64_t w = 0; w < d.w; ++w) {
            const int64_t i = l == Layout::nchw ? ((n * d.c + c) * d.h + h) * d.w + w
                                                : ((n * d.h + h) * d.w + w) * d.c + c;
            s[static_cast<size_t>(c)] += v[static_cast<size_t>(i)];
            q[static_cast<size_t>(c)] +=
                static_cast<double>(v[static_cast<size_t>(i)]) * v[static_cast<size_t>(i)];
          }
    const std::vector<float> gs = sum.to_floats(), gq = sq.to_floats();
    for (int64_t c = 0; c < t.k; ++c) {
      EXPECT_FLOAT_EQ(gs[static_cast<size_t>(c)], static_cast<float>(s[static_cast<size_t>(c)]))
          << t.str() << " channel " << c;
      EXPECT_FLOAT_EQ(gq[static_cast<size_t>(c)], static_cast<float>(q[static_cast<size_t>(c)]))
          << t.str() << " channel " << c;
    }
  }
}

TEST_P(ConvCpu, BackwardFilterAccumulatesNaiveGradient) {
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Inputs in = make_inputs(t, l, DType::f32, 31);
  const Tensor dw = in.dw0.clone();
  ops::conv2d_backward_filter(dw, in.dy, in.x, t.params(l));
  EXPECT_TRUE(all_close(
      dw, naive_conv_backward_filter(t, l, in.dy.to_floats(), in.x.to_floats(), in.dw0.to_floats()),
      1e-5, 1e-4))
      << t.str() << " " << ops::layout_name(l);
}

// accumulate = false overwrites: a poisoned dw gets the gradient alone (a zero start's result).
TEST_P(ConvCpu, BackwardFilterOverwritesWithoutAccumulate) {
  const ConvCase& t = tcase();
  const Layout l = layout();
  const Inputs in = make_inputs(t, l, DType::f32, 32);
  const Tensor dw = poisoned(in.dw0.shape(), DType::f32);
  ops::conv2d_backward_filter(dw, in.dy, in.x, t.params(l), /*accumulate=*/false);
  const std::vector<float> zeros(static_cast<size_t>(in.dw0.numel()), 0.0f);
  EXPECT_TRUE(all_close(
      dw, naive_conv_backward_filter(t, l, in.dy.to_floats(), in.x.to_floats(), zeros), 1e-5, 1e-4))
      << t.str() << " " << ops::layout_name(l);
}

INSTANTIATE_TEST_SUITE_P(Cases, ConvCpu,
                         ::testing::Combine(::testing::Range(0,
                                                             static_cast<int>(std::size(kCases))),
                                            ::testing::Values(Layout::nchw, Layout::nhwc)));

// A problem whose column matrix exceeds the CPU's per-chunk budget, so the images are processed
// in several chunks (and the NHWC path with groups scatters per chunk).
TEST(ConvCpuChunks, LargeImagesSplitIntoChunksMatchNaive) {
  for (const int64_t groups : {1, 2}) {
    const ConvCase t{.n = 2,
                     .c = 64,
                     .h = 128,
                     .w = 128,
                     .k = 4,
                     .r = 3,
                     .s = 3,
                     .ph = 1,
                     .pw = 1,
                     .groups = groups};
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      const Inputs in = make_inputs(t, l, DType::f32, 41);
      const Tensor y = poisoned(shape4(t.y_dims(), l), DType::f32);
      ops::conv2d_forward(y, in.x, in.w, t.params(l));
      EXPECT_TRUE(
          all_close(y, naive_conv_forward(t, l, in.x.to_floats(), in.w.to_floats()), 1e-5, 1e-4))
          << t.str() << " " << ops::layout_name(l);
      const Tensor dx = poisoned(shape4(t.x_dims(), l), DType::f32);
      ops::conv2d_backward_data(dx, in.dy, in.w, t.params(l));
      EXPECT_TRUE(all_close(dx, naive_conv_backward_data(t, l, in.dy.to_floats(), in.w.to_floats()),
                            1e-5, 1e-4));
      const Tensor dw = in.dw0.clone();
      ops::conv2d_backward_filter(dw, in.dy, in.x, t.params(l));
      EXPECT_TRUE(all_close(
          dw,
          naive_conv_backward_filter(t, l, in.dy.to_floats(), in.x.to_floats(), in.dw0.to_floats()),
          1e-5, 1e-2));
    }
  }
}

// The same problem in NHWC (inputs transposed on the host) gives the NCHW results transposed.
TEST(ConvCpuLayouts, NhwcEqualsNchwTransposed) {
  for (const ConvCase& t : kCases) {
    const Inputs a = make_inputs(t, Layout::nchw, DType::f32, 51);
    const auto to_nhwc = [](const Tensor& v, const Dims4& d) {
      return Tensor::from_floats(transpose4(v.to_floats(), d, Layout::nchw, Layout::nhwc),
                                 shape4(d, Layout::nhwc));
    };
    const Tensor x = to_nhwc(a.x, t.x_dims()), w = to_nhwc(a.w, t.w_dims());
    const Tensor dy = to_nhwc(a.dy, t.y_dims()), dw0 = to_nhwc(a.dw0, t.w_dims());

    const Tensor y1 = poisoned(shape4(t.y_dims(), Layout::nchw), DType::f32);
    const Tensor y2 = poisoned(shape4(t.y_dims(), Layout::nhwc), DType::f32);
    ops::conv2d_forward(y1, a.x, a.w, t.params(Layout::nchw));
    ops::conv2d_forward(y2, x, w, t.params(Layout::nhwc));
    EXPECT_TRUE(all_close(transpose4(y2.to_floats(), t.y_dims(), Layout::nhwc, Layout::nchw),
                          y1.to_floats(), 1e-5, 1e-5))
        << t.str();

    const Tensor dx1 = poisoned(shape4(t.x_dims(), Layout::nchw), DType::f32);
    const Tensor dx2 = poisoned(shape4(t.x_dims(), Layout::nhwc), DType::f32);
    ops::conv2d_backward_data(dx1, a.dy, a.w, t.params(Layout::nchw));
    ops::conv2d_backward_data(dx2, dy, w, t.params(Layout::nhwc));
    EXPECT_TRUE(all_close(transpose4(dx2.to_floats(), t.x_dims(), Layout::nhwc, Layout::nchw),
                          dx1.to_floats(), 1e-5, 1e-5))
        << t.str();

    const Tensor dw1 = a.dw0.clone(), dw2 = dw0.clone();
    ops::conv2d_backward_filter(dw1, a.dy, a.x, t.params(Layout::nchw));
    ops::conv2d_backward_filter(dw2, dy, x, t.params(Layout::nhwc));
    EXPECT_TRUE(all_close(transpose4(dw2.to_floats(), t.w_dims(), Layout::nhwc, Layout::nchw),
                          dw1.to_floats(), 1e-5, 1e-5))
        << t.str();
  }
}

// Half inputs: fp32 accumulation of the rounded inputs, one rounding of the output; an f32 dw
// accumulates the gradient of half inputs.
TEST(ConvCpuHalf, HalfInputsMatchNaiveOnRoundedValues) {
  const ConvCase& t = kCases[1];
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const Layout l : {Layout::nchw, Layout::nhwc}) {
      const Inputs in = make_inputs(t, l, dtype, 61);
      const double tol = dtype == DType::bf16 ? 1e-2 : 2e-3;
      const Tensor y = poisoned(shape4(t.y_dims(), l), dtype);
      ops::conv2d_forward(y, in.x, in.w, t.params(l));
      const std::vector<double> want = naive_conv_forward(t, l, in.x.to_floats(), in.w.to_floats());
      EXPECT_TRUE(all_close(y, want, tol, tol * max_abs_of(want)))
          << dtype_name(dtype) << " " << ops::layout_name(l);

      const Tensor dx = poisoned(shape4(t.x_dims(), l), dtype);
      ops::conv2d_backward_data(dx, in.dy, in.w, t.params(l));
      const std::vector<double> want_dx =
          naive_conv_backward_data(t, l, in.dy.to_floats(), in.w.to_floats());
      EXPECT_TRUE(all_close(dx, want_dx, tol, tol * max_abs_of(want_dx)));

      const Tensor dw = in.dw0.clone();  // f32 gradient of half inputs
      ops::conv2d_backward_filter(dw, in.dy, in.x, t.params(l));
      const std::vector<double> want_dw =
          naive_conv_backward_filter(t, l, in.dy.to_floats(), in.x.to_floats(), in.dw0.to_floats());
      EXPECT_TRUE(all_close(dw, want_dw, tol, tol * max_abs_of(want_dw)));
    }
  }
}

TEST(ConvCpuShape, OutputShapeFollowsTheFormula) {
  const ops::Conv2dParams p{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}};
  EXPECT_EQ(ops::conv2d_output_shape({2, 3, 9, 10}, {4, 3, 3, 3}, p), (Shape{2, 4, 5, 6}));
  ops::Conv2dParams q = p;
  q.layout = Layout::nhwc;
  EXPECT_EQ(ops::conv2d_output_shape({2, 9, 10, 3}, {4, 3, 3, 3}, q), (Shape{2, 5, 6, 4}));
}

// Zero images: the forward has nothing to write and the filter gradient is left unchanged.
TEST(ConvCpuShape, EmptyBatchIsANoOp) {
  const ops::Conv2dParams p{};
  const Tensor x = Tensor::empty({0, 3, 5, 5}, DType::f32);
  const Tensor y = Tensor::empty({0, 2, 3, 3}, DType::f32);
  const Tensor w = random_tensor({2, 3, 3, 3}, DType::f32, 1);
  ops::conv2d_forward(y, x, w, p);
  const Tensor dw = w.clone();
  ops::conv2d_backward_filter(dw, y, x, p);
  EXPECT_TRUE(bit_identical(dw, w));
}

// ---- channel bias ----

TEST(ChannelBiasCpu, AddAndGradMatchNaive) {
  const Dims4 d{3, 5, 4, 7};
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const Tensor y = random_tensor(shape4(d, l), dtype, 71);
      const Tensor bias = random_tensor({d.c}, DType::f32, 72);
      const std::vector<float> y0 = y.to_floats(), b = bias.to_floats();
      ops::add_channel_bias(y, bias, l);
      std::vector<float> want(y0.size());
      std::vector<double> sums(static_cast<size_t>(d.c), 0.0);
      for (int64_t n = 0; n < d.n; ++n)
        for (int64_t c = 0; c < d.c; ++c)
          for (int64_t h = 0; h < d.h; ++h)
            for (int64_t w = 0; w < d.w; ++w) {
              const size_t i = idx(at4(d, l, n, c, h, w));
              want[i] = y0[i] + b[idx(c)];
              sums[idx(c)] += y0[i];
            }
      EXPECT_TRUE(matches_rounded(y, want)) << ops::layout_name(l) << " " << dtype_name(dtype);

      const Tensor dy = Tensor::from_floats(y0, shape4(d, l), dtype);
      const Tensor dbias = random_tensor({d.c}, DType::f32, 73);
      const std::vector<float> db0 = dbias.to_floats();
      ops::channel_bias_grad(dbias, dy, l);
      for (size_t c = 0; c < sums.size(); ++c) sums[c] += db0[c];
      EXPECT_TRUE(all_close(dbias, sums, 1e-6, 1e-5));
    }
  }
}

// ---- layout conversion ----

TEST(ConvertLayoutCpu, MatchesHostTransposeAndCasts) {
  const Dims4 d{2, 3, 4, 5};
  const Tensor src = random_tensor(shape4(d, Layout::nchw), DType::f32, 81);
  const Tensor nhwc = poisoned(shape4(d, Layout::nhwc), DType::f32);
  ops::convert_layout(nhwc, src, Layout::nchw, Layout::nhwc);
  EXPECT_TRUE(matches_rounded(nhwc, transpose4(src.to_floats(), d, Layout::nchw, Layout::nhwc)));
  const Tensor back = poisoned(shape4(d, Layout::nchw), DType::bf16);
  ops::convert_layout(back, nhwc, Layout::nhwc, Layout::nchw);
  EXPECT_TRUE(matches_rounded(back, src.to_floats()));
  const Tensor same = poisoned(shape4(d, Layout::nchw), DType::f16);
  ops::convert_layout(same, src, Layout::nchw, Layout::nchw);
  EXPECT_TRUE(matches_rounded(same, src.to_floats()));
}

// ---- bad input ----

TEST(ConvCpuErrors, ChannelMismatchNamesBothTensors) {
  const Tensor x = random_tensor({2, 3, 8, 8}, DType::f32, 1);
  const Tensor w = random_tensor({4, 2, 3, 3}, DType::f32, 2);
  const Tensor y = Tensor::empty({2, 4, 6, 6}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { ops::conv2d_forward(y, x, w, {}); },
                                {"ops::conv2d_forward", "channel mismatch", "x f32[2, 3, 8, 8]",
                                 "w f32[4, 2, 3, 3]", "expected C/groups=3"}));
}

// The op table's cost of the fused forward is the forward's: 2·|y|·|w|/K FLOPs, y's and x's
// dtype.
TEST(ConvCpuCost, ForwardStatsCostsTheForward) {
  struct Recorder : core::OpListener {
    std::vector<std::pair<std::string, core::OpCost>> seen;
    void op_begin(const char* name, Device, const core::OpCost& c) override {
      seen.emplace_back(name, c);
    }
    void op_end() override {}
  } rec;
  const ConvCase t{.n = 2, .c = 3, .h = 6, .w = 6, .k = 4, .r = 3, .s = 3, .ph = 1, .pw = 1};
  const Tensor x = random_tensor(shape4(t.x_dims(), Layout::nhwc), DType::bf16, 1);
  const Tensor w = random_tensor(shape4(t.w_dims(), Layout::nhwc), DType::bf16, 2);
  const Tensor y = Tensor::empty(shape4(t.y_dims(), Layout::nhwc), DType::bf16);
  const Tensor sum = Tensor::empty({4}, DType::f32), sq = Tensor::empty({4}, DType::f32);
  core::set_op_listener(&rec);
  ops::conv2d_forward_stats(y, sum, sq, x, w, t.params(Layout::nhwc));
  core::set_op_listener(nullptr);
  ASSERT_FALSE(rec.seen.empty());
  EXPECT_EQ(rec.seen.front().first, "conv2d_forward_stats");
  EXPECT_DOUBLE_EQ(rec.seen.front().second.flops,
                   2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.numel()) / 4);
  EXPECT_EQ(rec.seen.front().second.dtype, DType::bf16);
}

TEST(ConvCpuErrors, ForwardStatsNameABadStatisticsTensor) {
  const ConvCase t{.n = 2, .c = 3, .h = 5, .w = 5, .k = 4, .r = 3, .s = 3};
  const Tensor x = random_tensor(shape4(t.x_dims(), Layout::nchw), DType::f32, 1);
  const Tensor w = random_tensor(shape4(t.w_dims(), Layout::nchw), DType::f32, 2);
  const Tensor y = Tensor::empty(shape4(t.y_dims(), Layout::nchw), DType::f32);
  const Tensor sum = Tensor::empty({4}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::conv2d_forward_stats(y, sum, Tensor::empty({3}, DType::f32), x, w,
                                  t.params(Layout::nchw));
      },
      {"ops::conv2d_forward_stats: sum_sq is f32[3]", "expected f32[4]",
       "one value per output channel"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::conv2d_forward_stats(y, Tensor::empty({4}, DType::bf16), sum, x, w,
                                  t.params(Layout::nchw));
      },
      {"ops::conv2d_forward_stats: sum is bf16[4]"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::conv2d_forward_stats(Tensor::empty({2, 4, 4, 4}, DType::f32), sum, sum, x, w,
                                  t.params(Layout::nchw));
      },
      {"ops::conv2d_forward_stats", "y is f32[2, 4, 4, 4]"}));
}

TEST(ConvCpuErrors, WrongRank) {
  const Tensor x = random_tensor({3, 8, 8}, DType::f32, 1);
  const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 2);
  const Tensor y = Tensor::empty({4, 6, 6}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::conv2d_forward(y, x, w, {}); },
      {"ops::conv2d_forward", "x is f32[3, 8, 8]", "expected rank 4", "[N, C, H, W] (NCHW)"}));
  const Tensor w3 = random_tensor({4, 3, 3}, DType::f32, 2);
  const Tensor x4 = random_tensor({1, 3, 8, 8}, DType::f32, 1);
  EXPECT_TRUE(
      throws_error_with([&] { ops::conv2d_forward(y, x4, w3, {}); },
                        {"ops::conv2d_forward", "w is f32[4, 3, 3]", "[K, C/groups, R, S] (KCRS"}));
}

// A channels-last tensor passed with layout NCHW: its "C" is the image height.
TEST(ConvCpuErrors, WrongLayoutSizes) {
  const Tensor x = random_tensor({2, 8, 8, 3}, DType::f32, 1);  // NHWC data
  const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 2);
  const Tensor y = Tensor::empty({2, 4, 6, 6}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { ops::conv2d_forward(y, x, w, {}); },
                                {"ops::conv2d_forward", "channel mismatch", "C=8", "NCHW"}));
  // The right layout, but y given in NCHW order.
  const ops::Conv2dParams nhwc{.layout = Layout::nhwc};
  const Tensor wk = random_tensor({4, 3, 3, 3}, DType::f32, 3);
  EXPECT_TRUE(
      throws_error_with([&] { ops::conv2d_forward(y, x, wk, nhwc); },
                        {"ops::conv2d_forward", "y is f32[2, 4, 6, 6]", "expected [2, 6, 6, 4]"}));
}

TEST(ConvCpuErrors, GradientShapeAndDtype) {
  const Tensor x = random_tensor({2, 3, 8, 8}, DType::f32, 1);
  const Tensor dy = random_tensor({2, 4, 5, 5}, DType::f32, 2);  // wrong: should be 6x6
  const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, 3);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::conv2d_backward_data(x, dy, w, {}); },
      {"ops::conv2d_backward_data", "dy is f32[2, 4, 5, 5]", "expected [2, 4, 6, 6]"}));
  const Tensor dw16 = Tensor::zeros({4, 3, 3, 3}, DType::f16);
  const Tensor dy6 = random_tensor({2, 4, 6, 6}, DType::f32, 4);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::conv2d_backward_filter(dw16, dy6, x, {}); },
      {"ops::conv2d_backward_filter", "dw is f16[4, 3, 3, 3]", "expected dw in f32"}));
  const Tensor x16 = random_tensor({2, 3, 8, 8}, DType::f16, 5);
  const Tensor y = Tensor::empty({2, 4, 6, 6}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { ops::conv2d_forward(y, x16, w, {}); },
                                {"ops::conv2d_forward", "expected equal dtypes"}));
}

TEST(ConvCpuErrors, GroupsAndWindow) {
  const Tensor x = random_tensor({1, 6, 8, 8}, DType::f32, 1);
  const Tensor w = random_tensor({5, 3, 3, 3}, DType::f32, 2);
  const Tensor y = Tensor::empty({1, 5, 6, 6}, DType::f32);
  EXPECT_TRUE(throws_error_with([&] { ops::conv2d_forward(y, x, w, {.groups = 2}); },
                                {"ops::conv2d_forward", "K=5", "multiples of groups=2"}));
  const Tensor small = random_tensor({1, 3, 2, 2}, DType::f32, 3);
  const Tensor w3 = random_tensor({4, 3, 3, 3}, DType::f32, 4);
  EXPECT_TRUE(throws_error_with([&] { ops::conv2d_output_shape(small.shape(), w3.shape(), {}); },
                                {"smaller than the dilated 3x3 filter"}));
  EXPECT_TRUE(throws_error_with(
      [&] {
        ops::conv2d_output_shape(x.shape(), w3.shape(), {.stride = {0, 1}});
      },
      {"invalid parameters", "stride >= 1"}));
}

TEST(ConvCpuErrors, BiasAndLayoutConversion) {
  const Tensor y = random_tensor({2, 4, 5, 5}, DType::f32, 1);
  const Tensor bias = random_tensor({5}, DType::f32, 2);
  EXPECT_TRUE(throws_error_with([&] { ops::add_channel_bias(y, bias, Layout::nchw); },
                                {"ops::add_channel_bias", "bias is f32[5]", "expected f32[4]"}));
  const Tensor dbias = Tensor::zeros({4}, DType::f32);  // C of y read as NHWC is 5
  EXPECT_TRUE(throws_error_with(
      [&] { ops::channel_bias_grad(dbias, y, Layout::nhwc); },
      {"ops::channel_bias_grad", "dbias is f32[4]", "expected f32[5]", "NHWC, C=5"}));
  const Tensor bad = Tensor::empty({2, 4, 5, 5}, DType::f32);
  EXPECT_TRUE(throws_error_with(
      [&] { ops::convert_layout(bad, y, Layout::nchw, Layout::nhwc); },
      {"ops::convert_layout", "dst is f32[2, 4, 5, 5]", "expected [2, 5, 5, 4]"}));
}

}  // namespace
}  // namespace stoker::test
