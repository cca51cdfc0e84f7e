// nn::LinearCrossEntropyLoss on the CPU against the unfused head (one GEMM for all logits, then
// nn::CrossEntropyLoss): loss, input gradient and weight gradient for chunk sizes that divide
// the rows and that do not, ignored rows, label smoothing, the backward scale and the fp16 loss
// scale; the weight gradient's overwrite/accumulate semantics and its grad_ready; forward then
// backward (recomputation) against forward_backward; the ops underneath (count_targets,
// cross_entropy_forward_chunk); the head padded to a multiple of 64 classes (pad_classes_to)
// against the unpadded one, and the loss ops' `classes` argument that leaves the padding out;
// bad input.
#include "stoker/nn/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "stoker/nn/module.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/loss.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

struct Result {
  float loss;
  std::vector<float> dx, dw;
};

Tensor targets_of(int64_t n, int64_t classes, uint32_t seed, int64_t ignore_every = 0) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i)
    t.push_back(ignore_every > 0 && i % ignore_every == 1 ? -100 : (i * 7 + seed) % classes);
  return Tensor::from_vector(t, {n});
}

// The unfused head: logits = x w^T in one GEMM, CrossEntropyLoss, dx = dlogits w, dW = dlogits^T x.
Result unfused(const Tensor& x, const Tensor& w, const Tensor& target, CrossEntropyOptions o,
               float scale, const Tensor& grad_scale = Tensor()) {
  const int64_t n = x.size(0), classes = w.size(0);
  Tensor logits = Tensor::empty({n, classes}, x.dtype());
  ops::gemm(logits, x, w, {.trans_b = true});
  CrossEntropyLoss loss(o);
  loss.set_grad_scale(grad_scale);
  const float l = loss.forward(logits, target).item();
  const Tensor d = loss.backward(scale);
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  ops::gemm(dx, d, w);
  Tensor dw = Tensor::zeros(w.shape(), DType::f32);
  ops::gemm(dw, d, x, {.trans_a = true});
  return {l, dx.to_floats(), dw.to_floats()};
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::abs(want[i]))) << what << "[" << i << "]";
}

TEST(LinearCrossEntropyLoss, EqualsTheUnfusedHeadForEveryChunking) {
  const int64_t n = 23, k = 12, classes = 37;
  const Tensor x = test::random_tensor({n, k}, DType::f32, 1);
  for (const int64_t ignore_every : {0, 3}) {
    for (const float smoothing : {0.0f, 0.1f}) {
      const Tensor target = targets_of(n, classes, 2, ignore_every);
      const CrossEntropyOptions co{.label_smoothing = smoothing};
      Parameter w(test::random_tensor({classes, k}, DType::f32, 3));
      const Result want = unfused(x, w.value(), target, co, 0.5f);
      for (const int64_t rows : {1, 4, 5, 23, 64, 0}) {
        SCOPED_TRACE(testing::Message() << "chunk_rows " << rows << " ignore_every " << ignore_every
                                        << " smoothing " << smoothing);
        w.zero_grad();
        LinearCrossEntropyLoss loss(w, {.label_smoothing = smoothing, .chunk_rows = rows});
        const Loss::ForwardBackward r = loss.forward_backward(x, target, 0.5f);
        EXPECT_NEAR(r.loss.item(), want.loss, 1e-5f * (1.0f + std::abs(want.loss)));
        EXPECT_EQ(r.grad.shape(), x.shape());
        expect_close(r.grad.to_floats(), want.dx, 1e-5f, "dx");
        expect_close(w.grad().to_floats(), want.dw, 1e-5f, "dW");
      }
    }
  }
}

