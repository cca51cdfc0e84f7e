// Module: a layer with an explicit forward and backward (DESIGN.md §4).
//
//   Tensor forward(const Tensor& x)   computes y and saves what backward needs;
//   Tensor backward(const Tensor& dy) returns dx and ADDS into its parameters' gradients,
//                                     then calls grad_ready() on each.
//
// backward must follow the forward whose activations it uses (one outstanding forward per
// module, as in Caffe/cuDNN). Containers (Sequential, Residual) run children forward in order
// and backward in reverse. Parameter names follow PyTorch's state_dict convention ("0.weight",
// "2.bias" inside a Sequential), so weight files load into the equivalent PyTorch model.
//
// Work runs on the current stream of the module's device. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/rng.h"
#include "stoker/core/tensor.h"
#include "stoker/nn/parameter.h"

namespace stoker::nn {

class Module {
 public:
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& dy) = 0;

  // Appends this module's parameters (and its children's), in registration order.
  virtual void collect_parameters(std::vector<Parameter*>& out);
  // Visits (name, parameter) pairs with PyTorch-style dotted names under `prefix`.
  virtual void visit_parameters(const std::string& prefix,
                                const std::function<void(const std::string&, Parameter&)>& fn);
  // Visits non-trainable state that belongs in weight files (BatchNorm running statistics).
  virtual void visit_buffers(const std::string& prefix,
                             const std::function<void(const std::string&, Tensor&)>& fn);

  // Visits the random generators whose positions belong in training checkpoints (Dropout), so
  // a resumed run draws the same masks.
  virtual void visit_generators(const std::string& prefix,
                                const std::function<void(const std::string&, Generator&)>& fn);

  // Training mode (dropout active, batch statistics) or evaluation mode.
  virtual void set_training(bool training);
  bool training() const { return training_; }

  // Moves parameters and buffers to `device`; later forwards expect inputs there.
  virtual void to(Device device);
  Device device() const { return device_; }

  // Short description: "Linear(in=784, out=256, bias)".
  virtual std::string describe() const = 0;

  // Convenience views built on the visitors.
  std::vector<Parameter*> parameters();
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  int64_t parameter_count();

 protected:
  bool training_ = true;
  Device device_ = Device::cpu();
};

// Process-wide generator for parameter initialization (like torch.manual_seed): modules draw
// their initial weights from it in construction order, so a seed reproduces a model.
Generator& init_generator();
void manual_seed(uint64_t seed);

// Initial parameter values (f32, on the CPU) drawn from init_generator():
// U(-bound, bound) and N(0, std^2).
Tensor init_uniform(const Shape& shape, float bound);
Tensor init_normal(const Shape& shape, float std);

}  // namespace stoker::nn
