// nn::LinearCrossEntropyLoss on the GPU against the same loss on the CPU (the CPU one is tested
// against the unfused head in linear_cross_entropy_test.cpp): f32 without TF32 and bf16, chunks
// that divide the rows and that do not, ignored rows, label smoothing, the fp16 loss scale; the
// ops underneath (count_targets, cross_entropy_forward_chunk) against the whole-batch forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
