#include "stoker/nn/activation.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/ops/activation.h"
#include "stoker/ops/layout.h"

namespace stoker::nn {

namespace {
uint64_t pick_seed(uint64_t seed) {
  if (seed != 0) return seed;
  // A seed drawn from the init generator: reproducible under nn::manual_seed.
  const auto d = init_generator().reserve(4);
  return core::philox_block(d.seed, 1, d.offset).v[0] | (uint64_t{1} << 63);
}
}  // namespace

Dropout::Dropout(float p, uint64_t seed) : p_(p), gen_(pick_seed(seed)) {
  STOKER_CHECK(p >= 0.0f && p < 1.0f, "Dropout(p=", p, "): p must be in [0, 1)");
  register_generator("generator", gen_);
}

Tensor Dropout::forward(const Tensor& x) {
  last_was_training_ = training_ && p_ > 0.0f;
  if (!last_was_training_) return x;
  last_ = gen_.reserve(static_cast<uint64_t>(x.numel()));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::dropout_forward(y, x, p_, last_.seed, last_.offset);
  return y;
}

Tensor Dropout::backward(const Tensor& dy) {
  if (!last_was_training_) return dy;
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::dropout_backward(dx, dy, p_, last_.seed, last_.offset);
  return dx;
}

Tensor Dropout::recompute_output(const Tensor& x) {
  if (!last_was_training_) return x;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  ops::dropout_forward(y, x, p_, last_.seed, last_.offset);  // the forward's draw, replayed
  return y;
}

std::string Dropout::describe() const { return fmt::format("Dropout(p={:g})", p_); }

}  // namespace stoker::nn
