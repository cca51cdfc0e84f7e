#include "stoker/nn/module.h"

#include <vector>

#include "stoker/core/error.h"
#include "stoker/ops/layout.h"

namespace stoker::nn {

Parameter::Parameter(Tensor value) : value_(std::move(value)) {
  STOKER_CHECK(value_.defined() && value_.dtype() == DType::f32,
               "Parameter: the master value must be an f32 tensor, got ",
               value_.defined() ? value_.str() : std::string("an undefined tensor"));
  grad_ = Tensor::zeros(value_.shape(), DType::f32, value_.device());
}

void Parameter::set_value(const Tensor& value) {
  STOKER_CHECK(value.defined() && value.shape() == value_.shape() && value.dtype() == DType::f32,
               "Parameter::set_value: expected f32", value_.shape(), ", got ",
               value.defined() ? value.str() : std::string("an undefined tensor"));
  ops::copy(value_, value);
  value_changed();
}

const Tensor& Parameter::compute_value(DType dtype) {
  if (dtype == DType::f32) return value_;
  STOKER_CHECK(dtype == DType::f16 || dtype == DType::bf16,
               "Parameter::compute_value: ", dtype_name(dtype),
               " is not a compute dtype (f32, f16 or bf16)");
  if (!compute_.defined() || compute_.dtype() != dtype || compute_.device() != value_.device()) {
    compute_ = Tensor::empty(value_.shape(), dtype, value_.device());
    compute_fresh_ = false;
  }
  if (!compute_fresh_) {
    ops::cast(compute_, value_);
    compute_fresh_ = true;
  }
  return compute_;
}

void Parameter::to(Device device) {
  if (device == value_.device()) return;
  value_ = value_.to(device);
  grad_ = grad_.to(device);
  compute_ = Tensor();
  compute_fresh_ = false;
}

void Parameter::zero_grad() { grad_zero_pending_ = true; }

const Tensor& Parameter::grad() const {
  if (grad_zero_pending_) {
    ops::fill(grad_, 0.0);
    grad_zero_pending_ = false;
  }
  return grad_;
}

const Tensor& Parameter::grad_for_write(float& beta) {
  beta = grad_zero_pending_ ? 0.0f : 1.0f;
  grad_zero_pending_ = false;
  return grad_;
}

void Parameter::set_grad_storage(const Tensor& grad) {
  STOKER_CHECK(grad.defined() && grad.shape() == value_.shape() && grad.dtype() == DType::f32 &&
                   grad.device() == value_.device(),
               "Parameter::set_grad_storage: expected f32", value_.shape(), " on ",
               value_.device().str(), ", got ", grad.defined() ? grad.str() : "undefined");
  grad_ = grad;
}

void Parameter::set_value_storage(const Tensor& value) {
  STOKER_CHECK(value.defined() && value.shape() == value_.shape() && value.dtype() == DType::f32 &&
                   value.device() == value_.device(),
               "Parameter::set_value_storage: expected f32", value_.shape(), " on ",
               value_.device().str(), ", got ", value.defined() ? value.str() : "undefined");
  if (value.data() != value_.data()) ops::copy(value, value_);
  value_ = value;
  value_changed();
}

void Parameter::grad_ready() {
  for (const Hook& h : hooks_) h(*this);
}

void refresh_compute_copies(std::span<Parameter* const> params) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    std::vector<Tensor> dsts, srcs;
    std::vector<Parameter*> refreshed;
    for (Parameter* p : params) {
      if (!p->compute_copy().defined() || p->compute_copy().dtype() != dtype) continue;
      dsts.push_back(p->compute_copy());
      srcs.push_back(p->value());
      refreshed.push_back(p);
    }
    if (dsts.empty()) continue;
    ops::cast_multi(dsts, srcs);
    for (Parameter* p : refreshed) p->mark_compute_fresh();
  }
}

}  // namespace stoker::nn
