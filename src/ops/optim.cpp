#include "stoker/ops/optim.h"

#include <cmath>
#include <cstring>
#include <string>

#include "ops/optim_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/fp8.h"

namespace stoker::ops {

namespace {
void check_list(const char* op, const char* what, std::span<const Tensor> xs,
                std::span<const Tensor> params) {
  STOKER_CHECK(xs.size() == params.size(), "ops::", op, ": ", params.size(), " parameters but ",
               xs.size(), " ", what);
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string name = std::string(what) + "[" + std::to_string(i) + "]";
    STOKER_CHECK(xs[i].defined() && xs[i].dtype() == DType::f32 &&
                     xs[i].shape() == params[i].shape() && xs[i].device() == params[0].device(),
                 "ops::", op, ": ", name, " is ",
                 xs[i].defined() ? xs[i].str() : std::string("undefined"), "; expected f32",
                 params[i].shape(), " on ", params[0].device().str());
  }
}

void check_found_inf(const char* op, const Tensor& found_inf, std::span<const Tensor> params) {
  if (!found_inf.defined()) return;
  STOKER_CHECK(found_inf.dtype() == DType::f32 && found_inf.numel() == 1 &&
                   (params.empty() || found_inf.device() == params[0].device()),
               "ops::", op,
               ": found_inf must be a one-element f32 tensor on the parameters' "
               "device, got ",
               found_inf.str());
}

// A device learning rate (optional): a rank-0 f32 tensor on the parameters' device.
void check_device_lr(const char* op, const Tensor& lr, std::span<const Tensor> params) {
  if (!lr.defined()) return;
  STOKER_CHECK(lr.dtype() == DType::f32 && lr.numel() == 1 &&
                   (params.empty() || lr.device() == params[0].device()),
               "ops::", op, ": lr is ", lr.str(), "; expected a rank-0 f32 tensor on ",
               params.empty() ? std::string("the parameters' device") : params[0].device().str());
}

void check_sgd_hyper(const SgdHyper& h) {
  STOKER_CHECK(h.lr >= 0.0f && h.momentum >= 0.0f && h.weight_decay >= 0.0f, "ops::sgd_step: lr ",
               h.lr, ", momentum ", h.momentum, ", weight_decay ", h.weight_decay,
               " must be non-negative");
  STOKER_CHECK(!h.nesterov || (h.momentum > 0.0f && h.dampening == 0.0f),
               "ops::sgd_step: Nesterov momentum requires momentum > 0 and dampening = 0");
}

detail::SgdConsts sgd_consts(const SgdHyper& h) {
  return {h.lr,
          h.momentum,
          static_cast<float>(1.0 - h.dampening),
          h.weight_decay,
          h.nesterov,
          h.first_step,
          h.momentum != 0.0f};
}

void check_adamw_hyper(const AdamWHyper& h, const Tensor& step_state,
                       std::span<const Tensor> params) {
  STOKER_CHECK(step_state.defined() || h.step >= 1, "ops::adamw_step: step ", h.step,
               " must be >= 1 (1-based)");
  STOKER_CHECK(
      !step_state.defined() ||
          (step_state.dtype() == DType::u8 && step_state.nbytes() == sizeof(AdamWStepState) &&
           (params.empty() || step_state.device() == params[0].device())),
      "ops::adamw_step: step_state must come from adamw_step_state_create on the "
      "parameters' device, got ",
      step_state.str());
  STOKER_CHECK(h.beta1 >= 0.0f && h.beta1 < 1.0f && h.beta2 >= 0.0f && h.beta2 < 1.0f,
               "ops::adamw_step: betas (", h.beta1, ", ", h.beta2, ") must be in [0, 1)");
  STOKER_CHECK(h.lr >= 0.0f && h.eps >= 0.0f && h.weight_decay >= 0.0f,
               "ops::adamw_step: lr, eps and weight_decay must be non-negative");
}

// Empty, or one per parameter: undefined, or f16/bf16 of the parameter's shape on its device;
// the defined ones share a dtype.
void check_compute_copies(const char* op, std::span<const Tensor> copies,
                          std::span<const Tensor> params) {
  if (copies.empty()) return;
  STOKER_CHECK(copies.size() == params.size(), "ops::", op, ": ", params.size(), " parameters but ",
               copies.size(),
               " compute_copies; pass one per parameter (undefined for none) or none at all");
  DType half = DType::f32;
  for (size_t i = 0; i < copies.size(); ++i) {
    const Tensor& c = copies[i];
    if (!c.defined()) continue;
    STOKER_CHECK((c.dtype() == DType::f16 || c.dtype() == DType::bf16) &&
                     c.shape() == params[i].shape() && c.device() == params[i].device(),
                 "ops::", op, ": compute_copies[", i, "] is ", c.str(), "; expected f16 or bf16",
                 params[i].shape(), " on ", params[i].device().str());
    STOKER_CHECK(half == DType::f32 || half == c.dtype(), "ops::", op,
                 ": compute_copies mix f16 and bf16; pass the copies of one dtype per call");
    half = c.dtype();
  }
}

detail::AdamWConsts adamw_consts(const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), t);
  return {detail::adamw_decay(static_cast<double>(h.lr), static_cast<double>(h.weight_decay)),
          static_cast<float>(1.0 - h.beta1),
          h.beta2,
          static_cast<float>(1.0 - h.beta2),
          static_cast<float>(h.lr / bc1),
          static_cast<float>(std::sqrt(bc2)),
          h.eps};
}

