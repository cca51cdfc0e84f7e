// Embedding: a lookup table "weight" [num, dim] (init N(0, 1) as PyTorch). Input: i32/i64 ids of
// any shape; output: ids.shape + [dim] in f32, or in the compute dtype under mixed precision
// (set_compute_dtype: the lookup rounds the fp32 rows once; the gradient still accumulates in
// fp32).
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim);

  Tensor forward(const Tensor& ids) override;
  // Returns an undefined tensor: ids have no gradient.
  Tensor backward(const Tensor& dy) override;
  std::string describe() const override;
  void set_compute_dtype(DType dtype) override { output_dtype_ = dtype; }
  Parameter& weight() { return weight_; }

 private:
  int64_t num_, dim_;
  DType output_dtype_ = DType::f32;
  Parameter weight_;
  Tensor ids_;
};

}  // namespace stoker::nn
