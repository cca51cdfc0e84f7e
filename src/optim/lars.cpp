#include "stoker/optim/optimizer.h"

#include <fmt/format.h>
#include <cmath>

#include "stoker/core/error.h"
#include "stoker/ops/optim.h"

namespace stoker::optim {

bool one_dimensional(const std::string&, const nn::Parameter& p) { return p.shape().rank() <= 1; }

LARS::LARS(NamedParameters params, LarsOptions options)
    : Optimizer(std::move(params)), options_(std::move(options)) {
  const LarsOptions& o = options_;
  // Every check fails for NaN.
  STOKER_CHECK(std::isfinite(o.lr) && o.lr >= 0.0f, "LARS: lr ", o.lr,
               " must be a finite number >= 0");
  STOKER_CHECK(o.momentum >= 0.0f && o.momentum < 1.0f, "LARS: momentum ", o.momentum,
               " must be in [0, 1) (MLPerf's reference uses 0.9)");
  STOKER_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0f, "LARS: weight_decay ",
               o.weight_decay, " must be a finite number >= 0 (MLPerf's ResNet-50 uses 5e-5)");
  STOKER_CHECK(std::isfinite(o.eta) && o.eta > 0.0f, "LARS: eta ", o.eta,
               " must be a finite number > 0 (MLPerf's reference uses 0.001)");
  STOKER_CHECK(std::isfinite(o.epsilon) && o.epsilon >= 0.0f, "LARS: epsilon ", o.epsilon,
               " must be a finite number >= 0 (MLPerf's reference uses 0)");
  lr_ = o.lr;
  adapt_.reserve(params_.size());
  for (const auto& [name, p] : params_) adapt_.push_back(o.exclude && o.exclude(name, *p) ? 0 : 1);
  momentum_ = &make_state("momentum");
}

void LARS::update() {
  std::vector<Tensor> values, grads;
  gather(values, grads);
  std::vector<uint8_t> adapt;
  adapt.reserve(values.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].second->requires_grad) adapt.push_back(adapt_[i]);
  const ops::LarsHyper h{.lr = lr_,
                         .momentum = options_.momentum,
                         .weight_decay = options_.weight_decay,
                         .eta = options_.eta,
                         .epsilon = options_.epsilon};
  ops::lars_step(values, grads, values_of(*momentum_), adapt, h, found_inf_, lr_tensor_);
  ++steps_;
}

bool LARS::adapted(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name && params_[i].second->requires_grad) return adapt_[i] != 0;
  STOKER_THROW("LARS::adapted: '", name, "' is not a trainable parameter of this optimizer");
}

int64_t LARS::trainable_count() const {
  int64_t n = 0;
  for (const auto& [name, p] : params_) n += p->requires_grad ? 1 : 0;
  return n;
}

int64_t LARS::adapted_count() const {
  int64_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    n += params_[i].second->requires_grad && adapt_[i] != 0 ? 1 : 0;
  return n;
}

std::string LARS::describe() const {
  return fmt::format(
      "LARS(lr={:g}, momentum={:g}, weight_decay={:g}, eta={:g}, epsilon={:g}; {} of {} parameters "
      "adapted)",
      lr_, options_.momentum, options_.weight_decay, options_.eta, options_.epsilon,
      adapted_count(), trainable_count());
}

}  // namespace stoker::optim
