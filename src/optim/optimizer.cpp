#include "stoker/optim/optimizer.h"

#include <fmt/format.h>
#include <algorithm>
#include <map>

#include "stoker/core/error.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/optim.h"

namespace stoker::optim {

namespace {
// ", state=int8_blockwise(block=2048)" and the like; nothing for the default f32 state.
std::string describe_state(const StateFormat& f) {
  switch (f.dtype) {
    case StateDType::bf16:
      return f.stochastic_rounding ? ", state=bf16(stochastic rounding)" : ", state=bf16";
    case StateDType::int8_blockwise:
      return fmt::format(", state=int8_blockwise(block={}, f32 below {} elements)", f.block,
                         f.min_quantized_numel);
    default:
      return "";
  }
}
}  // namespace

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

void Optimizer::set_state_format(const StateFormat& format) {
  STOKER_CHECK(format.block >= 256 && format.block <= 4096 && format.block % 256 == 0,
               "optimizer: StateFormat::block ", format.block,
               " must be a multiple of 256 between 256 and 4096 (256 or 2048 are usual)");
  STOKER_CHECK(format.min_quantized_numel >= 0, "optimizer: StateFormat::min_quantized_numel ",
               format.min_quantized_numel, " must be >= 0");
  STOKER_CHECK(!format.stochastic_rounding || format.dtype == StateDType::bf16,
               "optimizer: stochastic_rounding applies to bf16 state only; set "
               "StateFormat::dtype = StateDType::bf16 or turn it off");
  format_ = format;
}

std::vector<ops::StateTensor>& Optimizer::make_state(const std::string& suffix, bool is_signed) {
  std::vector<ops::StateTensor> out;
  for (const auto& [name, p] : params_) {
    if (!p->requires_grad) continue;
    ops::StateTensor s;
    const int64_t n = p->value().numel();
    if (format_.dtype == StateDType::bf16) {
      s.values = Tensor::zeros(p->shape(), DType::bf16, p->device());
    } else if (format_.dtype == StateDType::int8_blockwise && n >= format_.min_quantized_numel) {
      // Zeros: absmax 0 and the code of 0.0 in the state's map (what quantizing zeros gives).
      const auto& map = ops::dynamic_map(is_signed);
      const auto zero = std::find(map.begin(), map.end(), 0.0f) - map.begin();
      s.values = Tensor::empty(p->shape(), DType::u8, p->device());
      ops::fill(s.values, static_cast<double>(zero));
      s.absmax =
          Tensor::zeros({ops::quantization_blocks(n, format_.block)}, DType::f32, p->device());
    } else {
      s.values = Tensor::zeros(p->shape(), DType::f32, p->device());
    }
    out.push_back(std::move(s));
  }
  state_lists_.emplace_back(suffix, std::move(out));
  return state_lists_.back().second;
}

std::vector<Tensor> Optimizer::values_of(const std::vector<ops::StateTensor>& states) {
  std::vector<Tensor> out;
  out.reserve(states.size());
  for (const auto& s : states) out.push_back(s.values);
  return out;
}

ops::StateStorage Optimizer::storage_for_step() const {
  uint64_t total = 0;
  for (const auto& [name, p] : params_)
    if (p->requires_grad) total += static_cast<uint64_t>(p->value().numel());
  return {.block = format_.block,
          .stochastic_rounding = format_.stochastic_rounding,
          .seed = format_.seed,
          .offset = static_cast<uint64_t>(steps_) * ((total + 3) / 4)};
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [suffix, list] : state_lists_) {
    size_t i = 0;
    for (const auto& [name, p] : params_) {
      if (!p->requires_grad) continue;
      const ops::StateTensor& s = list[i++];
      if (s.values.dtype() == DType::u8) {
        out.emplace_back(name + "." + suffix + ".codes", s.values);
        out.emplace_back(name + "." + suffix + ".absmax", s.absmax);
      } else {
        out.emplace_back(name + "." + suffix, s.values);
      }
    }
  }
  return out;
}

size_t Optimizer::state_bytes() {
  size_t bytes = 0;
  for (const auto& [name, t] : state()) bytes += t.nbytes();
  return bytes;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  for (auto& [name, t] : this->state()) {
    const auto it = by_name.find(name);
    STOKER_CHECK(it != by_name.end(), describe(), ": optimizer state '", name,
                 "' missing from the checkpoint (was it saved with another optimizer, or "
                 "another StateFormat?)");
    STOKER_CHECK(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(), describe(),
                 ": optimizer state '", name, "' is ", it->second.str(),
                 " in the checkpoint, "
                 "expected ",
                 t.str());
    ops::copy(t, it->second.device() == t.device() ? it->second : it->second.to(t.device()));
  }
}

