// Containers: Sequential (children in order) and Residual (y = x + f(x)).
#pragma once

#include <memory>
#include <vector>

#include "stoker/nn/module.h"

namespace stoker::nn {

// Runs children forward in order and backward in reverse. Child i's parameters are named
// "<i>.<name>", as in torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() = default;
  template <typename... M>
  explicit Sequential(std::unique_ptr<M>... modules) {
    (add(std::move(modules)), ...);
  }

  // Appends a module; returns a reference to it for further configuration.
  template <typename M>
  M& add(std::unique_ptr<M> module) {
    M& ref = *module;
    add_module(std::move(module));
    return ref;
  }
  void add_module(std::unique_ptr<Module> module);

  size_t size() const { return children_.size(); }
  Module& operator[](size_t i) { return *children_.at(i); }

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void visit_parameters(const std::string& prefix,
                        const std::function<void(const std::string&, Parameter&)>& fn) override;
  void visit_buffers(const std::string& prefix,
                     const std::function<void(const std::string&, Tensor&)>& fn) override;
  void visit_generators(const std::string& prefix,
                        const std::function<void(const std::string&, Generator&)>& fn) override;
  void set_training(bool training) override;
  void to(Device device) override;
  std::string describe() const override;

 private:
  std::vector<std::unique_ptr<Module>> children_;
};

// y = x + body(x); the body's output must have x's shape. dx = dy + body.backward(dy).
// The body's parameters are named "body.<name>".
class Residual : public Module {
 public:
  explicit Residual(std::unique_ptr<Module> body);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void visit_parameters(const std::string& prefix,
                        const std::function<void(const std::string&, Parameter&)>& fn) override;
  void visit_buffers(const std::string& prefix,
                     const std::function<void(const std::string&, Tensor&)>& fn) override;
  void visit_generators(const std::string& prefix,
                        const std::function<void(const std::string&, Generator&)>& fn) override;
  void set_training(bool training) override;
  void to(Device device) override;
  std::string describe() const override;

 private:
  std::unique_ptr<Module> body_;
};

// Creates a module: nn::make<Linear>(784, 256).
template <typename M, typename... Args>
std::unique_ptr<M> make(Args&&... args) {
  return std::make_unique<M>(std::forward<Args>(args)...);
}

}  // namespace stoker::nn