TEST(LinearCrossEntropyLoss, AppliesTheLossScaleBeforeRoundingAndHalfInputsFollowF32) {
  const int64_t n = 16, k = 8, classes = 50;
  const Tensor target = targets_of(n, classes, 5);
  const Tensor g = Tensor::from_floats({1024.0f}, {});
  for (const DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x32 = test::random_tensor({n, k}, DType::f32, 6);
    Tensor x = Tensor::empty({n, k}, dt);
    ops::cast(x, x32);
    Parameter w(test::random_tensor({classes, k}, DType::f32, 7));
    // The reference in the same dtype: logits and gradients rounded as the fused path rounds.
    Tensor wh = Tensor::empty(w.shape(), dt);
    ops::cast(wh, w.value());
    const Result want = unfused(x, wh, target, {}, 0.25f, g);
    LinearCrossEntropyLoss loss(w, {.chunk_rows = 5});
    loss.set_grad_scale(g);
    const Loss::ForwardBackward r = loss.forward_backward(x, target, 0.25f);
    EXPECT_EQ(r.grad.dtype(), dt);
    EXPECT_NEAR(r.loss.item(), want.loss, 1e-4f * (1.0f + want.loss));
    // Gradients hold the factor 1024 * 0.25 / 16 = 16; bf16 logits differ from one GEMM to the
    // other only in how fp32 sums are ordered, which can move a rounding by one half-ulp.
    expect_close(r.grad.to_floats(), want.dx, 1e-2f, "dx");
    expect_close(w.grad().to_floats(), want.dw, 1e-2f, "dW");
  }
}

TEST(LinearCrossEntropyLoss, WeightGradientOverwritesAfterZeroGradThenAccumulates) {
  const int64_t n = 10, k = 6, classes = 9;
  const Tensor x = test::random_tensor({n, k}, DType::f32, 8);
  const Tensor target = targets_of(n, classes, 1);
  Parameter w(test::random_tensor({classes, k}, DType::f32, 9));
  int ready = 0;
  w.add_grad_ready_hook([&](Parameter&) { ++ready; });
  LinearCrossEntropyLoss loss(w, {.chunk_rows = 3});
  ops::fill(w.grad(), 5.0);  // stale values a zero_grad must hide
  w.zero_grad();
  loss.forward_backward(x, target, 1.0f);
  const std::vector<float> once = w.grad().to_floats();
  EXPECT_EQ(ready, 1);
  loss.forward_backward(x, target, 1.0f);  // a second micro-batch adds
  const std::vector<float> twice = w.grad().to_floats();
  EXPECT_EQ(ready, 2);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2.0f * once[i], 1e-6f);
  expect_close(once, unfused(x, w.value(), target, {}, 1.0f).dw, 1e-5f, "dW");

  // Shared (a tied embedding announces it) and frozen weights.
  LinearCrossEntropyLoss shared(w, {.weight_shared = true});
  shared.forward_backward(x, target, 1.0f);
  EXPECT_EQ(ready, 2);
  w.requires_grad = false;
  const std::vector<float> before = w.grad().to_floats();
  const Loss::ForwardBackward r = loss.forward_backward(x, target, 1.0f);
  EXPECT_EQ(w.grad().to_floats(), before);
  EXPECT_EQ(ready, 2);
  EXPECT_EQ(r.grad.shape(), x.shape());  // the input gradient is still computed
}

TEST(LinearCrossEntropyLoss, ForwardThenBackwardEqualsForwardBackward) {
  const int64_t n = 12, k = 5, classes = 11;
  const Tensor x = test::random_tensor({n, k}, DType::f32, 10);
  const Tensor target = targets_of(n, classes, 3, 4);
  Parameter w(test::random_tensor({classes, k}, DType::f32, 11));
  LinearCrossEntropyLoss loss(w, {.chunk_rows = 5});
  w.zero_grad();
  const Loss::ForwardBackward fused = loss.forward_backward(x, target, 0.5f);
  const std::vector<float> dw_fused = w.grad().to_floats();
  w.zero_grad();
  const float l = loss.forward(x, target).item();
  const Tensor dx = loss.backward(0.5f);
  EXPECT_EQ(l, fused.loss.item());
  EXPECT_EQ(dx.to_floats(), fused.grad.to_floats());
  EXPECT_EQ(w.grad().to_floats(), dw_fused);
  EXPECT_TRUE(loss.fuses_backward());
  EXPECT_FALSE(loss.predictions_are_scores());

  // Evaluation saves nothing: a backward after it is an error that says why.
  {
    NoSaveScope no_save;
    EXPECT_EQ(loss.forward(x, target).item(), l);
  }
  EXPECT_TRUE(test::throws_error_with([&] { loss.backward(1.0f); },
                                      {"backward called before forward", "NoSaveScope"}));
}

