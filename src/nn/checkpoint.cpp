// Checkpoint: forward without saving, backward = recompute with saving + backward.
//
// The invariant that makes gradients bit-identical: the recomputation sees exactly what the
// first forward saw — the same input tensor (kept by reference), the same parameter values
// (nothing steps between forward and backward), the same generator positions (rewound here) —
// and runs the same kernels, so every saved activation has the bits it would have had.
#include "stoker/nn/containers.h"

#include "stoker/core/error.h"

namespace stoker::nn {

Checkpoint::Checkpoint(std::unique_ptr<Module> body) {
  STOKER_CHECK(body != nullptr, "Checkpoint: null body");
  device_ = body->device();
  training_ = body->training();
  body_ = &register_module("", std::move(body));
}

Tensor Checkpoint::forward(const Tensor& x) {
  input_ = Tensor();
  generator_offsets_.clear();
  // Inside an enclosing non-saving forward (a nested Checkpoint): keep nothing. The enclosing
  // Checkpoint's recomputation calls this forward again with saving on.
  if (!saving_activations()) return body_->forward(x);
  input_ = x;
  body_->visit_generators("", [&](const std::string&, Generator& g) {
    generator_offsets_.emplace_back(&g, g.offset());
  });
  NoSaveScope no_save;
  return body_->forward(x);
}

Tensor Checkpoint::backward(const Tensor& dy) {
  STOKER_CHECK(input_.defined(), describe(),
               ": backward without a saving forward before it (each forward allows one backward, "
               "and a forward inside a NoSaveScope saves nothing)");
  std::vector<uint64_t> after;
  after.reserve(generator_offsets_.size());
  for (auto& [g, offset] : generator_offsets_) {
    after.push_back(g->offset());
    g->set_offset(offset);
  }
  {
    RecomputeScope recompute;
    body_->forward_for_backward(input_);  // only what the body saves: its last GEMM is skipped
  }
  for (size_t i = 0; i < generator_offsets_.size(); ++i)
    generator_offsets_[i].first->set_offset(after[i]);
  input_ = Tensor();
  generator_offsets_.clear();
  return body_->backward(dy);
}

std::string Checkpoint::describe() const { return "Checkpoint(" + body_->describe() + ")"; }

int checkpoint_every(Sequential& seq, int every) {
  STOKER_CHECK(every >= 1, "checkpoint_every: every = ", every,
               " must be >= 1 (1 checkpoints every child)");
  int wrapped = 0;
  for (size_t i = 0; i < seq.size(); i += static_cast<size_t>(every)) {
    if (dynamic_cast<Checkpoint*>(&seq[i]) != nullptr) continue;
    seq.wrap_child(i, [](std::unique_ptr<Module> m) -> std::unique_ptr<Module> {
      return std::make_unique<Checkpoint>(std::move(m));
    });
    ++wrapped;
  }
  return wrapped;
}

void set_selective_recompute(Module& root, bool on) {
  if (auto* seq = dynamic_cast<Sequential*>(&root)) seq->set_selective_recompute(on);
  root.visit_children([on](Module& child) { set_selective_recompute(child, on); });
}

}  // namespace stoker::nn
