#include "stoker/optim/optimizer.h"

#include <map>

#include "stoker/core/error.h"
#include "stoker/ops/copy.h"
#include "stoker/ops/optim.h"

namespace stoker::optim {

Optimizer::Optimizer(NamedParameters params) : params_(std::move(params)) {
  STOKER_CHECK(!params_.empty(), "optimizer: no parameters given (is the model empty?)");
  for (const auto& [name, p] : params_) {
    STOKER_CHECK(p != nullptr, "optimizer: parameter '", name, "' is null");
    STOKER_CHECK(p->device() == params_[0].second->device(), "optimizer: parameter '", name,
                 "' is on ", p->device().str(), " but '", params_[0].first, "' is on ",
                 params_[0].second->device().str(),
                 "; move the whole model with .to(device) before creating the optimizer");
  }
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p->zero_grad();
}

void Optimizer::gather(std::vector<Tensor>& values, std::vector<Tensor>& grads) const {
  for (const auto& [name, p] : params_) {
    if (!p->requires_grad) continue;
    values.push_back(p->value());
    grads.push_back(p->grad());
  }
}

std::vector<Tensor> Optimizer::make_state(const std::string& suffix) {
  std::vector<Tensor> out;
  for (const auto& [name, p] : params_)
    if (p->requires_grad) out.push_back(Tensor::zeros(p->shape(), DType::f32, p->device()));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [suffix, list] : state_lists_) {
    size_t i = 0;
    for (const auto& [name, p] : params_) {
      if (!p->requires_grad) continue;
      out.emplace_back(name + "." + suffix, (*list)[i++]);
    }
  }
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  for (auto& [name, t] : this->state()) {
    const auto it = by_name.find(name);
    STOKER_CHECK(it != by_name.end(), describe(), ": optimizer state '", name,
                 "' missing from the checkpoint (was it saved with another optimizer?)");
    STOKER_CHECK(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(), describe(),
                 ": optimizer state '", name, "' is ", it->second.str(),
                 " in the checkpoint, "
                 "expected ",
                 t.str());
    ops::copy(t, it->second.device() == t.device() ? it->second : it->second.to(t.device()));
  }
}

void Optimizer::step() {
  update();
  std::vector<nn::Parameter*> ps;
  ps.reserve(params_.size());
  for (const auto& [name, p] : params_)
    if (p->requires_grad) ps.push_back(p);
  nn::refresh_compute_copies(ps);
}

SGD::SGD(NamedParameters params, SgdOptions options)
    : Optimizer(std::move(params)), options_(options) {
  lr_ = options.lr;
  STOKER_CHECK(!options.nesterov || (options.momentum > 0.0f && options.dampening == 0.0f),
               "SGD: Nesterov momentum requires momentum > 0 and dampening = 0");
  if (options_.momentum != 0.0f) {
    momentum_ = make_state("momentum_buffer");
    state_lists_.emplace_back("momentum_buffer", &momentum_);
  }
}

void SGD::update() {
  std::vector<Tensor> values, grads;
  gather(values, grads);
  ops::sgd_step(values, grads, momentum_,
                {.lr = lr_,
                 .momentum = options_.momentum,
                 .dampening = options_.dampening,
                 .weight_decay = options_.weight_decay,
                 .nesterov = options_.nesterov,
                 .first_step = steps_ == 0},
                found_inf_);
  ++steps_;
}

std::string SGD::describe() const {
  return core::detail::str("SGD(lr=", lr_, ", momentum=", options_.momentum,
                           options_.nesterov ? ", nesterov" : "",
                           ", weight_decay=", options_.weight_decay, ")");
}

AdamW::AdamW(NamedParameters params, AdamWOptions options)
    : Optimizer(std::move(params)), options_(options) {
  lr_ = options.lr;
  exp_avg_ = make_state("exp_avg");
  exp_avg_sq_ = make_state("exp_avg_sq");
  state_lists_.emplace_back("exp_avg", &exp_avg_);
  state_lists_.emplace_back("exp_avg_sq", &exp_avg_sq_);
  step_state_ = ops::adamw_step_state_create(params_[0].second->device());
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() {
  auto out = Optimizer::state();
  out.emplace_back("step_state", step_state_);
  return out;
}

int64_t AdamW::applied_steps() const { return ops::adamw_step_state_steps(step_state_); }

void AdamW::update() {
  std::vector<Tensor> values, grads;
  gather(values, grads);
  ops::adamw_step(values, grads, exp_avg_, exp_avg_sq_,
                  {.lr = lr_,
                   .beta1 = options_.beta1,
                   .beta2 = options_.beta2,
                   .eps = options_.eps,
                   .weight_decay = options_.weight_decay,
                   .step = steps_ + 1},
                  found_inf_, step_state_);
  ++steps_;
}

std::string AdamW::describe() const {
  return core::detail::str("AdamW(lr=", lr_, ", betas=(", options_.beta1, ", ", options_.beta2,
                           "), eps=", options_.eps, ", weight_decay=", options_.weight_decay, ")");
}

}  // namespace stoker::optim
