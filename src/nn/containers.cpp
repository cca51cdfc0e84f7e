#include "stoker/nn/containers.h"

#include "stoker/core/error.h"
#include "stoker/ops/elementwise.h"

namespace stoker::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  if (name.empty()) return prefix;  // a child named "" adds no name level
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

void Sequential::add_module(std::unique_ptr<Module> module) {
  add_module(std::to_string(children_.size()), std::move(module));
}

void Sequential::add_module(std::string name, std::unique_ptr<Module> module) {
  STOKER_CHECK(module != nullptr, "Sequential::add: null module");
  if (module->device() != device_) module->to(device_);
  children_.push_back(std::move(module));
  names_.push_back(std::move(name));
}

void Sequential::wrap_child(
    size_t i, const std::function<std::unique_ptr<Module>(std::unique_ptr<Module>)>& wrap) {
  STOKER_CHECK(i < children_.size(), "Sequential::wrap_child: index ", i, " out of range (",
               children_.size(), " children)");
  std::unique_ptr<Module> wrapped = wrap(std::move(children_[i]));
  STOKER_CHECK(wrapped != nullptr, "Sequential::wrap_child: the wrapper returned no module");
  if (wrapped->device() != device_) wrapped->to(device_);
  children_[i] = std::move(wrapped);
}

Tensor Sequential::forward(const Tensor& x) { return run_forward(x, true); }

void Sequential::forward_for_backward(const Tensor& x) { run_forward(x, false); }

Tensor Sequential::run_forward(const Tensor& x, bool need_output) {
  // Not while a Checkpoint recomputes: the recomputed activations live only for this one
  // backward, so dropping and rebuilding them would cost elementwise passes for little memory.
  const bool selective = selective_ && saving_activations() && !recomputing();
  rebuild_from_.assign(selective ? children_.size() : 0, -1);
  int run = -1;  // first child of the run that can rebuild the current h; -1: none
  Tensor h = x;
  for (size_t i = 0; i < children_.size(); ++i) {
    Module& c = *children_[i];
    if (need_output || i + 1 < children_.size()) {
      h = c.forward(h);
    } else {
      c.forward_for_backward(h);
      h = Tensor();
    }
    if (!selective) continue;
    if (run >= 0 && c.release_saved_input()) rebuild_from_[i] = run;
    switch (c.output_recompute()) {
      case OutputRecompute::from_own_state:
        run = static_cast<int>(i);
        break;
      case OutputRecompute::from_input:
        break;  // extends the current run (if any)
      case OutputRecompute::none:
        run = -1;
        break;
    }
  }
  return h;
}

Tensor Sequential::backward(const Tensor& dy) {
  Tensor g = dy;
  for (size_t i = children_.size(); i-- > 0;) {
    if (i < rebuild_from_.size() && rebuild_from_[i] >= 0) {
      // Children rebuild_from_[i]..i-1 have not run their backward yet: their state is intact.
      const size_t from = static_cast<size_t>(rebuild_from_[i]);
      Tensor in = children_[from]->recompute_output(Tensor());
      for (size_t k = from + 1; k < i; ++k) in = children_[k]->recompute_output(in);
      children_[i]->restore_saved_input(in);
      rebuild_from_[i] = -1;
    }
    g = children_[i]->backward(g);
  }
  rebuild_from_.clear();
  return g;
}

void Sequential::collect_parameters(std::vector<Parameter*>& out) {
  for (auto& c : children_) c->collect_parameters(out);
}

void Sequential::visit_parameters(const std::string& prefix,
                                  const std::function<void(const std::string&, Parameter&)>& fn) {
  for (size_t i = 0; i < children_.size(); ++i)
    children_[i]->visit_parameters(join(prefix, names_[i]), fn);
}

void Sequential::visit_buffers(const std::string& prefix,
                               const std::function<void(const std::string&, Tensor&)>& fn) {
  for (size_t i = 0; i < children_.size(); ++i)
    children_[i]->visit_buffers(join(prefix, names_[i]), fn);
}

