// Activation checkpointing and selective recomputation: trading compute for activation memory
// (docs/architecture.md#modules).
//
// Why: the activations a forward saves for backward grow with depth × batch × width and, in
// deep models, dominate the memory of a step (weights, gradients and optimizer state do not
// depend on the batch). Two ways to keep fewer of them:
//
// 1. nn::Checkpoint(body) — the body's forward runs inside a NoSaveScope: no module of the
//    body keeps anything, and the Checkpoint keeps only the body's input (a reference, not a
//    copy) and the positions of the body's random generators. Its backward re-runs the body's
//    forward from that input with saving on and the generators rewound (same dropout masks),
//    then runs the body's backward. The saved activations of the body exist only during its
//    own backward. The recomputation runs through Module::forward_for_backward: the body's
//    output is not needed, so its last Linear only saves its input (no GEMM) and a Residual
//    skips its add — for a transformer MLP block that is one GEMM of two. It also runs without
//    selective recomputation (the recomputed activations live for one backward only, so
//    rebuilding them again would cost passes for little memory). Cost: at most one more
//    forward of the body per step (≈ +1/3 of the step's FLOPs when everything is
//    checkpointed; ≈ +1/6 for MLP blocks, whose second GEMM is skipped). Gradients are
//    bit-identical to the plain run on the same device and dtype: the recomputation runs the same
//    kernels on the same inputs.
//    - Nesting: a Checkpoint inside a non-saving forward keeps nothing itself (the enclosing
//      Checkpoint's recomputation calls it again with saving on), so nested checkpoints cost
//      one more forward per level and keep one input per level.
//    - Side effects are not repeated: BatchNorm2d does not update its running statistics during
//      the recomputation (nn::recomputing()); generators end where the first forward left them.
//    - Parameter, buffer and generator names are the body's own: a Checkpoint adds no name
//      level (as torch.utils.checkpoint), so weight files and training checkpoints are the same
//      with and without checkpointing.
//    - Between a Checkpoint's forward and backward the body's parameters must not change (the
//      optimizer steps after the backward, so gradient accumulation is fine).
//
// 2. Selective recomputation — nn::set_selective_recompute(model, true) turns it on for every
//    Sequential in the tree (see Sequential in nn/containers.h): outputs that are cheap to
//    rebuild from state kept anyway (GELU's output from the input GELU keeps for its own
//    backward; LayerNorm's output from the input LayerNorm keeps, one normalization pass;
//    dropout, whose mask is never stored — it is regenerated from the Philox (seed, offset) of
//    the forward) are not kept by the layer that consumes them (Linear, LayerNorm) and are
//    rebuilt right before that layer's backward. Cost: one elementwise or row-normalization
//    kernel per rebuilt tensor; no GEMM is repeated. Gradients are bit-identical (except after
//    a Linear with a fused GELU on the GPU, nn/linear.h: within rounding there). In a block
//    x + Linear(GELU(Linear(LayerNorm(x)))) it keeps per token d + h values (x, kept by
//    LayerNorm by reference, and GELU's input) instead of 2d + 2h.
//
// Combined (issue #5's goal, >= 40 % lower peak for <= 20 % more step time): checkpoint every
// k-th block and turn selective recomputation on (checkpoint_every = 3, selective_recompute =
// true for 12 MLP blocks; stoker_checkpoint_bench's `every3+selective`, docs/benchmarks.md).
//
// What each layer saves (its header has the details): Linear its input (with a fused
// activation also its pre-activation); LayerNorm its input
// and per-row mean and 1/std (fp32); GELU its input; ReLU its output; Dropout nothing (a draw
// position); BatchNorm2d its input and per-channel statistics; Conv2d its input; MaxPool2d one
// byte per output (its input and output where ops::maxpool2d_argmax_supported says no);
// Embedding its ids; containers nothing.
//
// The TrainerOptions `checkpoint_every` and `selective_recompute` apply both to a model.
// Work runs on the current stream of the module's device. Not thread-safe.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "stoker/nn/containers.h"
#include "stoker/nn/module.h"

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
