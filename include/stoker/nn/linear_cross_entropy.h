// LinearCrossEntropyLoss: a linear layer without bias and the softmax cross-entropy after it,
// computed a chunk of rows at a time so the [N, classes] logits never exist whole. For a
// language model's head: 16 x 1024 tokens over GPT-2's 50,304 classes are 1.6 GB of bf16
// logits, and as much again for their gradient, where two chunks of 8,192 rows are 0.8 GB each.
//
// Chunk size: the weight gradient is accumulated chunk by chunk (a read and a write of the fp32
// [classes, K] gradient per chunk after the first: 0.3 GB for GPT-2's head), so fewer, larger
// chunks are faster: with 256 MiB chunks (7 for GPT-2 124M at B 16) the fused head was 1.8 %
// slower per step than whole logits on an H100 (docs/benchmarks.md), about what those six extra
// passes take at its memory bandwidth. The default budget, 1 GiB of logits (2 chunks there),
// leaves one such pass and still never holds more than half of the logits.
//
//   loss = CrossEntropy(x W^T, target)        x [N, K], W [classes, K] (nn::Linear's layout, or
//                                              a tied embedding table), target [N] i32/i64
//
// forward_backward (what the Trainer calls in training) does everything in one pass over the
// chunks, so the head GEMM runs once per chunk as it would unfused:
//   count = rows not ignored (all chunks, on the device)
//   per chunk:  logits = x_c W^T;  loss += sum(row losses) / count;  dlogits = CE'(logits)
//               (in place, scaled by scale * grad_scale / count in fp32 before rounding);
//               dx_c = dlogits W;  dW += dlogits^T x_c  (fp32, into W's gradient)
// and returns the loss and dx. forward alone (evaluation) computes the loss only; backward
// after forward recomputes each chunk's logits (a second head GEMM): correct, and the path only
// code calling the two separately takes.
//
// Precision: logits in x's dtype (W's half compute copy under mixed precision, as nn::Linear),
// fp32 statistics and gradient, fp32 weight gradient. The loss and gradients equal
// nn::Linear(bias = false) + nn::CrossEntropyLoss up to the order of fp32 sums (the loss is
// summed per chunk, dW accumulated chunk by chunk).
//
// The weight's gradient: written with Parameter::grad_for_write (overwrites right after
// zero_grad, accumulates across micro-batches). `weight_shared` says another use of the same
// Parameter (a tied token embedding) adds its part later and calls grad_ready(); otherwise
// this loss calls it. Frozen weights (requires_grad false) get no gradient.
#pragma once

#include <cstdint>
#include <string>

#include "stoker/nn/loss.h"
#include "stoker/nn/parameter.h"

namespace stoker::nn {

struct LinearCrossEntropyOptions {
  int64_t ignore_index = -100;   // as CrossEntropyOptions
  float label_smoothing = 0.0f;  // as CrossEntropyOptions
  // Rows of logits alive at once; 0: as many as fit in 1 GiB, in equal chunks.
  int64_t chunk_rows = 0;
  // True: another use of the weight calls grad_ready() after this loss wrote its gradient.
  bool weight_shared = false;
};

class LinearCrossEntropyLoss : public Loss {
 public:
  // `weight` [classes, K] is borrowed and must outlive the loss.
  explicit LinearCrossEntropyLoss(Parameter& weight, LinearCrossEntropyOptions options = {});

  // x [N, K] (any float dtype; the weight is used in x's dtype), target [N].
  Tensor forward(const Tensor& x, const Tensor& target) override;
  Tensor backward(float scale = 1.0f) override;
  ForwardBackward forward_backward(const Tensor& x, const Tensor& target,
                                   float scale = 1.0f) override;
  bool fuses_backward() const override { return true; }
  bool predictions_are_scores() const override { return false; }  // x are features
  std::string describe() const override;

  // The rows per chunk for N rows of x in `dtype` (chunk_rows, or the 1 GiB rule).
  int64_t chunk_rows(int64_t n, DType dtype) const;

 private:
  ForwardBackward run(const Tensor& x, const Tensor& target, bool want_grad, float scale);

  Parameter& weight_;
  LinearCrossEntropyOptions options_;
  Tensor x_, target_;  // saved by forward for a separate backward
};

}  // namespace stoker::nn
