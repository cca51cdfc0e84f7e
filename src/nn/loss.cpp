#include "stoker/nn/loss.h"

#include "stoker/core/error.h"
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
                              options_.label_smoothing, scale);
  return d;
}

std::string CrossEntropyLoss::describe() const {
  return core::detail::str("CrossEntropyLoss(ignore_index=", options_.ignore_index,
                           ", label_smoothing=", options_.label_smoothing, ")");
}

Tensor MSELoss::forward(const Tensor& pred, const Tensor& target) {
  STOKER_CHECK(pred.shape() == target.shape() && pred.dtype() == target.dtype() &&
                   pred.device() == target.device(),
               "MSELoss: prediction ", pred.str(), " and target ", target.str(),
               " must match in shape, dtype and device");
  pred_ = pred;
  target_ = target;
  Tensor loss = Tensor::empty({}, DType::f32, pred.device());
  ops::mse_forward(loss, pred, target);
  return loss;
}

Tensor MSELoss::backward(float scale) {
  STOKER_CHECK(pred_.defined(), "MSELoss: backward called before forward");
  Tensor d = Tensor::empty(pred_.shape(), pred_.dtype(), pred_.device());
  ops::mse_backward(d, pred_, target_, scale);
  return d;
}

}  // namespace stoker::nn
