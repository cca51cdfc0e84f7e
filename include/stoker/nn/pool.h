// Pooling layers (no parameters): MaxPool2d, AvgPool2d (count_include_pad=True, PyTorch's
// default) and GlobalAvgPool ([N, C, H, W] or [N, H, W, C] -> [N, C], the usual head of a CNN
// before Linear). Window semantics as ops/pool.h; a stride of 0 means "the kernel size", as
// PyTorch's stride=None. Not thread-safe.
#pragma once

#include "stoker/nn/module.h"
#include "stoker/ops/pool.h"

namespace stoker::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                     ops::Layout layout = ops::Layout::nchw);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;
  const ops::Pool2dParams& params() const { return params_; }

 private:
  ops::Pool2dParams params_;
  // What the backward needs: the argmax bytes (ops::maxpool2d_forward_argmax) where the device
  // and layout allow, else the input and output.
  Tensor argmax_;
  Shape x_shape_;
  Tensor x_, y_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                     ops::Layout layout = ops::Layout::nchw);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;
  const ops::Pool2dParams& params() const { return params_; }

 private:
  ops::Pool2dParams params_;
  Shape x_shape_;
  bool has_forward_ = false;
};

class GlobalAvgPool : public Module {
 public:
  explicit GlobalAvgPool(ops::Layout layout = ops::Layout::nchw) : layout_(layout) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;

 private:
  ops::Layout layout_;
  Shape x_shape_;
  bool has_forward_ = false;
};

}  // namespace stoker::nn