TEST(LinearCrossEntropyLoss, ChunksAreEqualAndWithinTheMemoryBudget) {
  Parameter w(Tensor::zeros({50304, 4}, DType::f32));
  LinearCrossEntropyLoss loss(w);
  // 1 GiB of bf16 logits over 50,304 classes: at most 10,672 rows; 16,384 rows in 2 chunks of
  // 8,192, 32,768 rows in 4.
  const int64_t rows = loss.chunk_rows(16384, DType::bf16);
  EXPECT_EQ(rows, 8192);
  EXPECT_LE(rows * 50304 * 2, int64_t{1} << 30);
  const int64_t rows32 = loss.chunk_rows(32768, DType::bf16);
  EXPECT_EQ(rows32 % 64, 0);
  EXPECT_EQ((32768 + rows32 - 1) / rows32, 4);
  EXPECT_LE(rows32 * 50304 * 2, (int64_t{1} << 30) + 64 * 50304 * 2);
  EXPECT_EQ(loss.chunk_rows(100, DType::bf16), 100);  // fewer rows than one chunk: all at once
  LinearCrossEntropyLoss fixed(w, {.chunk_rows = 300});
  EXPECT_EQ(fixed.chunk_rows(1000, DType::f32), 300);
  EXPECT_EQ(fixed.chunk_rows(200, DType::f32), 200);
}

TEST(LinearCrossEntropyLoss, ChunkOpsSumToTheWholeLoss) {
  const int64_t n = 9, classes = 6;
  const Tensor logits = test::random_tensor({n, classes}, DType::f32, 12, -3.0f, 3.0f);
  const Tensor target = targets_of(n, classes, 4, 4);
  Tensor whole = Tensor::empty({}, DType::f32), count = Tensor::empty({}, DType::f32);
  Tensor lse = Tensor::empty({n}, DType::f32);
  ops::cross_entropy_forward(whole, count, lse, logits, target, -100, 0.05f);
  Tensor total = Tensor::empty({}, DType::f32);
  ops::count_targets(total, target, -100);
  EXPECT_EQ(total.item(), count.item());
  EXPECT_EQ(total.item(), 7.0f);  // rows 1 and 5 are ignored
  Tensor sum = Tensor::zeros({}, DType::f32), lse2 = Tensor::empty({n}, DType::f32);
  for (int64_t r0 = 0; r0 < n; r0 += 4) {
    const int64_t r1 = std::min<int64_t>(n, r0 + 4);
    ops::cross_entropy_forward_chunk(sum, lse2.slice(r0, r1), logits.slice(r0, r1),
                                     target.slice(r0, r1), total, -100, 0.05f);
  }
  EXPECT_NEAR(sum.item(), whole.item(), 1e-6f);
  EXPECT_EQ(lse2.to_floats(), lse.to_floats());
}

Tensor filled(const Shape& shape, double value, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  ops::fill(t, value);
  return t;
}

Tensor in_dtype(const Tensor& x32, DType dt) {
  Tensor x = Tensor::empty(x32.shape(), dt);
  ops::cast(x, x32);
  return x;
}

// Loss, dx and dW of one forward_backward from a zeroed gradient.
Result run_head(Parameter& w, const Tensor& x, const Tensor& target,
                const LinearCrossEntropyOptions& o, float scale) {
  w.zero_grad();
  LinearCrossEntropyLoss loss(w, o);
  const Loss::ForwardBackward r = loss.forward_backward(x, target, scale);
  return {static_cast<float>(r.loss.item()), r.grad.to_floats(), w.grad().to_floats()};
}

