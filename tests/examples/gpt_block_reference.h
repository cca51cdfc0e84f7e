// The unfused pre-LayerNorm block that the GPT tests (CPU and GPU) compare GptBlock's fused
// residual add + LayerNorm with: ops::add then ln2.forward, ln2.backward then ops::add, run on
// the block's own modules (so every parameter gradient lands where the fused run's does).
#pragma once

#include "gpt_model.h"
#include "stoker/ops/elementwise.h"

namespace stoker::gpt::test_reference {

struct BlockStep {
  Tensor y, dx;  // the block's output and input gradient
};

// One forward and backward of `block` on x with output gradient dy, unfused; adds into the
// parameters' gradients as GptBlock::forward / backward do.
inline BlockStep unfused_block_step(GptBlock& block, const Tensor& x, const Tensor& dy) {
  const Tensor a = block.attn().forward(block.ln1().forward(x));
  const Tensor h = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::add(h, a, x);
  const Tensor y = block.mlp().forward(block.ln2().forward(h));
  ops::add(y, y, h);
  const Tensor dh = block.ln2().backward(block.mlp().backward(dy));
  ops::add(dh, dh, dy);
  const Tensor dx = block.ln1().backward(block.attn().backward(dh));
  ops::add(dx, dx, dh);
  return {y, dx};
}

}  // namespace stoker::gpt::test_reference
