// A layer written as a user writes one: forward, backward and describe, and its parts
// registered in the constructor — no traversal code of its own (nn::Module provides it all).
// Shared by tests/nn/module_test.cpp and tests/nn/module_gpu_test.cpp.
//
//   y = inner(x) + shift          inner: Linear(in, out); shift [out] (init 0.5)
//
// Registered: parameter "shift", buffer "marker" (f32 [out] filled with 7, unused by the math:
// state that must travel with the weights), generator "generator" (seed 1234) and child module
// "inner".
#pragma once

#include <memory>
#include <string>

#include "stoker/nn/linear.h"
#include "stoker/nn/module.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"

namespace stoker::test {

class ShiftedLinear : public nn::Module {
 public:
  ShiftedLinear(int64_t in, int64_t out) : out_(out), gen_(1234) {
    Tensor shift = Tensor::empty({out}, DType::f32, Device::cpu());
    ops::fill(shift, 0.5);
    shift_ = nn::Parameter(shift);
    marker_ = Tensor::empty({out}, DType::f32, Device::cpu());
    ops::fill(marker_, 7.0);
    register_parameter("shift", shift_);
    register_buffer("marker", marker_);
    register_generator("generator", gen_);
    inner_ = &register_module("inner", std::make_unique<nn::Linear>(in, out));
  }

  Tensor forward(const Tensor& x) override {
    Tensor y = inner_->forward(x);
    ops::add_bias(y.reshape({-1, out_}), shift_.value());
    return y;
  }
  Tensor backward(const Tensor& dy) override {
    if (shift_.requires_grad) {
      ops::bias_grad(shift_.grad(), dy.reshape({-1, out_}));
      shift_.grad_ready();
    }
    return inner_->backward(dy);
  }
  std::string describe() const override { return "ShiftedLinear(" + inner_->describe() + ")"; }

  nn::Parameter& shift() { return shift_; }
  const Tensor& marker() const { return marker_; }
  Generator& generator() { return gen_; }
  nn::Linear& inner() { return *inner_; }

 private:
  int64_t out_;
  nn::Parameter shift_;
  Tensor marker_;
  Generator gen_;
  nn::Linear* inner_ = nullptr;
};

}  // namespace stoker::test
