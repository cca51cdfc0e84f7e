// Embedding: a lookup table "weight" [num, dim] (init N(0, 1) as PyTorch). Input: i32/i64 ids of
// any shape; output: ids.shape + [dim] in f32.
#pragma once

#include "stoker/nn/module.h"

namespace stoker::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim);

  Tensor forward(const Tensor& ids) override;
  // Returns an undefined tensor: ids have no gradient.
  Tensor backward(const Tensor& dy) override;
  void visit_parameters(const std::string& prefix,
                        const std::function<void(const std::string&, Parameter&)>& fn) override;
  std::string describe() const override;

 private:
  int64_t num_, dim_;
  Parameter weight_;
  Tensor ids_;
};

}  // namespace stoker::nn
