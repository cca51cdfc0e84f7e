// Losses: a rank-0 f32 loss from predictions and targets (forward, no host sync), and
// d(scale * loss)/d(pred) in pred's dtype once per forward (backward; `scale` folds in gradient
// accumulation and the loss scale); forward_backward does both in one pass where
// fuses_backward() (nn::LinearCrossEntropyLoss). Math is fp32. Not thread-safe.
// Details: docs/ops.md#transformer-fusions.
#pragma once

#include <cstdint>
#include <string>

#include "stoker/core/tensor.h"
#include "stoker/nn/module.h"

namespace stoker::nn {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual Tensor forward(const Tensor& pred, const Tensor& target) = 0;
  virtual Tensor backward(float scale = 1.0f) = 0;
  virtual std::string describe() const = 0;

  struct ForwardBackward {
    Tensor loss;  // as forward()
    Tensor grad;  // as backward(scale)
  };
  // Default: forward, then backward.
  virtual ForwardBackward forward_backward(const Tensor& pred, const Tensor& target,
                                           float scale = 1.0f) {
    Tensor loss = forward(pred, target);
    return {loss, backward(scale)};
  }
  // True: forward_backward does in one pass what forward + backward would do in two.
  virtual bool fuses_backward() const { return false; }
  // False: the predictions are not class scores (Trainer::evaluate then measures no accuracy).
  virtual bool predictions_are_scores() const { return true; }

  // A rank-0 f32 device tensor every later backward() multiplies the gradient by, in fp32
  // before rounding to the prediction's dtype: fp16's loss scale (the Trainer sets its
  // GradScaler's). Scaling after rounding would flush small f16 gradients to zero first.
  // Undefined: no factor.
  void set_grad_scale(const Tensor& scale) { grad_scale_ = scale; }
  const Tensor& grad_scale() const { return grad_scale_; }

 protected:
  Tensor grad_scale_;
};

struct CrossEntropyOptions {
  int64_t ignore_index = -100;   // targets equal to this contribute neither loss nor gradient
  float label_smoothing = 0.0f;  // PyTorch's definition: (1 - s) * one_hot + s / classes
};

// Softmax cross-entropy over the last dimension of logits [N, C] with i32 or i64 class targets
// [N]: fused (one pass computes the loss and keeps what the gradient needs), mean over the
// targets that are not ignore_index — PyTorch's nn.CrossEntropyLoss(reduction="mean").
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options_(options) {}
  Tensor forward(const Tensor& logits, const Tensor& target) override;
  Tensor backward(float scale = 1.0f) override;
  std::string describe() const override;

 private:
  CrossEntropyOptions options_;
  Tensor logits_, target_, lse_, count_;
};

// Mean squared error, mean over all elements (PyTorch's nn.MSELoss()). Prediction and target
// may differ in float dtype (a bf16 prediction under mixed precision, an f32 target): the loss
// is then computed in fp32 and the gradient returned in the prediction's dtype.
class MSELoss : public Loss {
 public:
  Tensor forward(const Tensor& pred, const Tensor& target) override;
  Tensor backward(float scale = 1.0f) override;
  std::string describe() const override { return "MSELoss"; }

 private:
  Tensor pred_, target_;  // as used by the math (widened when the dtypes differ)
  DType pred_dtype_ = DType::f32;
};

}  // namespace stoker::nn

// LinearCrossEntropyLoss: a linear layer without bias and the softmax cross-entropy after it,
// a chunk of rows at a time, so the [N, classes] logits never exist whole.
namespace stoker::nn {

struct LinearCrossEntropyOptions {
  int64_t ignore_index = -100;   // as CrossEntropyOptions
  float label_smoothing = 0.0f;  // as CrossEntropyOptions
  // Rows of logits alive at once; 0: as many as fit in 1 GiB, in equal chunks.
  int64_t chunk_rows = 0;
  // True: another use of the weight calls grad_ready() after this loss wrote its gradient.
  bool weight_shared = false;
  // The head's GEMMs and the loss see the classes padded to a multiple of this (the parameter
  // keeps its [classes, K] shape): 0 auto (64 on CUDA when classes is not a multiple of 64 —
  // GPT-2's 50,257 rows are not 16-byte aligned and cuBLASLt falls off its fast kernels; off on
  // the CPU, whose BLAS has no such cliff), 1 off, n > 1 a multiple of n. Padded, each run
  // copies the weight (in x's dtype) into a zero-padded [classes', K] buffer and, with a
  // gradient, writes dW into an f32 [classes', K] scratch that is added into the gradient once;
  // the padding columns are excluded from the softmax, so results equal the unpadded path's
  // within fp32 rounding. Extra memory while it runs: classes' * K * (dtype size + 4) bytes.
  int64_t pad_classes_to = 0;
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

  // The rows per chunk for N rows of x in `dtype` (chunk_rows, or the 1 GiB rule over the
  // padded width).
  int64_t chunk_rows(int64_t n, DType dtype) const;
  // The width of the logits the head computes on the weight's current device: the classes
  // rounded up as pad_classes_to says.
  int64_t padded_classes() const;

 private:
  ForwardBackward run(const Tensor& x, const Tensor& target, bool want_grad, float scale);

  Parameter& weight_;
  LinearCrossEntropyOptions options_;
  Tensor x_, target_;  // saved by forward for a separate backward
};

}  // namespace stoker::nn
