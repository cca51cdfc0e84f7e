// nn::LinearCrossEntropyLoss on the GPU against the same loss on the CPU (the CPU one is tested
// against the unfused head in linear_cross_entropy_test.cpp): f32 without TF32 and bf16, chunks
// that divide the rows and that do not, ignored rows, label smoothing, the fp16 loss scale; the
// ops underneath (count_targets, cross_entropy_forward_chunk) against the whole-batch forward.
// On CUDA the head pads its classes to a multiple of 64 by default (1000 -> 1024 above): GPT-2's
// 50,257 classes padded against unpadded in bf16, and the padding ops' zero gradient columns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "stoker/nn/loss.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/loss.h"
#include "test_util.h"

namespace stoker::nn {
namespace {

using test::gpu;

Tensor targets_of(int64_t n, int64_t classes, int64_t ignore_every) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i)
    t.push_back(ignore_every > 0 && i % ignore_every == 2 ? -100 : (i * 131 + 7) % classes);
  return Tensor::from_vector(t, {n});
}

TEST(LinearCrossEntropyLossGpu, MatchesTheCpuLoss) {
  STOKER_REQUIRE_GPU();
  ops::set_allow_tf32(false);
  const int64_t n = 300, k = 64, classes = 1000;
  for (const DType dt : {DType::f32, DType::bf16}) {
    for (const int64_t rows : {64, 77, 0}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " chunk_rows " << rows);
      const Tensor x32 = test::random_tensor({n, k}, DType::f32, 1, -2.0f, 2.0f);
      Tensor x = Tensor::empty({n, k}, dt);
      ops::cast(x, x32);
      const Tensor target = targets_of(n, classes, 5);
      const Tensor w0 = test::random_tensor({classes, k}, DType::f32, 2, -0.3f, 0.3f);
      const Tensor g = Tensor::from_floats({256.0f}, {});
      const LinearCrossEntropyOptions o{.label_smoothing = 0.1f, .chunk_rows = rows};
      Parameter wc(w0), wg(w0.to(gpu()));
      LinearCrossEntropyLoss cpu(wc, o), dev(wg, o);
      cpu.set_grad_scale(g);
      dev.set_grad_scale(g.to(gpu()));
      wc.zero_grad();
      wg.zero_grad();
      const Loss::ForwardBackward a = cpu.forward_backward(x, target, 0.5f);
      const Loss::ForwardBackward b = dev.forward_backward(x.to(gpu()), target.to(gpu()), 0.5f);
      const double rtol = dt == DType::f32 ? 1e-5 : 2e-2;
      EXPECT_NEAR(b.loss.item(), a.loss.item(), dt == DType::f32 ? 1e-5 : 1e-2);
      EXPECT_EQ(b.grad.dtype(), dt);
      test::expect_max_abs_close(b.grad.to_floats(), a.grad.to_floats(), rtol, "dx", 1e-7);
      test::expect_max_abs_close(wg.grad().to_floats(), wc.grad().to_floats(), rtol, "dW", 1e-7);
      // Evaluation: the loss alone.
      NoSaveScope no_save;
      EXPECT_NEAR(dev.forward(x.to(gpu()), target.to(gpu())).item(), b.loss.item(), 1e-6);
    }
  }
}

TEST(LinearCrossEntropyLossGpu, PadsToAMultipleOf64ByDefault) {
  STOKER_REQUIRE_GPU();
  for (const auto& [classes, want] : std::vector<std::pair<int64_t, int64_t>>{
           {50257, 50304}, {50304, 50304}, {1000, 1024}, {10, 64}, {128256, 128256}}) {
    Parameter w(Tensor::zeros({classes, 4}, DType::f32, gpu()));
    EXPECT_EQ(LinearCrossEntropyLoss(w).padded_classes(), want) << classes;
    EXPECT_EQ(LinearCrossEntropyLoss(w, {.pad_classes_to = 1}).padded_classes(), classes);
  }
}

