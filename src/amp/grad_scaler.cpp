#include "stoker/amp/precision.h"

#include <map>

#include "stoker/core/error.h"
#include "stoker/ops/layout.h"

namespace stoker::amp {

GradScaler::GradScaler(Device device, GradScalerOptions options) : options_(options) {
  STOKER_CHECK(options.init_scale > 0.0f && options.min_scale >= 0.0f &&
                   options.min_scale <= options.init_scale,
               "GradScaler: need init_scale > 0 (", options.init_scale,
               ") and 0 <= min_scale <= init_scale (", options.min_scale, ")");
  STOKER_CHECK(options.growth_factor > 1.0f && options.backoff_factor > 0.0f &&
                   options.backoff_factor < 1.0f,
               "GradScaler: need growth_factor > 1 (", options.growth_factor,
               ") and 0 < backoff_factor < 1 (", options.backoff_factor, ")");
  STOKER_CHECK(options.growth_interval >= 1 && options.hysteresis >= 1,
               "GradScaler: growth_interval (", options.growth_interval, ") and hysteresis (",
               options.hysteresis, ") must be >= 1");
  scale_ = Tensor::from_floats({options.init_scale}, {}, DType::f32, device);
  state_ = Tensor::from_vector<int32_t>({0, options.hysteresis, 0}, {3}, device);
  found_inf_ = Tensor::zeros({}, DType::f32, device);
}

void GradScaler::unscale(std::span<const Tensor> grads) {
  ops::fill(found_inf_, 0.0);
  ops::unscale_and_check(grads, scale_, found_inf_);
}

void GradScaler::update() {
  ops::update_scale(scale_, state_, found_inf_,
                    {.growth_factor = options_.growth_factor,
                     .backoff_factor = options_.backoff_factor,
                     .growth_interval = options_.growth_interval,
                     .hysteresis = options_.hysteresis,
                     .min_scale = options_.min_scale});
}

float GradScaler::scale_value() const { return static_cast<float>(scale_.item()); }

int32_t GradScaler::growth_tracker() const { return state_.to_vector<int32_t>()[0]; }

void GradScaler::check() const {
  const std::vector<int32_t> s = state_.to_vector<int32_t>();
  STOKER_CHECK_HINT(s[2] == 0,
                    "the gradients overflow fp16 at every scale: check the inputs and the "
                    "learning rate, clip gradients, or train in bf16 (no scaling needed)",
                    "GradScaler: the loss scale fell to its minimum (", options_.min_scale,
                    ") and gradients still overflow; training on would only skip steps");
}

std::vector<std::pair<std::string, Tensor>> GradScaler::state() {
  return {{"scale", scale_}, {"state", state_}};
}

void GradScaler::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  for (auto& [name, t] : this->state()) {
    const auto it = by_name.find(name);
    STOKER_CHECK(it != by_name.end(), "GradScaler: state '", name, "' missing from checkpoint");
    STOKER_CHECK(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(),
                 "GradScaler: state '", name, "' is ", it->second.str(), ", expected ", t.str());
    ops::copy(t, it->second.device() == t.device() ? it->second : it->second.to(t.device()));
  }
}

}  // namespace stoker::amp