void Sequential::visit_generators(const std::string& prefix,
                                  const std::function<void(const std::string&, Generator&)>& fn) {
  for (size_t i = 0; i < children_.size(); ++i)
    children_[i]->visit_generators(join(prefix, names_[i]), fn);
}

void Sequential::visit_children(const std::function<void(Module&)>& fn) {
  for (auto& c : children_) fn(*c);
}

std::string Sequential::describe() const {
  std::string s = "Sequential(";
  for (size_t i = 0; i < children_.size(); ++i) s += (i ? ", " : "") + children_[i]->describe();
  return s + ")";
}

Residual::Residual(std::unique_ptr<Module> body) : Residual(std::move(body), nullptr) {}

Residual::Residual(std::unique_ptr<Module> body, std::unique_ptr<Module> shortcut,
                   ResidualNames names)
    : body_(std::move(body)), shortcut_(std::move(shortcut)), names_(std::move(names)) {
  STOKER_CHECK(body_ != nullptr, "Residual: null body");
  device_ = body_->device();
  if (shortcut_ && shortcut_->device() != device_) shortcut_->to(device_);
}

Tensor Residual::forward(const Tensor& x) {
  const Tensor fx = body_->forward(x);
  const Tensor sx = shortcut_ ? shortcut_->forward(x) : x;
  STOKER_CHECK(fx.shape() == sx.shape() && fx.dtype() == sx.dtype(), "Residual: the body ",
               body_->describe(), " maps ", x.str(), " to ", fx.str(), " but the ",
               shortcut_ ? "shortcut " + shortcut_->describe() + " maps it to " : "identity is ",
               sx.str(), "; both branches must give the same shape and dtype",
               shortcut_ ? "" : " (add a shortcut module, e.g. a strided 1x1 conv + BN)");
  Tensor y = Tensor::empty(fx.shape(), fx.dtype(), fx.device());
  ops::add(y, sx, fx);
  return y;
}

void Residual::forward_for_backward(const Tensor& x) {
  body_->forward_for_backward(x);
  if (shortcut_) shortcut_->forward_for_backward(x);
}

Tensor Residual::backward(const Tensor& dy) {
  // Reverse registration order: the shortcut's gradients become ready first.
  const Tensor dshort = shortcut_ ? shortcut_->backward(dy) : dy;
  const Tensor dbody = body_->backward(dy);
  Tensor dx = Tensor::empty(dshort.shape(), dshort.dtype(), dshort.device());
  ops::add(dx, dshort, dbody);
  return dx;
}

void Residual::collect_parameters(std::vector<Parameter*>& out) {
  body_->collect_parameters(out);
  if (shortcut_) shortcut_->collect_parameters(out);
}

void Residual::visit_parameters(const std::string& prefix,
                                const std::function<void(const std::string&, Parameter&)>& fn) {
  body_->visit_parameters(join(prefix, names_.body), fn);
  if (shortcut_) shortcut_->visit_parameters(join(prefix, names_.shortcut), fn);
}

void Residual::visit_buffers(const std::string& prefix,
                             const std::function<void(const std::string&, Tensor&)>& fn) {
  body_->visit_buffers(join(prefix, names_.body), fn);
  if (shortcut_) shortcut_->visit_buffers(join(prefix, names_.shortcut), fn);
}

void Residual::visit_generators(const std::string& prefix,
                                const std::function<void(const std::string&, Generator&)>& fn) {
  body_->visit_generators(join(prefix, names_.body), fn);
  if (shortcut_) shortcut_->visit_generators(join(prefix, names_.shortcut), fn);
}

void Residual::visit_children(const std::function<void(Module&)>& fn) {
  fn(*body_);
  if (shortcut_) fn(*shortcut_);
}

std::string Residual::describe() const {
  if (!shortcut_) return "Residual(" + body_->describe() + ")";
  return "Residual(" + body_->describe() + ", shortcut=" + shortcut_->describe() + ")";
}

}  // namespace stoker::nn