void Optimizer::load_checkpoint_state(const TensorLoader& load) {
  std::vector<std::pair<std::string, Tensor>> loaded;
  for (auto& [name, t] : state()) loaded.emplace_back(name, load(name, t.device()));
  load_state(loaded);
}

void Optimizer::step() {
  copies_written_.clear();
  update();
  std::vector<nn::Parameter*> ps;
  ps.reserve(params_.size());
  for (const auto& [name, p] : params_)
    if (p->requires_grad &&
        std::find(copies_written_.begin(), copies_written_.end(), p) == copies_written_.end())
      ps.push_back(p);
  nn::refresh_compute_copies(ps);
}

void Optimizer::set_lr_tensor(const Tensor& lr) {
  STOKER_CHECK(!lr.defined() || supports_device_lr(), describe(),
               " cannot read its learning rate on the device (a CUDA-graph step needs it): use "
               "SGD, LARS or AdamW with f32 state, or train without TrainerOptions::cuda_graph");
  STOKER_CHECK(!lr.defined() || (lr.dtype() == DType::f32 && lr.numel() == 1),
               "Optimizer::set_lr_tensor: expected a rank-0 f32 tensor, got ", lr.str());
  lr_tensor_ = lr;
}

std::vector<Tensor> Optimizer::fused_compute_copies() {
  std::vector<Tensor> out;
  DType half = DType::f32;
  for (const auto& [name, p] : params_) {
    if (!p->requires_grad) continue;
    const Tensor& c = p->compute_copy();
    const bool take = p->compute_fresh() && (half == DType::f32 || c.dtype() == half);
    out.push_back(take ? c : Tensor());
    if (!take) continue;
    half = c.dtype();
    copies_written_.push_back(p);  // (skipped on overflow, the copy stays the master's value)
  }
  if (copies_written_.empty()) out.clear();
  return out;
}

SGD::SGD(NamedParameters params, SgdOptions options)
    : Optimizer(std::move(params)), options_(options) {
  lr_ = options.lr;
  STOKER_CHECK(!options.nesterov || (options.momentum > 0.0f && options.dampening == 0.0f),
               "SGD: Nesterov momentum requires momentum > 0 and dampening = 0");
  set_state_format(options_.state);
  if (options_.momentum != 0.0f) momentum_ = &make_state("momentum_buffer");
}

void SGD::update() {
  std::vector<Tensor> values, grads;
  gather(values, grads);
  const ops::SgdHyper h{.lr = lr_,
                        .momentum = options_.momentum,
                        .dampening = options_.dampening,
                        .weight_decay = options_.weight_decay,
                        .nesterov = options_.nesterov,
                        .first_step = steps_ == 0};
  if (momentum_ && compact_state())
    ops::sgd_step(values, grads, *momentum_, h, storage_for_step(), found_inf_);
  else
    ops::sgd_step(values, grads, momentum_ ? values_of(*momentum_) : std::vector<Tensor>{}, h,
                  found_inf_, lr_tensor_);
  ++steps_;
}

std::string SGD::describe() const {
  return fmt::format("SGD(lr={:g}, momentum={:g}{}, weight_decay={:g}{})", lr_, options_.momentum,
                     options_.nesterov ? ", nesterov" : "", options_.weight_decay,
                     describe_state(options_.state));
}

AdamW::AdamW(NamedParameters params, AdamWOptions options)
    : Optimizer(std::move(params)), options_(options) {
  lr_ = options.lr;
  set_state_format(options_.state);
  exp_avg_ = &make_state("exp_avg");
  exp_avg_sq_ = &make_state("exp_avg_sq", /*is_signed=*/false);
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
  const ops::AdamWHyper h{.lr = lr_,
                          .beta1 = options_.beta1,
                          .beta2 = options_.beta2,
                          .eps = options_.eps,
                          .weight_decay = options_.weight_decay,
                          .step = steps_ + 1};
  if (compact_state())
    ops::adamw_step(values, grads, *exp_avg_, *exp_avg_sq_, h, storage_for_step(), found_inf_,
                    step_state_);
  else  // the half compute copies written in the same pass
    ops::adamw_step(values, grads, values_of(*exp_avg_), values_of(*exp_avg_sq_), h, found_inf_,
                    step_state_, fused_compute_copies(), lr_tensor_);
  ++steps_;
}

std::string AdamW::describe() const {
  return fmt::format("AdamW(lr={:g}, betas=({:g}, {:g}), eps={:g}, weight_decay={:g}{})", lr_,
                     options_.beta1, options_.beta2, options_.eps, options_.weight_decay,
                     describe_state(options_.state));
}

}  // namespace stoker::optim
