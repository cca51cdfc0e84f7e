#include "stoker/nn/parameter.h"

#include "stoker/core/error.h"
#include "stoker/ops/copy.h"

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
}

void Parameter::to(Device device) {
  if (device == value_.device()) return;
  value_ = value_.to(device);
  grad_ = grad_.to(device);
}

void Parameter::zero_grad() { ops::fill(grad_, 0.0); }

void Parameter::set_grad_storage(const Tensor& grad) {
  STOKER_CHECK(grad.defined() && grad.shape() == value_.shape() && grad.dtype() == DType::f32 &&
                   grad.device() == value_.device(),
               "Parameter::set_grad_storage: expected f32", value_.shape(), " on ",
               value_.device().str(), ", got ", grad.defined() ? grad.str() : "undefined");
  grad_ = grad;
}

void Parameter::grad_ready() {
  for (const Hook& h : hooks_) h(*this);
}

}  // namespace stoker::nn
