#include "stoker/nn/linear.h"

#include <fmt/format.h>
#include <cmath>

#include "stoker/core/error.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/gemm.h"

namespace stoker::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  STOKER_CHECK(in_features > 0 && out_features > 0, "Linear(", in_features, ", ", out_features,
               "): feature counts must be positive");
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  weight_ = Parameter(init_uniform({out_, in_}, bound));
  register_parameter("weight", weight_);
  if (has_bias_) {
    bias_ = Parameter(init_uniform({out_}, bound));
    register_parameter("bias", bias_);
  }
}

void Linear::set_activation(Activation activation) {
  STOKER_CHECK(activation != Activation::relu, describe(),
               ": set_activation(Activation::relu) is not supported (the GEMM epilogue fuses "
               "GELU only); follow the Linear with an nn::ReLU");
  activation_ = activation;
  pre_ = Tensor();
  grad_is_preactivation_ = false;
}

void Linear::set_fp8(bool on, Fp8Options options) {
  if (!on) {
    fp8_.reset();
    return;
  }
  if (fp8_ && fp8_->input.options() == options) return;
  fp8_.emplace(Fp8State{.input = Fp8Scaling(core::Fp8Format::e4m3, options),
                        .weight = Fp8Scaling(core::Fp8Format::e4m3, options),
                        .grad_output = Fp8Scaling(core::Fp8Format::e5m2, options)});
}

int set_linear_fp8(Module& root, bool on, Fp8Options options) {
  int count = 0;
  if (auto* linear = dynamic_cast<Linear*>(&root)) {
    linear->set_fp8(on, options);
    ++count;
  }
  root.visit_children([&](Module& child) { count += set_linear_fp8(child, on, options); });
  return count;
}

Tensor Linear::forward(const Tensor& x) {
  STOKER_CHECK(x.defined() && x.rank() >= 1 && x.size(-1) == in_, describe(), ": input ",
               x.defined() ? x.str() : std::string("undefined"), " must end in ", in_, " features");
  STOKER_CHECK(x.device() == device_, describe(), " is on ", device_.str(), " but its input is ",
               x.str(), "; move the model with .to(device) or the batch with Tensor::to");
  STOKER_CHECK(core::is_float(x.dtype()), describe(), ": input ", x.str(),
               " must be f32, f16 or bf16");
  x_shape_ = x.shape();
  x_ = x.reshape({-1, in_});
  Shape out_shape = x_shape_;
  out_shape[out_shape.rank() - 1] = out_;
  if (fp8_) {
    const Tensor* bias = has_bias_ ? &bias_.compute_value(x.dtype()) : nullptr;
    const Tensor y = forward_fp8(x_, bias);
    x_ = Tensor();  // the backward reads the FP8 copies instead
    return y.reshape(out_shape);
  }
  // Mixed precision: a half input computes in its dtype (fp32 accumulation in the GEMM) with the
  // parameter's half copy of the fp32 master, which the optimizer refreshes after each step.
  w_compute_ = weight_.compute_value(x.dtype());
  Tensor y = Tensor::empty({x_.size(0), out_}, x.dtype(), device_);
  // The bias rides in the GEMM's epilogue (added in fp32 before y is rounded), in y's dtype
  // under mixed precision as autocast does (the half copy, refreshed with the weight's).
  const Tensor* bias = has_bias_ ? &bias_.compute_value(x.dtype()) : nullptr;
  grad_is_preactivation_ = false;
  if (activation_ == Activation::gelu) {
    // y = gelu(x W^T + b) with the pre-activation written beside it (the backward's input to
    // gelu'). The same epilogue runs whether or not it is kept, so a Checkpoint's
    // recomputation gives the first forward's bits.
    Tensor pre = Tensor::empty(y.shape(), y.dtype(), device_);
    ops::gemm(y, x_, w_compute_,
              {.trans_b = true, .bias = bias, .epilogue = ops::GemmEpilogue::gelu, .aux = &pre});
    pre_ = saving_activations() ? pre : Tensor();
  } else {
    ops::gemm(y, x_, w_compute_, {.trans_b = true, .bias = bias});
  }
  if (!saving_activations()) x_ = Tensor();  // inside a Checkpoint's forward: keep nothing
  return y.reshape(out_shape);
}

// Runs on every FP8 forward: the answer is cached per device, and the message (describe(), the
// device's description) is built only when it fails.
void Linear::check_fp8_device() const {
  STOKER_CHECK(ops::fp8_gemm_supported(device_), describe(), " runs its GEMMs in FP8, but ",
               core::describe_device(device_),
               " has no FP8 tensor cores (compute capability 8.9 or newer: Ada, Hopper); train "
               "in bf16 there (Precision::bf16, or set_fp8(false))");
}

