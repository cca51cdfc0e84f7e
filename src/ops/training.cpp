#include "stoker/ops/optim.h"

#include <cmath>
#include <cstring>

#include "ops/training_stubs.h"
#include "ops/validate.h"
#include "stoker/core/stream.h"

namespace stoker::ops {

void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm) {
  STOKER_CHECK(max_norm > 0.0f, "ops::clip_by_total_norm: max_norm ", max_norm,
               " must be positive");
  STOKER_CHECK(total_norm.defined() && total_norm.dtype() == DType::f32 && total_norm.numel() == 1,
               "ops::clip_by_total_norm: total_norm must be a one-element f32 tensor, got ",
               total_norm.defined() ? total_norm.str() : std::string("undefined"));
  for (size_t i = 0; i < xs.size(); ++i) {
    STOKER_CHECK(xs[i].dtype() == DType::f32 && xs[i].device() == total_norm.device(),
                 "ops::clip_by_total_norm: xs[", i, "] is ", xs[i].str(), "; expected f32 on ",
                 total_norm.device().str());
  }
  if (xs.empty()) return;
  detail::check_backend("clip_by_total_norm", total_norm);
  clip_by_total_norm_stub(total_norm.device(), xs, total_norm, max_norm);
}

void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale,
                       const Tensor& found_inf) {
  STOKER_CHECK(scale.defined() && scale.dtype() == DType::f32 && scale.numel() == 1 &&
                   found_inf.defined() && found_inf.dtype() == DType::f32 &&
                   found_inf.numel() == 1 && found_inf.device() == scale.device(),
               "ops::unscale_and_check: scale and found_inf must be one-element f32 tensors on "
               "one device, got ",
               scale.defined() ? scale.str() : "undefined", " and ",
               found_inf.defined() ? found_inf.str() : "undefined");
  for (size_t i = 0; i < grads.size(); ++i) {
    STOKER_CHECK(grads[i].dtype() == DType::f32 && grads[i].device() == scale.device(),
                 "ops::unscale_and_check: grads[", i, "] is ", grads[i].str(), "; expected f32 on ",
                 scale.device().str(), " (master gradients are fp32 under mixed precision)");
  }
  detail::check_backend("unscale_and_check", scale);
  if (grads.empty()) return;
  unscale_and_check_stub(scale.device(), grads, scale, found_inf);
}

void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,
                  const ScaleUpdate& u) {
  STOKER_CHECK(scale.dtype() == DType::f32 && scale.numel() == 1 && state.dtype() == DType::i32 &&
                   state.numel() == 3 && found_inf.dtype() == DType::f32 &&
                   found_inf.numel() == 1 && state.device() == scale.device() &&
                   found_inf.device() == scale.device(),
               "ops::update_scale: expected f32 scale, i32[3] state and f32 found_inf on one "
               "device, got ",
               scale.str(), ", ", state.str(), ", ", found_inf.str());
  STOKER_CHECK(u.growth_factor > 1.0f && u.backoff_factor > 0.0f && u.backoff_factor < 1.0f &&
                   u.growth_interval >= 1 && u.hysteresis >= 1 && u.min_scale >= 0.0f,
               "ops::update_scale: need growth_factor > 1 (", u.growth_factor,
               "), 0 < backoff_factor < 1 (", u.backoff_factor, "), growth_interval >= 1 (",
               u.growth_interval, "), hysteresis >= 1 (", u.hysteresis, "), min_scale >= 0 (",
               u.min_scale, ")");
  detail::check_backend("update_scale", scale);
  update_scale_stub(scale.device(), scale, state, found_inf, u);
}

Tensor loss_monitor_create(Device device) {
  LossMonitorState s{0.0, 0, 0.0f, -1, -1};
  Tensor host = Tensor::empty({static_cast<int64_t>(sizeof s)}, DType::u8, Device::cpu());
  std::memcpy(host.data(), &s, sizeof s);
  return device.is_cpu() ? host : host.to(device);
}

void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step,
                         const Tensor& step_device) {
  STOKER_CHECK(monitor.dtype() == DType::u8 && monitor.nbytes() == sizeof(LossMonitorState) &&
                   loss.dtype() == DType::f32 && loss.numel() == 1 &&
                   loss.device() == monitor.device(),
               "ops::loss_monitor_update: expected a monitor from loss_monitor_create and a "
               "one-element f32 loss on its device, got ",
               monitor.str(), " and ", loss.str());
  STOKER_CHECK(
      !step_device.defined() || (step_device.dtype() == DType::i64 && step_device.numel() == 1 &&
                                 step_device.device() == monitor.device()),
      "ops::loss_monitor_update: step_device is ", step_device.str(),
      "; expected a rank-0 i64 tensor on ", monitor.device().str());
  loss_monitor_update_stub(monitor.device(), monitor, loss, step, step_device);
}

LossMonitorState loss_monitor_read(const Tensor& monitor, bool reset) {
  const Tensor host = monitor.device().is_cpu() ? monitor : monitor.to(Device::cpu());
  LossMonitorState s;
  std::memcpy(&s, host.data(), sizeof s);
  if (reset) {
    LossMonitorState r = s;
    r.loss_sum = 0.0;
    r.steps = 0;
    Tensor fresh = Tensor::empty(host.shape(), DType::u8, Device::cpu());
    std::memcpy(fresh.data(), &r, sizeof r);
    core::detail::copy_bytes(monitor, fresh);
  }
  return s;
}

}  // namespace stoker::ops