// A compact state list: each entry f32/bf16 of the parameter's shape, or u8 codes with an
// absmax of one f32 per block; `partner` (exp_avg for exp_avg_sq) must have the same forms.
void check_states(const char* op, const char* what, std::span<const StateTensor> xs,
                  std::span<const Tensor> params, int64_t block,
                  std::span<const StateTensor> partner = {}) {
  STOKER_CHECK(xs.size() == params.size(), "ops::", op, ": ", params.size(), " parameters but ",
               xs.size(), " ", what);
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string name = std::string(what) + "[" + std::to_string(i) + "]";
    const Tensor& v = xs[i].values;
    STOKER_CHECK(
        v.defined() &&
            (v.dtype() == DType::f32 || v.dtype() == DType::bf16 || v.dtype() == DType::u8) &&
            v.shape() == params[i].shape() && v.device() == params[0].device(),
        "ops::", op, ": ", name, ".values is ", v.defined() ? v.str() : std::string("undefined"),
        "; expected f32, bf16 or u8", params[i].shape(), " on ", params[0].device().str());
    if (v.dtype() == DType::u8) {
      const Tensor& a = xs[i].absmax;
      const int64_t blocks = quantization_blocks(v.numel(), block);
      STOKER_CHECK(a.defined() && a.dtype() == DType::f32 && a.numel() == blocks &&
                       a.device() == params[0].device(),
                   "ops::", op, ": ", name, ".absmax is ",
                   a.defined() ? a.str() : std::string("undefined"), "; u8 codes need f32[", blocks,
                   "] (one scale per block of ", block, ") on ", params[0].device().str());
    }
    if (!partner.empty())
      STOKER_CHECK(partner[i].values.dtype() == v.dtype(), "ops::", op, ": ", name, " is ",
                   v.dtype(), " but its partner state is ", partner[i].values.dtype(),
                   "; both states of a parameter must be stored alike");
  }
}

void check_storage(const char* op, const StateStorage& s) {
  STOKER_CHECK(s.block >= 256 && s.block <= 4096 && s.block % 256 == 0, "ops::", op,
               ": StateStorage::block ", s.block,
               " must be a multiple of 256 between 256 and 4096 (256 or 2048 are usual)");
}
}  // namespace

void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
              std::span<const Tensor> momentum_bufs, const SgdHyper& h, const Tensor& found_inf,
              const Tensor& lr) {
  check_list("sgd_step", "params", params, params);
  check_list("sgd_step", "grads", grads, params);
  if (h.momentum != 0.0f) check_list("sgd_step", "momentum_bufs", momentum_bufs, params);
  check_found_inf("sgd_step", found_inf, params);
  check_device_lr("sgd_step", lr, params);
  check_sgd_hyper(h);
  if (params.empty()) return;
  detail::check_backend("sgd_step", params[0]);
  sgd_step_stub(params[0].device(), params, grads, momentum_bufs, sgd_consts(h), found_inf, lr);
}

