// Containers: Sequential (children in order) and Residual (y = x + f(x), or f(x) + g(x) with a
// shortcut module g).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/nn/batchnorm2d.h"
#include "stoker/nn/module.h"

namespace stoker::nn {

// Runs children forward in order and backward in reverse. Child i's parameters are named
// "<i>.<name>", as in torch.nn.Sequential, or "<child name>.<name>" for a child added with a
// name (torch.nn.Sequential built from an OrderedDict; "layer1.0" gives "layer1.0.conv1.weight").
// An empty child name adds no name level (the child's names are the container's own, as a
// Checkpoint's): the caller keeps names unique.
//
// Selective recomputation (off by default; nn::set_selective_recompute turns it on for a whole
// tree): when the input of child j is the output of a run of children i..j-1 that can rebuild it
// cheaply — child i from its own saved state (GELU from its input), the rest from their input
// (Dropout with its recorded draw), see Module::output_recompute — and child j can give up its
// saved input (Linear, LayerNorm), child j releases it after its forward and the Sequential
// rebuilds it right before child j's backward. In a transformer MLP this drops the GELU
// output (4x the model width per token) from the saved activations for one elementwise kernel
// in backward. Runs do not cross container boundaries. Gradients are bit-identical.
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
  // The same under `name` instead of the child's index (see above).
  template <typename M>
  M& add(std::string name, std::unique_ptr<M> module) {
    M& ref = *module;
    add_module(std::move(name), std::move(module));
    return ref;
  }
  void add_module(std::string name, std::unique_ptr<Module> module);

  size_t size() const { return child_count(); }
  Module& operator[](size_t i) { return child(i); }
  // Replaces child i by wrap(child i), e.g. an nn::Checkpoint around it (nn::checkpoint_every).
  // wrap must return a module; names stay the same when it adds no name level.
  void wrap_child(size_t i,
                  const std::function<std::unique_ptr<Module>(std::unique_ptr<Module>)>& wrap);

  // This container's selective recomputation (see above); nn::set_selective_recompute sets it
  // on every Sequential of a tree.
  void set_selective_recompute(bool on) { selective_ = on; }
  bool selective_recompute() const { return selective_; }

  Tensor forward(const Tensor& x) override;
  // The children's forwards, the last one through forward_for_backward.
  void forward_for_backward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // The children's backwards, the first child's through backward_accumulate.
  Tensor backward_accumulate(const Tensor& dy, const std::function<Tensor()>& target) override;
  std::string describe() const override;

 private:
  // backward / backward_accumulate (target null: plain backward).
  Tensor backward_children(const Tensor& dy, const std::function<Tensor()>* target);
  bool selective_ = false;
  // Per child of the last saving forward: the first child of the run that rebuilds its released
  // input, or -1 (the child kept its input itself).
  std::vector<int> rebuild_from_;
  Tensor run_forward(const Tensor& x, bool need_output);
};

// Names of a Residual's two branches in parameter names; an empty name adds no level, so
// {.body = "", .shortcut = "downsample"} gives torchvision's block names ("conv1.weight",
// "downsample.0.weight").
struct ResidualNames {
  std::string body = "body";
  std::string shortcut = "shortcut";
};

// y = x + body(x); the body's output must have x's shape. dx = dy + body.backward(dy).
// The body's parameters are named "body.<name>".
//
// With a shortcut module (a ResNet block whose shape changes: 1x1 conv + BN):
// y = body(x) + shortcut(x), both outputs of one shape and dtype;
// dx = body.backward(dy) + shortcut.backward(dy). Parameters: the body's, then the shortcut's
// ("shortcut.<name>"). A null shortcut is the identity (the form above, with `names`).
// Saves nothing itself: the add's backward passes dy to both branches.
//
// Fused block tail (set_tail_relu(true), opt-in): y = relu(body(x) + shortcut(x)), the ResNet
// block's ReLU moved into the Residual (drop the nn::ReLU that followed it; it has no
// parameters, so every name stays). The body must be an nn::Sequential whose last child is an
// nn::BatchNorm2d without a fused activation (a ResNet body's last BN): the Residual runs the
// shortcut first, hands its output to that BatchNorm2d (BatchNorm2d::set_residual_tail), and runs
// the body, whose last op is then ops::batchnorm_forward_train with a residual, y =
// relu(bn(h) + shortcut(x)) in one pass (no separate add and ReLU passes). Backward: the body's
// backward starts with that batch norm's, which masks dy by y > 0 and also writes the mask's
// output dz for the residual; the Residual passes dz to the shortcut and adds the two input
// gradients as before. Same results as Residual then ReLU (bit for bit on the CPU), but the
// shortcut's backward now runs after the body's. Checkpointing: a Checkpoint around the whole
// block (or anything containing it) works; one around the tail BatchNorm2d alone is refused
// with an error at its recomputation.
class Residual : public Module {
 public:
  explicit Residual(std::unique_ptr<Module> body);
  Residual(std::unique_ptr<Module> body, std::unique_ptr<Module> shortcut,
           ResidualNames names = {});

  Tensor forward(const Tensor& x) override;
  // The body's (and shortcut's) forward_for_backward; no add.
  void forward_for_backward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;
  Module* shortcut() { return shortcut_; }

  // The fused block tail (see above); checks the body's form when turned on.
  void set_tail_relu(bool on);
  bool tail_relu() const { return tail_ != nullptr; }

 private:
  BatchNorm2d* tail_ = nullptr;  // the body's last BatchNorm2d with the fused tail, else null
  Tensor shortcut_forward(const Tensor& x);
  Module* body_ = nullptr;      // registered under ResidualNames::body
  Module* shortcut_ = nullptr;  // registered under ResidualNames::shortcut; null: identity
};

// Creates a module: nn::make<Linear>(784, 256).
template <typename M, typename... Args>
std::unique_ptr<M> make(Args&&... args) {
  return std::make_unique<M>(std::forward<Args>(args)...);
}

}  // namespace stoker::nn

// Activation checkpointing and selective recomputation: trading compute for activation memory
namespace stoker::nn {

class Checkpoint : public Module {
 public:
  explicit Checkpoint(std::unique_ptr<Module> body);

  // Runs the body without saving; keeps the input and the body's generator positions (nothing
  // when called inside another non-saving forward).
  Tensor forward(const Tensor& x) override;
  // Recomputes the body's forward with saving on, then returns body.backward(dy).
  Tensor backward(const Tensor& dy) override;

  std::string describe() const override;

  // The only child, registered under "": its names are the Checkpoint's, without a level.
  Module& body() { return *body_; }

 private:
  Module* body_ = nullptr;
  Tensor input_;  // the forward's input (undefined: nothing saved)
  std::vector<std::pair<Generator*, uint64_t>> generator_offsets_;  // before the forward
};

// Wraps child i of `seq` in a Checkpoint for every i with i % every == 0 (every = 1: all
// children; 2: children 0, 2, 4, ...), skipping children that already are Checkpoints. Meant
// for a Sequential of blocks (a transformer's layers, a ResNet's stages): each wrapped block
// then keeps only its input. Returns the number of children wrapped. Names do not change.
int checkpoint_every(Sequential& seq, int every);

// Turns selective recomputation on or off for every Sequential in the tree under `root`
// (Checkpoint and Residual bodies included).
void set_selective_recompute(Module& root, bool on);

}  // namespace stoker::nn
