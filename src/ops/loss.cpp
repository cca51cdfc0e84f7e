// Public cross-entropy and MSE ops: validation, then dispatch. The forward's loss and count are
// rank-0 f32 tensors on the inputs' device, so a training step reads nothing back to the host;
// the backward takes `count` as that device scalar for the same reason.
#include "stoker/ops/loss.h"

#include <cmath>
#include <limits>

#include "ops/loss_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

namespace {
void check_scalar(const char* op, const char* name, const Tensor& t, const char* ref_name,
                  const Tensor& ref) {
  detail::check_defined(op, name, t);
  detail::check_same_device(op, ref_name, ref, name, t);
  STOKER_CHECK(t.dtype() == DType::f32 && t.rank() == 0, "ops::", op, ": ", name, " is ", t.str(),
               "; expected a rank-0 f32 scalar (Tensor::empty({}, DType::f32, device))");
}

void check_xent(const char* op, const Tensor& logits, const Tensor& target, const Tensor& lse,
                float label_smoothing) {
  detail::check_float(op, "logits", logits);
  detail::check_backend(op, logits);
  STOKER_CHECK(logits.rank() == 2 && logits.size(1) >= 1, "ops::", op, ": logits is ", logits.str(),
               "; expected [N, C] with at least one class");
  const int64_t n = logits.size(0);
  detail::check_defined(op, "target", target);
  detail::check_same_device(op, "logits", logits, "target", target);
  STOKER_CHECK((target.dtype() == DType::i32 || target.dtype() == DType::i64) &&
                   target.rank() == 1 && target.size(0) == n,
               "ops::", op, ": target is ", target.str(), " for logits ", logits.str(),
               "; expected i32[", n, "] or i64[", n, "] class indices");
  detail::check_defined(op, "lse", lse);
  detail::check_same_device(op, "logits", logits, "lse", lse);
  STOKER_CHECK(lse.dtype() == DType::f32 && lse.rank() == 1 && lse.size(0) == n, "ops::", op,
               ": lse is ", lse.str(), " for logits ", logits.str(), "; expected f32[", n,
               "] (one log-sum-exp per row)");
  STOKER_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f, "ops::", op,
               ": label_smoothing = ", label_smoothing, " is outside [0, 1]");
}

// The leading columns of logits that are classes (0: all of them), checked and resolved.
int64_t valid_classes(const char* op, const Tensor& logits, int64_t classes) {
  STOKER_CHECK(classes >= 0 && classes <= logits.size(1), "ops::", op, ": classes = ", classes,
               " for logits ", logits.str(), "; expected 1..", logits.size(1),
               " (the leading columns that are classes) or 0 for all");
  return classes == 0 ? logits.size(1) : classes;
}

void check_mse(const char* op, const char* out_name, const Tensor* out, const Tensor& pred,
               const Tensor& target) {
  detail::check_float(op, "pred", pred);
  detail::check_float(op, "target", target);
  detail::check_backend(op, pred);
  detail::check_same_device(op, "pred", pred, "target", target);
  detail::check_same_dtype(op, "pred", pred, "target", target);
  detail::check_same_numel(op, "pred", pred, "target", target);
  if (out != nullptr) {
    detail::check_float(op, out_name, *out);
    detail::check_same_device(op, "pred", pred, out_name, *out);
    detail::check_same_dtype(op, "pred", pred, out_name, *out);
    detail::check_same_numel(op, "pred", pred, out_name, *out);
  }
}
// The optional device gradient scale: a one-element f32 tensor on the input's device.
void check_grad_scale(const char* op, const Tensor& g, const Tensor& like) {
  if (!g.defined()) return;
  STOKER_CHECK(g.dtype() == DType::f32 && g.numel() == 1 && g.device() == like.device(),
               "ops::", op, ": grad_scale must be a one-element f32 tensor on ",
               like.device().str(), ", got ", g.str());
}
}  // namespace