TEST(LinearCrossEntropyLoss, PaddedHeadEqualsTheUnpaddedOne) {
  const int64_t n = 23, k = 12;
  for (const int64_t classes : {13, 50}) {
    const Tensor x32 = test::random_tensor({n, k}, DType::f32, 21, -2.0f, 2.0f);
    Parameter w(test::random_tensor({classes, k}, DType::f32, 22));
    for (const DType dt : {DType::f32, DType::bf16}) {
      const Tensor x = in_dtype(x32, dt);
      for (const int64_t ignore_every : {0, 3}) {
        for (const float smoothing : {0.0f, 0.1f}) {
          const Tensor target = targets_of(n, classes, 4, ignore_every);
          // The truth for f32: one GEMM and CrossEntropyLoss over exactly `classes` columns (a
          // smoothing spread over the 64 padded columns would not match it).
          const Result truth =
              unfused(x32, w.value(), target, {.label_smoothing = smoothing}, 0.5f);
          for (const int64_t rows : {5, 0}) {
            SCOPED_TRACE(testing::Message()
                         << "classes " << classes << " " << dtype_name(dt) << " chunk_rows " << rows
                         << " ignore_every " << ignore_every << " smoothing " << smoothing);
            const LinearCrossEntropyOptions o{.label_smoothing = smoothing, .chunk_rows = rows};
            LinearCrossEntropyOptions off = o, pad = o;
            off.pad_classes_to = 1;
            pad.pad_classes_to = 64;
            EXPECT_EQ(LinearCrossEntropyLoss(w, pad).padded_classes(), 64);
            const Result want = run_head(w, x, target, off, 0.5f);
            const Result got = run_head(w, x, target, pad, 0.5f);
            // The padding adds exact zeros to every sum (here the results have the same bits);
            // a BLAS whose kernels order a longer sum differently may move an fp32 rounding,
            // which a bf16 dx may take to one bf16 rounding of the largest value.
            EXPECT_NEAR(got.loss, want.loss, 1e-6f * (1.0f + std::abs(want.loss)));
            test::expect_max_abs_close(got.dx, want.dx, dt == DType::f32 ? 1e-6 : 0x1p-8, "dx",
                                       0.0);
            test::expect_max_abs_close(got.dw, want.dw, 1e-6, "dW", 0.0);
            if (dt == DType::f32) {
              EXPECT_NEAR(got.loss, truth.loss, 1e-5f * (1.0f + std::abs(truth.loss)));
              expect_close(got.dx, truth.dx, 1e-5f, "dx against the unfused head");
              expect_close(got.dw, truth.dw, 1e-5f, "dW against the unfused head");
            }
          }
        }
      }
    }
  }
}

