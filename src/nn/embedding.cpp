#include "stoker/nn/embedding.h"

#include <fmt/format.h>

#include "stoker/core/error.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/embedding.h"

namespace stoker::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim) : num_(num_embeddings), dim_(dim) {
  STOKER_CHECK(num_embeddings > 0 && dim > 0, "Embedding(", num_embeddings, ", ", dim,
               "): sizes must be positive");
  weight_ = Parameter(init_normal({num_, dim_}, 1.0f));
  register_parameter("weight", weight_);
}

Tensor Embedding::forward(const Tensor& ids) {
  STOKER_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, describe(),
               ": ids must be i32 or i64, got ", ids.str());
  ids_ = saving_activations() ? ids : Tensor();  // nothing kept inside a Checkpoint's forward
  std::vector<int64_t> dims(ids.shape().dims().begin(), ids.shape().dims().end());
  dims.push_back(dim_);
  Tensor y = Tensor::empty({ids.numel(), dim_}, output_dtype_, device_);
  ops::embedding_forward(y, ids, weight_.value());
  return y.reshape(Shape(std::span<const int64_t>(dims)));
}

Tensor Embedding::backward(const Tensor& dy) {
  STOKER_CHECK(ids_.defined(), describe(), ": backward called before forward");
  if (weight_.requires_grad) {
    ops::embedding_backward(weight_.grad(), dy.reshape({ids_.numel(), dim_}), ids_);
    weight_.grad_ready();
  }
  ids_ = Tensor();  // consumed
  return Tensor();
}

std::string Embedding::describe() const { return fmt::format("Embedding({}, {})", num_, dim_); }

}  // namespace stoker::nn