void lars_step(std::span<const Tensor> params, std::span<const Tensor> grads,
               std::span<const Tensor> momentum_bufs, std::span<const uint8_t> adapt,
               const LarsHyper& h, const Tensor& found_inf, const Tensor& lr) {
  check_list("lars_step", "params", params, params);
  check_list("lars_step", "grads", grads, params);
  check_list("lars_step", "momentum_bufs", momentum_bufs, params);
  STOKER_CHECK(adapt.size() == params.size(), "ops::lars_step: ", params.size(), " parameters but ",
               adapt.size(), " adapt flags; pass one per parameter");
  check_found_inf("lars_step", found_inf, params);
  check_device_lr("lars_step", lr, params);
  const auto finite_non_negative = [](float x) { return std::isfinite(x) && x >= 0.0f; };
  STOKER_CHECK(finite_non_negative(h.lr) && finite_non_negative(h.momentum) &&
                   finite_non_negative(h.weight_decay) && finite_non_negative(h.epsilon),
               "ops::lars_step: lr ", h.lr, ", momentum ", h.momentum, ", weight_decay ",
               h.weight_decay, " and epsilon ", h.epsilon, " must be finite and non-negative");
  STOKER_CHECK(std::isfinite(h.eta) && h.eta > 0.0f, "ops::lars_step: eta ", h.eta,
               " must be a finite positive number (MLPerf's reference uses 0.001)");
  if (params.empty()) return;
  detail::check_backend("lars_step", params[0]);
  const detail::LarsConsts c{h.lr, h.momentum, h.weight_decay, h.eta, h.epsilon};
  lars_step_stub(params[0].device(), params, grads, momentum_bufs, adapt, c, found_inf, lr);
}

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                const AdamWHyper& h, const Tensor& found_inf, const Tensor& step_state,
                std::span<const Tensor> compute_copies, const Tensor& lr) {
  check_list("adamw_step", "params", params, params);
  check_list("adamw_step", "grads", grads, params);
  check_list("adamw_step", "exp_avgs", exp_avgs, params);
  check_list("adamw_step", "exp_avg_sqs", exp_avg_sqs, params);
  check_found_inf("adamw_step", found_inf, params);
  check_adamw_hyper(h, step_state, params);
  check_compute_copies("adamw_step", compute_copies, params);
  STOKER_CHECK(!lr.defined() || step_state.defined(),
               "ops::adamw_step: a device learning rate needs step_state (adamw_step_state_create)"
               ": the bias corrections are computed from it on the device");
  check_device_lr("adamw_step", lr, params);
  if (params.empty()) return;
  detail::check_backend("adamw_step", params[0]);
  adamw_step_stub(params[0].device(), params, grads, exp_avgs, exp_avg_sqs, adamw_consts(h),
                  found_inf, step_state, static_cast<double>(h.beta1), static_cast<double>(h.beta2),
                  static_cast<double>(h.lr), compute_copies, lr,
                  static_cast<double>(h.weight_decay));
}

void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
              std::span<const StateTensor> momentum_bufs, const SgdHyper& h,
              const StateStorage& storage, const Tensor& found_inf) {
  STOKER_CHECK(h.momentum > 0.0f,
               "ops::sgd_step: compact momentum buffers need momentum > 0 (without momentum SGD "
               "keeps no state: call the overload without buffers)");
  check_list("sgd_step", "params", params, params);
  check_list("sgd_step", "grads", grads, params);
  check_storage("sgd_step", storage);
  check_states("sgd_step", "momentum_bufs", momentum_bufs, params, storage.block);
  check_found_inf("sgd_step", found_inf, params);
  check_sgd_hyper(h);
  if (params.empty()) return;
  detail::check_backend("sgd_step", params[0]);
  sgd_step_compact_stub(params[0].device(), params, grads, momentum_bufs, sgd_consts(h), storage,
                        found_inf);
}

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                std::span<const StateTensor> exp_avgs, std::span<const StateTensor> exp_avg_sqs,
                const AdamWHyper& h, const StateStorage& storage, const Tensor& found_inf,
                const Tensor& step_state) {
  check_list("adamw_step", "params", params, params);
  check_list("adamw_step", "grads", grads, params);
  check_storage("adamw_step", storage);
  check_states("adamw_step", "exp_avgs", exp_avgs, params, storage.block);
  check_states("adamw_step", "exp_avg_sqs", exp_avg_sqs, params, storage.block, exp_avgs);
  check_found_inf("adamw_step", found_inf, params);
  check_adamw_hyper(h, step_state, params);
  if (params.empty()) return;
  detail::check_backend("adamw_step", params[0]);
  adamw_step_compact_stub(params[0].device(), params, grads, exp_avgs, exp_avg_sqs, adamw_consts(h),
                          storage, found_inf, step_state, static_cast<double>(h.beta1),
                          static_cast<double>(h.beta2), static_cast<double>(h.lr));
}

Tensor adamw_step_state_create(Device device) {
  const AdamWStepState s{0, 1.0, 1.0, 0.0f, 1.0f};
  Tensor host = Tensor::empty({static_cast<int64_t>(sizeof s)}, DType::u8, Device::cpu());
  std::memcpy(host.data(), &s, sizeof s);
  return device.is_cpu() ? host : host.to(device);
}

int64_t adamw_step_state_steps(const Tensor& state) {
  STOKER_CHECK(state.dtype() == DType::u8 && state.nbytes() == sizeof(AdamWStepState),
               "ops::adamw_step_state_steps: not an AdamW step state: ", state.str());
  const Tensor host = state.device().is_cpu() ? state : state.to(Device::cpu());
  AdamWStepState s;
  std::memcpy(&s, host.data(), sizeof s);
  return s.step;
}

}  // namespace stoker::ops
