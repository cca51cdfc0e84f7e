// Module: a layer with an explicit forward (saves what backward needs, while
// saving_activations()) and backward (returns dx, ADDS into its parameters' gradients, releases
// what its forward saved); one outstanding forward per module. Parameters, buffers, generators
// and children are registered in the constructor; every traversal (PyTorch state_dict names,
// to(device), checkpoints) is written once, here.
// Work runs on the current stream of the module's device. Not thread-safe.
// Details: docs/architecture.md#modules, docs/checkpointing.md#activation-checkpointing.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/rng.h"
#include "stoker/core/tensor.h"

// Parameter: a trainable tensor — the fp32 master value and its fp32 gradient.
namespace stoker::nn {

class Parameter {
 public:
  Parameter() = default;
  // `value` must be an f32 tensor; the gradient is allocated (zeroed) on the same device.
  explicit Parameter(Tensor value);

  const Tensor& value() const { return value_; }
  // The gradient (zeros after zero_grad()).
  const Tensor& grad() const;
  // For a backward that writes every element of the gradient with C = beta * C + ...: `beta` is
  // 0 when the gradient is logically zero (after zero_grad(), nothing written yet) — the GEMM
  // then overwrites instead of reading zeros — and 1 otherwise (micro-batches accumulate).
  const Tensor& grad_for_write(float& beta);
  Device device() const { return value_.device(); }
  const Shape& shape() const { return value_.shape(); }
  int64_t numel() const { return value_.numel(); }

  // Replaces the value (e.g. when loading weights); shape and dtype must match.
  void set_value(const Tensor& value);
  // Moves value and gradient to `device`.
  void to(Device device);
  // grad = 0. Lazy: no memset until someone reads grad(); a backward that overwrites the whole
  // gradient (grad_for_write) skips it, as PyTorch's set_to_none does.
  void zero_grad();
  // Re-points the gradient at `grad` (same shape/dtype/device): lets a gradient sync place
  // gradients inside a flat bucket buffer without copies.
  void set_grad_storage(const Tensor& grad);
  // Re-points the master value at `value` (same shape, f32, same device), keeping what it held
  // (copied in): lets ZeRO-1's sync hold the values as views of flat per-bucket buffers, so
  // that an optimizer shard updates contiguous slices and one all-gather restores every weight.
  void set_value_storage(const Tensor& value);

  // The value in `dtype` (f32: the master itself; f16/bf16: the refreshed half copy, cast now
  // if it is missing or stale). Same device as the value.
  const Tensor& compute_value(DType dtype);
  // The half copy, undefined until compute_value() asked for one.
  const Tensor& compute_copy() const { return compute_; }
  // The master was written in place: the half copy is stale until the next cast or refresh.
  void value_changed() { compute_fresh_ = false; }
  // Called after the copy was refreshed from the master (by refresh_compute_copies).
  void mark_compute_fresh() { compute_fresh_ = compute_.defined(); }
  // The half copy exists and holds the master's current value.
  bool compute_fresh() const { return compute_fresh_ && compute_.defined(); }

  // False for frozen parameters: backward skips their gradient, the optimizer skips them.
  bool requires_grad = true;

  // Called by modules once this backward pass's gradient is complete.
  void grad_ready();
  using Hook = std::function<void(Parameter&)>;
  void add_grad_ready_hook(Hook hook) { hooks_.push_back(std::move(hook)); }
  void clear_grad_ready_hooks() { hooks_.clear(); }

 private:
  Tensor value_;
  Tensor grad_;
  mutable bool grad_zero_pending_ = false;  // grad_ must read as zeros; memory not yet cleared
  Tensor compute_;  // half copy of value_ for mixed-precision compute (undefined: none)
  bool compute_fresh_ = false;
  std::vector<Hook> hooks_;
};

// Re-casts every existing half compute copy from its master in one multi-tensor launch per
// dtype (ops::cast_multi). Parameters without a copy are skipped.
void refresh_compute_copies(std::span<Parameter* const> params);

}  // namespace stoker::nn