TEST(LinearCrossEntropyLoss, PaddedWeightGradientOverwritesThenAccumulatesOnce) {
  const int64_t n = 10, k = 6, classes = 9;
  const Tensor x = test::random_tensor({n, k}, DType::f32, 23);
  const Tensor target = targets_of(n, classes, 1, 4);
  Parameter w(test::random_tensor({classes, k}, DType::f32, 24));
  int ready = 0;
  w.add_grad_ready_hook([&](Parameter&) { ++ready; });
  const std::vector<float> want = unfused(x, w.value(), target, {}, 1.0f).dw;
  LinearCrossEntropyLoss loss(w, {.chunk_rows = 3, .pad_classes_to = 64});
  ops::fill(w.grad(), 5.0);  // stale values a zero_grad must hide
  w.zero_grad();
  loss.forward_backward(x, target, 1.0f);
  const std::vector<float> once = w.grad().to_floats();
  EXPECT_EQ(ready, 1);
  expect_close(once, want, 1e-5f, "dW");
  loss.forward_backward(x, target, 1.0f);  // a second micro-batch adds (all chunks, once)
  const std::vector<float> twice = w.grad().to_floats();
  EXPECT_EQ(ready, 2);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2.0f * once[i], 1e-6f);
  // forward, then backward: the same as forward_backward.
  w.zero_grad();
  loss.forward(x, target);
  loss.backward(1.0f);
  EXPECT_EQ(w.grad().to_floats(), once);
  EXPECT_EQ(ready, 3);

  // Shared (a tied embedding announces it) and frozen weights.
  LinearCrossEntropyLoss shared(w, {.weight_shared = true, .pad_classes_to = 64});
  shared.forward_backward(x, target, 1.0f);
  EXPECT_EQ(ready, 3);
  w.requires_grad = false;
  const std::vector<float> before = w.grad().to_floats();
  const Loss::ForwardBackward r = loss.forward_backward(x, target, 1.0f);
  EXPECT_EQ(w.grad().to_floats(), before);
  EXPECT_EQ(ready, 3);
  expect_close(r.grad.to_floats(), unfused(x, w.value(), target, {}, 1.0f).dx, 1e-5f, "dx");
}

TEST(LinearCrossEntropyLoss, PaddedClassesFollowTheOptionAndTheDevice) {
  Parameter w(Tensor::zeros({50257, 4}, DType::f32));
  // Auto: no padding on the CPU (its BLAS has no alignment cliff); CUDA is the GPU suite's.
  EXPECT_EQ(LinearCrossEntropyLoss(w).padded_classes(), 50257);
  EXPECT_EQ(LinearCrossEntropyLoss(w, {.pad_classes_to = 1}).padded_classes(), 50257);
  EXPECT_EQ(LinearCrossEntropyLoss(w, {.pad_classes_to = 64}).padded_classes(), 50304);
  EXPECT_EQ(LinearCrossEntropyLoss(w, {.pad_classes_to = 128}).padded_classes(), 50304);
  EXPECT_EQ(LinearCrossEntropyLoss(w, {.pad_classes_to = 48}).padded_classes(), 50304);
  EXPECT_NE(
      LinearCrossEntropyLoss(w, {.pad_classes_to = 64}).describe().find("padded_classes=50304"),
      std::string::npos);
  Parameter aligned(Tensor::zeros({50304, 4}, DType::f32));
  EXPECT_EQ(LinearCrossEntropyLoss(aligned, {.pad_classes_to = 64}).padded_classes(), 50304);
  // The 1 GiB of logits counts the padded width: 10,680 bf16 rows fit at 50,257 classes, not at
  // 50,304 (2 chunks of 5,340, rounded up to whole 64-row tiles).
  EXPECT_EQ(LinearCrossEntropyLoss(w, {.pad_classes_to = 1}).chunk_rows(10680, DType::bf16), 10680);
  EXPECT_EQ(LinearCrossEntropyLoss(w, {.pad_classes_to = 64}).chunk_rows(10680, DType::bf16), 5376);
}

