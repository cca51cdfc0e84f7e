// Dropout with a Philox mask that is a pure function of (seed, offset): nothing is stored, and
// the backward (or a recomputation) regenerates the same mask. Each training forward reserves
// a fresh offset range from the module's generator; evaluation mode is the identity.
// Saved for backward: the (seed, offset) of the draw — never a mask, never a tensor. The output
// can be rebuilt from the same input by replaying that draw (output_recompute() is from_input),
// which selective recomputation uses after a GELU (nn/checkpoint.h); an nn::Checkpoint rewinds
// the generator before recomputing, so the recomputed masks equal the first forward's.
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

class Dropout : public Module {
 public:
  // `seed` 0 draws one from the init generator (reproducible under nn::manual_seed).
  explicit Dropout(float p, uint64_t seed = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;
  OutputRecompute output_recompute() const override { return OutputRecompute::from_input; }
  Tensor recompute_output(const Tensor& x) override;

  float p() const { return p_; }
  // The generator (registered as "generator"): its position is saved in training checkpoints,
  // so a resumed run drops the same elements.
  Generator& generator() { return gen_; }

 private:
  float p_;
  Generator gen_;
  Generator::Draw last_{};
  bool last_was_training_ = false;
};

}  // namespace stoker::nn