void cross_entropy_forward(const Tensor& loss, const Tensor& count, const Tensor& lse,
                           const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           float label_smoothing) {
  const char* op = "cross_entropy_forward";
  check_xent(op, logits, target, lse, label_smoothing);
  check_scalar(op, "loss", loss, "logits", logits);
  check_scalar(op, "count", count, "logits", logits);
  if (logits.size(0) == 0) {  // mean over no rows: NaN, as PyTorch
    fill(loss, std::numeric_limits<double>::quiet_NaN());
    fill(count, 0.0);
    return;
  }
  cross_entropy_forward_stub(logits.device(), loss, count, lse, logits, target, ignore_index,
                             label_smoothing, Tensor(), logits.size(1));
}

void count_targets(const Tensor& count, const Tensor& target, int64_t ignore_index) {
  const char* op = "count_targets";
  detail::check_defined(op, "target", target);
  detail::check_backend(op, target);
  STOKER_CHECK((target.dtype() == DType::i32 || target.dtype() == DType::i64) && target.rank() == 1,
               "ops::", op, ": target is ", target.str(),
               "; expected i32[N] or i64[N] class indices");
  check_scalar(op, "count", count, "target", target);
  if (target.numel() == 0) {
    fill(count, 0.0);
    return;
  }
  count_targets_stub(target.device(), count, target, ignore_index);
}

void cross_entropy_forward_chunk(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                 const Tensor& target, const Tensor& count, int64_t ignore_index,
                                 float label_smoothing, int64_t classes) {
  const char* op = "cross_entropy_forward_chunk";
  check_xent(op, logits, target, lse, label_smoothing);
  check_scalar(op, "loss", loss, "logits", logits);
  check_scalar(op, "count", count, "logits", logits);
  classes = valid_classes(op, logits, classes);
  if (logits.size(0) == 0) return;  // adds nothing
  const Tensor no_count;            // the chunk's own count is not wanted
  cross_entropy_forward_stub(logits.device(), loss, no_count, lse, logits, target, ignore_index,
                             label_smoothing, count, classes);
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                            const Tensor& lse, const Tensor& count, int64_t ignore_index,
                            float label_smoothing, float scale, const Tensor& grad_scale,
                            int64_t classes) {
  const char* op = "cross_entropy_backward";
  check_grad_scale(op, grad_scale, logits);
  check_xent(op, logits, target, lse, label_smoothing);
  check_scalar(op, "count", count, "logits", logits);
  detail::check_float(op, "dlogits", dlogits);
  detail::check_same_device(op, "logits", logits, "dlogits", dlogits);
  detail::check_same_dtype(op, "logits", logits, "dlogits", dlogits);
  STOKER_CHECK(dlogits.shape() == logits.shape(), "ops::", op, ": dlogits is ", dlogits.str(),
               " but logits is ", logits.str(), "; expected the same shape");
  classes = valid_classes(op, logits, classes);
  if (logits.size(0) == 0) return;
  cross_entropy_backward_stub(logits.device(), dlogits, logits, target, lse, count, ignore_index,
                              label_smoothing, scale, grad_scale, classes);
}

void mse_forward(const Tensor& loss, const Tensor& pred, const Tensor& target) {
  const char* op = "mse_forward";
  check_mse(op, nullptr, nullptr, pred, target);
  check_scalar(op, "loss", loss, "pred", pred);
  if (pred.numel() == 0) {  // mean over no elements: NaN, as PyTorch
    fill(loss, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  mse_forward_stub(pred.device(), loss, pred, target);
}

void mse_backward(const Tensor& dpred, const Tensor& pred, const Tensor& target, float scale,
                  const Tensor& grad_scale) {
  check_mse("mse_backward", "dpred", &dpred, pred, target);
  check_grad_scale("mse_backward", grad_scale, pred);
  if (pred.numel() > 0) mse_backward_stub(pred.device(), dpred, pred, target, scale, grad_scale);
}

}  // namespace stoker::ops