TEST(LinearCrossEntropyLoss, LossOpsLeaveThePaddingColumnsOut) {
  const int64_t n = 7, classes = 5, width = 8;
  // Padding holding large values: any that entered the max, the sum or the mean would show.
  std::vector<float> wide = test::random_floats(static_cast<size_t>(n * width), 25, -3.0f, 3.0f);
  std::vector<float> narrow;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < width; ++j) {
      if (j < classes) {
        narrow.push_back(wide[static_cast<size_t>(r * width + j)]);
      } else {
        wide[static_cast<size_t>(r * width + j)] = 40.0f;
      }
    }
  }
  for (const DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor lw = Tensor::from_floats(wide, {n, width}, dt);
    const Tensor ln = Tensor::from_floats(narrow, {n, classes}, dt);
    const Tensor target = targets_of(n, classes, 2, 3);
    Tensor count = Tensor::empty({}, DType::f32);
    ops::count_targets(count, target, -100);
    Tensor loss_w = Tensor::zeros({}, DType::f32), loss_n = Tensor::zeros({}, DType::f32);
    Tensor lse_w = Tensor::empty({n}, DType::f32), lse_n = Tensor::empty({n}, DType::f32);
    ops::cross_entropy_forward_chunk(loss_w, lse_w, lw, target, count, -100, 0.1f, classes);
    ops::cross_entropy_forward_chunk(loss_n, lse_n, ln, target, count, -100, 0.1f);
    EXPECT_EQ(loss_w.item(), loss_n.item());
    EXPECT_EQ(lse_w.to_floats(), lse_n.to_floats());
    Tensor dw = filled({n, width}, 7.0, dt), dn = Tensor::empty({n, classes}, dt);
    ops::cross_entropy_backward(dw, lw, target, lse_w, count, -100, 0.1f, 0.5f, {}, classes);
    ops::cross_entropy_backward(dn, ln, target, lse_n, count, -100, 0.1f, 0.5f);
    const std::vector<float> gw = dw.to_floats(), gn = dn.to_floats();
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < width; ++j) {
        const float want = j < classes ? gn[static_cast<size_t>(r * classes + j)] : 0.0f;
        EXPECT_EQ(gw[static_cast<size_t>(r * width + j)], want) << "row " << r << " col " << j;
      }
    }
  }
  // A target in the padding is outside the classes; `classes` must be 0..C.
  const Tensor lw = Tensor::from_floats(wide, {n, width});
  Tensor loss = Tensor::zeros({}, DType::f32), lse = Tensor::empty({n}, DType::f32);
  Tensor count = filled({}, 7.0, DType::f32);
  std::vector<int64_t> t(static_cast<size_t>(n), 1);
  t[4] = 6;
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        ops::cross_entropy_forward_chunk(loss, lse, lw, Tensor::from_vector(t, {n}), count, -100,
                                         0.0f, classes);
      },
      {"target 6", "row 4", "outside [0, 5)"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        ops::cross_entropy_forward_chunk(loss, lse, lw, targets_of(n, classes, 0), count, -100,
                                         0.0f, 9);
      },
      {"cross_entropy_forward_chunk", "classes = 9", "expected 1..8"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        ops::cross_entropy_backward(lw, lw, targets_of(n, classes, 0), lse, count, -100, 0.0f, 1.0f,
                                    {}, -1);
      },
      {"cross_entropy_backward", "classes = -1"}));
}

TEST(LinearCrossEntropyLoss, BadInputNamesTheFix) {
  Parameter w(test::random_tensor({7, 4}, DType::f32, 13));
  LinearCrossEntropyLoss loss(w);
  const Tensor target = targets_of(3, 7, 0);
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        loss.forward(test::random_tensor({3, 5}, DType::f32, 1), target);
      },
      {"5 features", "takes 4"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        loss.forward(test::random_tensor({4, 4}, DType::f32, 1), target);
      },
      {"targets must be 4 class indices"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] { loss.forward(test::random_tensor({12}, DType::f32, 1), target); },
      {"input must be [N, 4]"}));
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        loss.forward(test::random_tensor({3, 4}, DType::f32, 1), targets_of(3, 9, 0));
      },
      {"target", "outside [0, 7)"}));
  EXPECT_TRUE(test::throws_error_with([&] { LinearCrossEntropyLoss bad(w, {.chunk_rows = -1}); },
                                      {"chunk_rows -1"}));
  EXPECT_TRUE(
      test::throws_error_with([&] { LinearCrossEntropyLoss bad(w, {.pad_classes_to = -64}); },
                              {"pad_classes_to -64", "1: no padding"}));
  Tensor c = Tensor::empty({}, DType::f32);
  EXPECT_TRUE(test::throws_error_with(
      [&] {
        ops::count_targets(c, Tensor::zeros({2, 2}, DType::i64), -100);
      },
      {"count_targets", "expected i32[N] or i64[N]"}));
}

}  // namespace
}  // namespace stoker::nn
