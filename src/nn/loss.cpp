#include "stoker/nn/loss.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/loss.h"

namespace stoker::nn {

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& target) {
  STOKER_CHECK(logits.rank() == 2, "CrossEntropyLoss: logits must be [N, classes], got ",
               logits.str());
  STOKER_CHECK((target.dtype() == DType::i32 || target.dtype() == DType::i64) &&
                   target.numel() == logits.size(0),
               "CrossEntropyLoss: targets must be ", logits.size(0),
               " class indices (i32 or i64), got ", target.str());
  STOKER_CHECK(target.device() == logits.device(), "CrossEntropyLoss: logits on ",
               logits.device().str(), " but targets on ", target.device().str());
  STOKER_CHECK(options_.label_smoothing >= 0.0f && options_.label_smoothing <= 1.0f,
               "CrossEntropyLoss: label_smoothing ", options_.label_smoothing,
               " must be in [0, 1]");
  logits_ = logits;
  target_ = target.reshape({logits.size(0)});
  lse_ = Tensor::empty({logits.size(0)}, DType::f32, logits.device());
  count_ = Tensor::empty({}, DType::f32, logits.device());
  Tensor loss = Tensor::empty({}, DType::f32, logits.device());
  ops::cross_entropy_forward(loss, count_, lse_, logits_, target_, options_.ignore_index,
                             options_.label_smoothing);
  return loss;
}

Tensor CrossEntropyLoss::backward(float scale) {
  STOKER_CHECK(logits_.defined(), "CrossEntropyLoss: backward called before forward");
  Tensor d = Tensor::empty(logits_.shape(), logits_.dtype(), logits_.device());
  ops::cross_entropy_backward(d, logits_, target_, lse_, count_, options_.ignore_index,
                              options_.label_smoothing, scale, grad_scale_);
  // Consumed: nothing of the step outlives it (a CUDA-graph step must free what it allocates).
  logits_ = target_ = lse_ = count_ = Tensor();
  return d;
}

std::string CrossEntropyLoss::describe() const {
  return fmt::format("CrossEntropyLoss(ignore_index={}, label_smoothing={:g})",
                     options_.ignore_index, options_.label_smoothing);
}

Tensor MSELoss::forward(const Tensor& pred, const Tensor& target) {
  STOKER_CHECK(pred.shape() == target.shape() && pred.device() == target.device() &&
                   core::is_float(pred.dtype()) && core::is_float(target.dtype()),
               "MSELoss: prediction ", pred.str(), " and target ", target.str(),
               " must be float tensors of the same shape on the same device");
  pred_ = pred;
  target_ = target;
  // Mixed precision (a half prediction, an f32 target): the loss runs in fp32 on a widened copy
  // of the prediction, as autocast does, so the target keeps its precision.
  if (pred.dtype() != target.dtype()) {
    const DType wide =
        pred.dtype() == DType::f32 || target.dtype() == DType::f32 ? DType::f32 : pred.dtype();
    auto widen = [&](const Tensor& t) {
      if (t.dtype() == wide) return t;
      Tensor w = Tensor::empty(t.shape(), wide, t.device());
      ops::cast(w, t);
      return w;
    };
    pred_ = widen(pred);
    target_ = widen(target);
  }
  pred_dtype_ = pred.dtype();
  Tensor loss = Tensor::empty({}, DType::f32, pred.device());
  ops::mse_forward(loss, pred_, target_);
  return loss;
}

Tensor MSELoss::backward(float scale) {
  STOKER_CHECK(pred_.defined(), "MSELoss: backward called before forward");
  Tensor d = Tensor::empty(pred_.shape(), pred_.dtype(), pred_.device());
  ops::mse_backward(d, pred_, target_, scale, grad_scale_);
  pred_ = target_ = Tensor();  // consumed (see CrossEntropyLoss::backward)
  if (d.dtype() == pred_dtype_) return d;
  Tensor narrow = Tensor::empty(d.shape(), pred_dtype_, d.device());
  ops::cast(narrow, d);
  return narrow;
}

}  // namespace stoker::nn
