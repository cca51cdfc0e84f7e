#include "dist/local_grad_sync.h"

#include "stoker/core/error.h"
#include "stoker/ops/elementwise.h"

namespace stoker::dist {

LocalGradSync::LocalGradSync(nn::Module& model) : LocalGradSync(model.named_parameters()) {}

LocalGradSync::LocalGradSync(std::vector<std::pair<std::string, nn::Parameter*>> params) {
  for (const auto& [name, p] : params) {
    STOKER_CHECK(p != nullptr, "LocalGradSync: parameter '", name, "' is null");
  }
  params_ = std::move(params);
}

std::vector<Tensor> LocalGradSync::step_gradients() const {
  std::vector<Tensor> grads;
  for (const auto& [name, p] : params_)
    if (p->requires_grad) grads.push_back(p->grad());
  return grads;
}

std::vector<std::pair<std::string, nn::Parameter*>> LocalGradSync::parameters() const {
  std::vector<std::pair<std::string, nn::Parameter*>> out;
  for (const auto& [name, p] : params_)
    if (p->requires_grad) out.emplace_back(name, p);
  return out;
}

Tensor LocalGradSync::total_norm(std::span<const Tensor> grads) { return ops::l2_norm(grads); }

}  // namespace stoker::dist