// GPT-2's head at 2048 tokens: bf16 x [2048, 768], weight [50257, 768], padded to 50,304 (the
// default) against pad_classes_to = 1, two chunks, ignored rows, label smoothing, and a second
// micro-batch that accumulates into the weight gradient.
TEST(LinearCrossEntropyLossGpu, PaddedGpt2HeadEqualsTheUnpaddedOne) {
  STOKER_REQUIRE_GPU();
  const int64_t n = 2048, k = 768, classes = 50257;
  const Tensor x32 = test::random_tensor({n, k}, DType::f32, 31, -1.0f, 1.0f).to(gpu());
  Tensor x = Tensor::empty({n, k}, DType::bf16, gpu());
  ops::cast(x, x32);
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(i % 9 == 4 ? -100 : (i * 7919 + 3) % classes);
  t[5] = classes - 1;  // the last real class, right before the padding
  const Tensor target = Tensor::from_vector(t, {n}).to(gpu());
  const Tensor w0 = test::random_tensor({classes, k}, DType::f32, 32, -0.05f, 0.05f).to(gpu());
  const LinearCrossEntropyOptions o{.label_smoothing = 0.1f, .chunk_rows = 1024};
  LinearCrossEntropyOptions off = o;
  off.pad_classes_to = 1;
  Parameter wp(w0), wu(w0);
  LinearCrossEntropyLoss padded(wp, o), unpadded(wu, off);
  ASSERT_EQ(padded.padded_classes(), 50304);
  ASSERT_EQ(unpadded.padded_classes(), classes);
  for (int step = 0; step < 2; ++step) {  // step 1 adds to step 0's weight gradient
    SCOPED_TRACE(testing::Message() << "micro-batch " << step);
    if (step == 0) {
      wp.zero_grad();
      wu.zero_grad();
    }
    const Loss::ForwardBackward a = padded.forward_backward(x, target, 0.5f);
    const Loss::ForwardBackward b = unpadded.forward_backward(x, target, 0.5f);
    // Logits from two cuBLASLt kernels may differ by a bf16 rounding in a few places.
    EXPECT_NEAR(a.loss.item(), b.loss.item(), 1e-3 * (1.0 + std::abs(b.loss.item())));
    EXPECT_EQ(a.grad.dtype(), DType::bf16);
    test::expect_max_abs_close(a.grad.to_floats(), b.grad.to_floats(), 2e-2, "dx", 1e-7);
    test::expect_max_abs_close(wp.grad().to_floats(), wu.grad().to_floats(), 2e-2, "dW", 1e-7);
  }
}

TEST(LinearCrossEntropyLossGpu, LossOpsWriteZerosInThePadding) {
  STOKER_REQUIRE_GPU();
  const int64_t n = 300, classes = 1001, width = 1024;
  for (const DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor logits = test::random_tensor({n, width}, dt, 33, -4.0f, 4.0f);
    // The CPU's classes-only op over the same padded rows is the reference (tested there
    // against unpadded logits).
    const Tensor target = targets_of(n, classes, 7);
    Tensor count = Tensor::empty({}, DType::f32), loss = Tensor::zeros({}, DType::f32);
    Tensor lse = Tensor::empty({n}, DType::f32), dl = Tensor::empty({n, width}, dt);
    ops::count_targets(count, target, -100);
    ops::cross_entropy_forward_chunk(loss, lse, logits, target, count, -100, 0.1f, classes);
    ops::cross_entropy_backward(dl, logits, target, lse, count, -100, 0.1f, 2.0f, {}, classes);
    const Tensor gl = logits.to(gpu()), gt = target.to(gpu());
    Tensor gcount = Tensor::empty({}, DType::f32, gpu()),
           gloss = Tensor::zeros({}, DType::f32, gpu());
    Tensor glse = Tensor::empty({n}, DType::f32, gpu());
    Tensor gdl = Tensor::empty({n, width}, dt, gpu());
    test::poison(gdl);
    ops::count_targets(gcount, gt, -100);
    ops::cross_entropy_forward_chunk(gloss, glse, gl, gt, gcount, -100, 0.1f, classes);
    ops::cross_entropy_backward(gdl, gl, gt, glse, gcount, -100, 0.1f, 2.0f, {}, classes);
    EXPECT_NEAR(gloss.item(), loss.item(), 1e-5 * (1.0 + std::abs(loss.item())));
    test::expect_max_abs_close(glse.to_floats(), lse.to_floats(), 1e-6, "lse");
    const std::vector<float> got = gdl.to_floats();
    test::expect_max_abs_close(got, dl.to_floats(), dt == DType::f32 ? 1e-5 : 1e-2, "dlogits",
                               1e-9);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = classes; j < width; ++j)
        ASSERT_EQ(got[static_cast<size_t>(r * width + j)], 0.0f) << "row " << r << " col " << j;
  }
}

TEST(LinearCrossEntropyLossGpu, ChunkOpsSumToTheWholeLoss) {
  STOKER_REQUIRE_GPU();
  const int64_t n = 1000, classes = 777;
  const Tensor logits = test::random_tensor({n, classes}, DType::bf16, 3, -4.0f, 4.0f).to(gpu());
  const Tensor target = targets_of(n, classes, 7).to(gpu());
  Tensor whole = Tensor::empty({}, DType::f32, gpu()), count = Tensor::empty({}, DType::f32, gpu());
  Tensor lse = Tensor::empty({n}, DType::f32, gpu());
  ops::cross_entropy_forward(whole, count, lse, logits, target, -100, 0.0f);
  Tensor total = Tensor::empty({}, DType::f32, gpu());
  ops::count_targets(total, target, -100);
  EXPECT_EQ(total.item(), count.item());
  Tensor sum = Tensor::zeros({}, DType::f32, gpu()), lse2 = Tensor::empty({n}, DType::f32, gpu());
  for (int64_t r0 = 0; r0 < n; r0 += 333) {
    const int64_t r1 = std::min<int64_t>(n, r0 + 333);
    ops::cross_entropy_forward_chunk(sum, lse2.slice(r0, r1), logits.slice(r0, r1),
                                     target.slice(r0, r1), total, -100, 0.0f);
  }
  EXPECT_NEAR(sum.item(), whole.item(), 1e-5 * std::abs(whole.item()));
  EXPECT_EQ(lse2.to_floats(), lse.to_floats());
}

}  // namespace
}  // namespace stoker::nn