namespace stoker::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  // A module registers references to its own members (see Registration), so it is neither
  // copied nor moved: build it in place or behind a pointer (nn::make).
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& dy) = 0;
  // backward(dy) with the input gradient ADDED into the tensor `target()` returns, which this
  // returns: a residual block adds its body's input gradient to its shortcut's this way. A
  // module that computes its input gradient in one pass adds it there (Conv2d: cuDNN's beta = 1),
  // which saves the separate add and the dx buffer; Sequential passes the request to its first
  // child. `target` is called once, when the input gradient is about to be written (so the
  // caller may compute it late: after this module's parameter gradients); the tensor it returns
  // must have the input's shape and dtype and be the caller's to overwrite. Default:
  // backward(dy), then ops::add into target().
  virtual Tensor backward_accumulate(const Tensor& dy, const std::function<Tensor()>& target);
  // Runs the forward only for what it saves for backward, when the caller does not need the
  // output (an nn::Checkpoint's recomputation: the body's output was used by the first forward).
  // What it saves, draws and changes is exactly what forward(x) would; only work that produces
  // nothing but the output may be skipped. Default: forward(x), output dropped. Linear skips its
  // GEMM; Sequential runs its last child this way, Residual its body (and no add).
  virtual void forward_for_backward(const Tensor& x) { forward(x); }

  // Traversal, written once here over what the modules registered (see Registration; no module
  // overrides it). Names are PyTorch state_dict names: a module's own entries are named
  // "<prefix>.<name>" ("<name>" under an empty prefix) in registration order, then each child's
  // follow in registration order under "<prefix>.<child name>"; a child registered under ""
  // adds no name level (an nn::Checkpoint's body, a ResNet block's Residual).
  //
  // Visits (name, parameter) pairs. The order is the optimizer's, the checkpoints' and the
  // bucketed gradient syncs' (which bucket in reverse of it).
  void visit_parameters(const std::string& prefix,
                        const std::function<void(const std::string&, Parameter&)>& fn);
  // Visits non-trainable state that belongs in weight files (BatchNorm running statistics).
  void visit_buffers(const std::string& prefix,
                     const std::function<void(const std::string&, Tensor&)>& fn);
  // Visits the random generators whose positions belong in training checkpoints (Dropout), so
  // a resumed run draws the same masks.
  void visit_generators(const std::string& prefix,
                        const std::function<void(const std::string&, Generator&)>& fn);
  // Calls fn on each direct child module in registration order, so settings that concern the
  // whole tree (nn::set_compute_dtype, nn::set_selective_recompute) reach every module.
  void visit_children(const std::function<void(Module&)>& fn);
  // Appends this module's parameters (and its children's) in visit_parameters order.
  void collect_parameters(std::vector<Parameter*>& out);

  // Training mode (dropout active, batch statistics) or evaluation mode; for this module and
  // every child.
  void set_training(bool training);
  bool training() const { return training_; }

  // Moves the registered parameters and buffers, and every child, to `device`; later forwards
  // expect inputs there.
  void to(Device device);
  Device device() const { return device_; }

  // Short description: "Linear(in=784, out=256, bias)".
  virtual std::string describe() const = 0;

  // Mixed precision: the dtype activations should have when the module produces them from
  // non-float inputs (Embedding's lookup). Modules fed float inputs follow their input's dtype
  // and ignore it. Set for a whole tree with nn::set_compute_dtype (the Trainer does).
  virtual void set_compute_dtype(DType) {}

  // Selective recomputation (nn/checkpoint.h): how the output of the last forward can be
  // rebuilt during backward instead of being kept by the module that consumes it.
  //   none            it cannot (the default);
  //   from_own_state  from what the module keeps for its own backward anyway (GELU keeps its
  //                   input, ReLU its output): recompute_output(Tensor()) rebuilds it;
  //   from_input      from its input alone, replayed exactly (Dropout reuses its recorded
  //                   draw): recompute_output(x) rebuilds it from the same input values.
  // The answer describes the last forward (a module that saved nothing says none). The rebuilt
  // output has the same bits as the forward's (one exception: a Linear with a fused GELU on the
  // GPU, whose forward GELU read the fp32 accumulator — within rounding, nn/linear.h);
  // recompute_output saves and draws nothing.
  enum class OutputRecompute { none, from_own_state, from_input };
  virtual OutputRecompute output_recompute() const { return OutputRecompute::none; }
  virtual Tensor recompute_output(const Tensor& x);
  // A module that saves its input for backward (Linear, LayerNorm) may give that reference up
  // after its forward and have it handed back, rebuilt, before its backward: returns false
  // (changing nothing) when the module does not support it or saved no input.
  virtual bool release_saved_input() { return false; }
  virtual void restore_saved_input(const Tensor& x);

  // Convenience views built on the visitors.
  std::vector<Parameter*> parameters();
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  int64_t parameter_count();

 protected:
  // Registration, in the constructor, in the order the names should appear. Parameters,
  // buffers and generators are the module's own members, registered by reference (they must
  // live as long as the module: members do); names are non-empty and unique among the module's
  // parameters and buffers (which share a weight file), and among its generators. An optional
  // member (Linear's bias without bias) is simply not registered.
  void register_parameter(std::string name, Parameter& parameter);
  void register_buffer(std::string name, Tensor& buffer);
  void register_generator(std::string name, Generator& generator);
  // Children are owned here; the returned reference lives as long as this module (keep it, or a
  // pointer, to call the child). The child is moved to this module's device. `name` is its name
  // level ("" adds none; dots are allowed: "layer1.0"); non-empty names are unique.
  template <typename M>
  M& register_module(std::string name, std::unique_ptr<M> child) {
    return static_cast<M&>(add_child(std::move(name), std::move(child)));
  }
  // The registered children, for containers that run them.
  size_t child_count() const { return children_.size(); }
  Module& child(size_t i) const;
  // Its registered name ("" for one registered without a name level).
  const std::string& child_name(size_t i) const;
  // Replaces child i by wrap(child i) under the same name (an nn::Checkpoint around it); the
  // result is moved to this module's device.
  void wrap_child_at(size_t i,
                     const std::function<std::unique_ptr<Module>(std::unique_ptr<Module>)>& wrap);

  bool training_ = true;
  Device device_ = Device::cpu();

 private:
  Module& add_child(std::string name, std::unique_ptr<Module> child);
  void check_new_name(const std::string& name, bool generator) const;

  std::vector<std::pair<std::string, Parameter*>> parameters_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Generator*>> generators_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

