#include "stoker/nn/linear.h"

#include "stoker/core/error.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/layout.h"

namespace stoker::nn {

Fp8Scaling::Fp8Scaling(core::Fp8Format format, Fp8Options options)
    : format_(format), options_(options) {
  STOKER_CHECK(options.amax_history >= 1, "Fp8Options::amax_history is ", options.amax_history,
               "; it must be at least 1 (the number of past amax values the scale follows; 16 is "
               "usual)");
  STOKER_CHECK(options.margin >= 0 && options.margin < 64, "Fp8Options::margin is ", options.margin,
               "; it must be in [0, 64) (the scale is divided by 2^margin)");
}

Fp8Scaling::Cast Fp8Scaling::cast(const Tensor& x, bool value, bool transposed, bool new_use) {
  STOKER_CHECK(x.defined() && x.rank() == 2, "Fp8Scaling::cast: x is ",
               x.defined() ? x.str() : std::string("undefined"), "; expected a 2-D tensor");
  const Device device = x.device();
  if (!scale_.defined() || scale_.device() != device) {  // first use (or a moved layer)
    scale_ = Tensor::empty({}, DType::f32, device);
    history_ = Tensor::empty({options_.amax_history}, DType::f32, device);
    amax_ = Tensor::empty({}, DType::f32, device);
    ops::fill(scale_, 1.0);
    ops::fill(history_, 0.0);
    primed_ = false;
  }
  if (new_use || !primed_) {
    if (!primed_) {
      // No history yet: fit the scale to this tensor before quantizing it.
      const Tensor first = ops::max_abs(x);
      ops::copy(amax_, first);
      primed_ = true;
    }
    ops::fp8_update_scale(scale_, history_, amax_, format_, options_.margin);
  }
  Cast out;
  const Tensor scale_inv = Tensor::empty({}, DType::f32, device);
  if (value) out.value = {Tensor::empty(x.shape(), DType::u8, device), scale_inv, format_};
  if (transposed)
    out.transposed = {Tensor::empty({x.size(1), x.size(0)}, DType::u8, device), scale_inv, format_};
  ops::fp8_cast_transpose({.codes = value ? &out.value.codes : nullptr,
                           .codes_t = transposed ? &out.transposed.codes : nullptr,
                           .scale_inv = &scale_inv,
                           .amax = &amax_},
                          x, scale_, format_);
  return out;
}

}  // namespace stoker::nn
