#include "stoker/nn/containers.h"

#include "stoker/core/error.h"
#include "stoker/core/op_listener.h"
#include "stoker/ops/elementwise.h"

namespace stoker::nn {

void Sequential::add_module(std::unique_ptr<Module> module) {
  add_module(std::to_string(size()), std::move(module));
}

void Sequential::add_module(std::string name, std::unique_ptr<Module> module) {
  STOKER_CHECK(module != nullptr, "Sequential::add: null module");
  register_module(std::move(name), std::move(module));
}

void Sequential::wrap_child(
    size_t i, const std::function<std::unique_ptr<Module>(std::unique_ptr<Module>)>& wrap) {
  STOKER_CHECK(i < size(), "Sequential::wrap_child: index ", i, " out of range (", size(),
               " children)");
  wrap_child_at(i, wrap);
}

Tensor Sequential::forward(const Tensor& x) { return run_forward(x, true); }

void Sequential::forward_for_backward(const Tensor& x) { run_forward(x, false); }

Tensor Sequential::run_forward(const Tensor& x, bool need_output) {
  // Not while a Checkpoint recomputes: the recomputed activations live only for this one
  // backward, so dropping and rebuilding them would cost elementwise passes for little memory.
  const bool selective = selective_ && saving_activations() && !recomputing();
  const size_t n = size();
  rebuild_from_.assign(selective ? n : 0, -1);
  int run = -1;  // first child of the run that can rebuild the current h; -1: none
  Tensor h = x;
  for (size_t i = 0; i < n; ++i) {
    Module& c = child(i);
    const core::ModuleScope scope(child_name(i));  // op timing: where the ops come from
    if (need_output || i + 1 < n) {
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

Tensor Sequential::backward(const Tensor& dy) { return backward_children(dy, nullptr); }

Tensor Sequential::backward_accumulate(const Tensor& dy, const std::function<Tensor()>& target) {
  if (size() == 0) return Module::backward_accumulate(dy, target);
  return backward_children(dy, &target);
}

Tensor Sequential::backward_children(const Tensor& dy, const std::function<Tensor()>* target) {
  Tensor g = dy;
  for (size_t i = size(); i-- > 0;) {
    if (i < rebuild_from_.size() && rebuild_from_[i] >= 0) {
      // Children rebuild_from_[i]..i-1 have not run their backward yet: their state is intact.
      const size_t from = static_cast<size_t>(rebuild_from_[i]);
      Tensor in = child(from).recompute_output(Tensor());
      for (size_t k = from + 1; k < i; ++k) in = child(k).recompute_output(in);
      child(i).restore_saved_input(in);
      rebuild_from_[i] = -1;
    }
    const core::ModuleScope scope(child_name(i));
    g = i == 0 && target != nullptr ? child(i).backward_accumulate(g, *target)
                                    : child(i).backward(g);
  }
  rebuild_from_.clear();
  return g;
}

std::string Sequential::describe() const {
  std::string s = "Sequential(";
  for (size_t i = 0; i < size(); ++i) s += (i ? ", " : "") + child(i).describe();
  return s + ")";
}

Residual::Residual(std::unique_ptr<Module> body) : Residual(std::move(body), nullptr) {}

Residual::Residual(std::unique_ptr<Module> body, std::unique_ptr<Module> shortcut,
                   ResidualNames names) {
  STOKER_CHECK(body != nullptr, "Residual: null body");
  device_ = body->device();  // the shortcut moves to the body's device
  body_ = &register_module(std::move(names.body), std::move(body));
  if (shortcut) shortcut_ = &register_module(std::move(names.shortcut), std::move(shortcut));
}

void Residual::set_tail_relu(bool on) {
  if (!on) {
    if (tail_ != nullptr) {
      tail_->set_residual_tail(false);
      tail_->set_activation(Activation::none);
    }
    tail_ = nullptr;
    return;
  }
  if (tail_ != nullptr) return;
  auto* body = dynamic_cast<Sequential*>(body_);
  BatchNorm2d* bn = body != nullptr && body->size() > 0
                        ? dynamic_cast<BatchNorm2d*>(&(*body)[body->size() - 1])
                        : nullptr;
  STOKER_CHECK(bn != nullptr, describe(),
               ": set_tail_relu needs a body that is an nn::Sequential ending in an "
               "nn::BatchNorm2d (a ResNet block's body); otherwise keep an nn::ReLU after the "
               "Residual");
  STOKER_CHECK(bn->activation() == Activation::none && !bn->residual_tail(), describe(),
               ": set_tail_relu: the body's last ", bn->describe(),
               " already has a fused activation or residual; the tail's ReLU comes after the "
               "residual add, so leave that BatchNorm2d plain");
  bn->set_activation(Activation::relu);
  bn->set_residual_tail(true);
  tail_ = bn;
}

Tensor Residual::shortcut_forward(const Tensor& x) {
  if (!shortcut_) return x;
  const core::ModuleScope scope(child_name(1));
  return shortcut_->forward(x);
}

Tensor Residual::forward(const Tensor& x) {
  if (tail_ != nullptr) {  // shortcut first: its output is the tail batch norm's residual
    tail_->set_residual(shortcut_forward(x));
    const core::ModuleScope scope(child_name(0));
    return body_->forward(x);
  }
  const Tensor fx = [&] {
    const core::ModuleScope scope(child_name(0));
    return body_->forward(x);
  }();
  const Tensor sx = [&] {
    if (!shortcut_) return x;
    const core::ModuleScope scope(child_name(1));
    return shortcut_->forward(x);
  }();
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
  if (tail_ != nullptr) {
    tail_->set_residual(shortcut_forward(x));
    const core::ModuleScope scope(child_name(0));
    body_->forward_for_backward(x);
    return;
  }
  body_->forward_for_backward(x);
  if (shortcut_) shortcut_->forward_for_backward(x);
}

Tensor Residual::backward(const Tensor& dy) {
  // dx = dshort + dbody, the body adding its input gradient into the shortcut's
  // (backward_accumulate: a body that starts with a convolution adds it in that convolution's
  // backward-data pass, with no separate add) wherever the shortcut's gradient is a tensor of
  // this block's own to overwrite.
  if (tail_ != nullptr) {
    // The body's backward starts with the tail batch norm's, which leaves dz — a tensor of its
    // own — for the shortcut: the shortcut runs once that is there, before the body's first
    // module writes its input gradient into the shortcut's.
    const size_t depth = core::module_stack().size();  // this block's level, for the shortcut
    const core::ModuleScope scope(child_name(0));
    return body_->backward_accumulate(dy, [&] {
      const Tensor dz = tail_->take_residual_grad();
      if (!shortcut_) return dz;
      const core::ModuleStackTruncate level(depth);
      const core::ModuleScope short_scope(child_name(1));
      return shortcut_->backward(dz);
    });
  }
  // Reverse registration order: the shortcut's gradients become ready first.
  if (shortcut_) {
    const Tensor dshort = [&] {
      const core::ModuleScope scope(child_name(1));
      return shortcut_->backward(dy);
    }();
    const core::ModuleScope scope(child_name(0));
    return body_->backward_accumulate(dy, [&] { return dshort; });
  }
  // The identity: dy is the caller's, so the sum goes to a tensor of its own.
  const Tensor dbody = [&] {
    const core::ModuleScope scope(child_name(0));
    return body_->backward(dy);
  }();
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::add(dx, dy, dbody);
  return dx;
}

std::string Residual::describe() const {
  const std::string tail = tail_ != nullptr ? ", relu" : "";
  if (!shortcut_) return "Residual(" + body_->describe() + tail + ")";
  return "Residual(" + body_->describe() + ", shortcut=" + shortcut_->describe() + tail + ")";
}

}  // namespace stoker::nn