Tensor Linear::forward_fp8(const Tensor& x2d, const Tensor* bias) {
  check_fp8_device();
  Fp8State& f = *fp8_;
  const bool save = saving_activations();
  const bool new_use = !recomputing();
  // The weight from its half compute copy under mixed precision (what the bf16 path reads; an
  // E4M3 code has fewer bits than either), else from the f32 master.
  const Tensor& w = weight_.compute_value(x2d.dtype());
  const Fp8Scaling::Cast xq = f.input.cast(x2d, true, save, new_use);
  const Fp8Scaling::Cast wq = f.weight.cast(w, true, save, new_use);
  Tensor y = Tensor::empty({x2d.size(0), out_}, x2d.dtype(), device_);
  grad_is_preactivation_ = false;
  if (activation_ == Activation::gelu) {
    Tensor pre = Tensor::empty(y.shape(), y.dtype(), device_);
    ops::gemm_fp8(
        y, xq.value, wq.value,
        {.trans_b = true, .bias = bias, .epilogue = ops::GemmEpilogue::gelu, .aux = &pre});
    pre_ = save ? pre : Tensor();
  } else {
    ops::gemm_fp8(y, xq.value, wq.value, {.trans_b = true, .bias = bias});
  }
  f.input_t = save ? xq.transposed : ops::Fp8Tensor{};
  f.weight_t = save ? wq.transposed : ops::Fp8Tensor{};
  f.rows = x2d.size(0);
  f.dtype = x2d.dtype();
  return y;
}

void Linear::save_fp8_operands(const Tensor& x2d) {
  check_fp8_device();
  Fp8State& f = *fp8_;
  const bool new_use = !recomputing();
  f.input_t = f.input.cast(x2d, false, true, new_use).transposed;
  f.weight_t = f.weight.cast(weight_.compute_value(x2d.dtype()), false, true, new_use).transposed;
  f.rows = x2d.size(0);
  f.dtype = x2d.dtype();
}

Tensor Linear::backward_fp8(const Tensor& dy2) {
  Fp8State& f = *fp8_;
  const bool weight_grad = weight_.requires_grad;
  // dy in E5M2 (gradients need range more than precision), as it is for dx and transposed for dW.
  const Fp8Scaling::Cast dq = f.grad_output.cast(dy2, true, weight_grad);
  if (weight_grad) {
    // dW [out, in] (+)= dy^T x: K-major operands dy^T [out, N] and x^T [in, N].
    float beta = 1.0f;
    const Tensor& dw = weight_.grad_for_write(beta);
    ops::gemm_fp8(dw, dq.transposed, f.input_t, {.trans_b = true, .beta = beta});
    weight_.grad_ready();
  }
  if (has_bias_ && bias_.requires_grad) {
    ops::bias_grad(bias_.grad(), dy2);
    bias_.grad_ready();
  }
  f.input_t = {};
  // dx [N, in] = dy W: K-major operands dy [N, out] and W^T [in, out].
  Tensor dx = Tensor::empty({dy2.size(0), in_}, dy2.dtype(), device_);
  Linear* p = producer_;
  if (p != nullptr && p->activation_ == Activation::gelu && p->pre_.defined() &&
      p->pre_.shape() == dx.shape() && p->pre_.dtype() == dx.dtype() &&
      p->pre_.device() == dx.device()) {
    ops::gemm_fp8(dx, dq.value, f.weight_t,
                  {.trans_b = true, .epilogue = ops::GemmEpilogue::dgelu, .aux = &p->pre_});
    p->grad_is_preactivation_ = true;
  } else {
    ops::gemm_fp8(dx, dq.value, f.weight_t, {.trans_b = true});
  }
  f.weight_t = {};
  return dx;
}

void Linear::forward_for_backward(const Tensor& x) {
  if (!saving_activations()) return;  // forward would keep nothing, and the output is not needed
  if (activation_ != Activation::none) {  // the pre-activation it saves needs the GEMM
    forward(x);
    return;
  }
  STOKER_CHECK(x.defined() && x.rank() >= 1 && x.size(-1) == in_ && x.device() == device_ &&
                   core::is_float(x.dtype()),
               describe(), ": input ", x.defined() ? x.str() : std::string("undefined"),
               " must be a float tensor on ", device_.str(), " ending in ", in_, " features");
  x_shape_ = x.shape();
  if (fp8_) return save_fp8_operands(x.reshape({-1, in_}));
  x_ = x.reshape({-1, in_});
  w_compute_ = weight_.compute_value(x.dtype());
}