// Whether forwards on this thread save activations for backward (true unless a NoSaveScope is
// active). Modules test it in forward; containers and Checkpoint need not.
bool saving_activations();
// True while an nn::Checkpoint re-runs a forward for its backward: modules with side effects
// beyond their output (BatchNorm's running statistics) skip them, since the first forward
// already applied them.
bool recomputing();

// Forwards in this scope (this thread) save nothing: what an nn::Checkpoint's first forward
// and an evaluation pass use. Nests; restores the previous state on exit.
class NoSaveScope {
 public:
  NoSaveScope();
  ~NoSaveScope();
  NoSaveScope(const NoSaveScope&) = delete;
  NoSaveScope& operator=(const NoSaveScope&) = delete;

 private:
  bool saving_, recomputing_;
};

// Forwards in this scope save activations and see recomputing() == true: a Checkpoint's
// recomputation before its backward.
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool saving_, recomputing_;
};

// Process-wide generator for parameter initialization (like torch.manual_seed): modules draw
// their initial weights from it in construction order, so a seed reproduces a model.
Generator& init_generator();

// Calls set_compute_dtype(dtype) on `root` and every module below it.
void set_compute_dtype(Module& root, DType dtype);

void manual_seed(uint64_t seed);

// Initial parameter values (f32, on the CPU) drawn from init_generator():
// U(-bound, bound) and N(0, std^2).
Tensor init_uniform(const Shape& shape, float bound);
Tensor init_normal(const Shape& shape, float std);

}  // namespace stoker::nn