Tensor Linear::backward(const Tensor& dy) {
  STOKER_CHECK(fp8_ ? fp8_->input_t.codes.defined() : x_.defined(), describe(),
               ": backward called before forward");
  const int64_t rows = fp8_ ? fp8_->rows : x_.size(0);
  const DType dtype = fp8_ ? fp8_->dtype : x_.dtype();
  STOKER_CHECK(dy.numel() % out_ == 0 && dy.numel() / out_ == rows, describe(), ": gradient ",
               dy.str(), " does not match the forward's input ", x_shape_);
  STOKER_CHECK(dy.dtype() == dtype, describe(), ": gradient ", dy.str(),
               " must have the forward's dtype ", dtype_name(dtype));
  Tensor dy2 = dy.reshape({-1, out_});  // from here on: the gradient of x W^T + b
  if (activation_ == Activation::gelu) {
    STOKER_CHECK(pre_.defined(), describe(), ": backward called before forward");
    if (!grad_is_preactivation_) {  // no consumer applied gelu' in its GEMM: apply it here
      Tensor g = Tensor::empty(dy2.shape(), dy2.dtype(), device_);
      ops::gelu_backward(g, dy2, pre_);
      dy2 = g;
    }
    pre_ = Tensor();
    grad_is_preactivation_ = false;
  }
  if (fp8_) return backward_fp8(dy2).reshape(x_shape_);
  const bool bias_grad = has_bias_ && bias_.requires_grad;
  if (weight_.requires_grad) {
    // dW (+)= dy^T x, written in fp32 straight from the GEMM (half inputs, fp32 accumulate);
    // the first micro-batch after zero_grad overwrites (beta 0), later ones accumulate. The
    // bias gradient, dy's column sums, comes from the same GEMM (its epilogue on the GPU reads
    // dy once for both); the GEMM writes it, so a later micro-batch's goes through a scratch
    // vector that is added on.
    float beta = 1.0f;
    const Tensor& dw = weight_.grad_for_write(beta);
    float bias_beta = 1.0f;
    const Tensor* db = bias_grad ? &bias_.grad_for_write(bias_beta) : nullptr;
    const Tensor scratch = db != nullptr && bias_beta != 0.0f
                               ? Tensor::empty(db->shape(), DType::f32, device_)
                               : Tensor();
    ops::gemm(dw, dy2, x_,
              {.trans_a = true, .beta = beta, .bias_grad = scratch.defined() ? &scratch : db});
    if (scratch.defined()) ops::axpy(*db, 1.0f, scratch);
    weight_.grad_ready();
    if (db != nullptr) bias_.grad_ready();
  } else if (bias_grad) {
    ops::bias_grad(bias_.grad(), dy2);
    bias_.grad_ready();
  }
  x_ = Tensor();  // consumed: the saved input is freed before dx is allocated
  Tensor dx = Tensor::empty({dy2.size(0), in_}, dy.dtype(), device_);
  Linear* p = producer_;
  if (p != nullptr && p->activation_ == Activation::gelu && p->pre_.defined() &&
      p->pre_.shape() == dx.shape() && p->pre_.dtype() == dx.dtype() &&
      p->pre_.device() == dx.device()) {
    // dx = (dy W) * gelu'(pre): the producer's activation backward in this GEMM's epilogue.
    ops::gemm(dx, dy2, w_compute_, {.epilogue = ops::GemmEpilogue::dgelu, .aux = &p->pre_});
    p->grad_is_preactivation_ = true;
  } else {
    ops::gemm(dx, dy2, w_compute_);
  }
  return dx.reshape(x_shape_);
}

bool Linear::release_saved_input() {
  if (fp8_ || !x_.defined()) return false;  // FP8: the codes it keeps are not an input to hand back
  x_ = Tensor();
  return true;
}

void Linear::restore_saved_input(const Tensor& x) {
  STOKER_CHECK(x.defined() && x.numel() == x_shape_.numel() && x.dtype() == w_compute_.dtype(),
               describe(), ": restored input ", x.defined() ? x.str() : std::string("undefined"),
               " does not match the forward's input ", x_shape_);
  x_ = x.reshape({-1, in_});
}

Module::OutputRecompute Linear::output_recompute() const {
  return activation_ != Activation::none && pre_.defined() ? OutputRecompute::from_own_state
                                                           : OutputRecompute::none;
}

Tensor Linear::recompute_output(const Tensor&) {
  STOKER_CHECK(activation_ != Activation::none && pre_.defined(), describe(),
               ": no saved pre-activation to recompute the output from");
  Tensor y = Tensor::empty(pre_.shape(), pre_.dtype(), device_);
  ops::gelu_forward(y, pre_);
  Shape out_shape = x_shape_;
  out_shape[out_shape.rank() - 1] = out_;
  return y.reshape(out_shape);
}

std::string Linear::describe() const {
  return fmt::format("Linear(in={}, out={}{}{}{})", in_, out_, has_bias_ ? ", bias" : "",
                     activation_ == Activation::gelu ? ", gelu" : "", fp8_ ? ", fp8" : "");
}

}  // namespace stoker::nn
