// LocalGradSync: the gradient synchronization of a single process (dist/grad_sync.h). Nothing
// is communicated: finish() does nothing, step_gradients() are the requires_grad parameters'
// gradients as backward accumulated them, and their norm is ops::l2_norm. The Trainer makes one
// over its model when TrainerOptions::grad_sync is null, so a single-process step runs the same
// code as a data-parallel one.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "stoker/dist/grad_sync.h"
#include "stoker/nn/module.h"

namespace stoker::dist {

class LocalGradSync final : public GradSync {
 public:
  // The parameters of `model`. Which of them require a gradient is read at every step, so a
  // parameter may be frozen or unfrozen between steps (unlike under the bucketed syncs).
  explicit LocalGradSync(nn::Module& model);
  explicit LocalGradSync(std::vector<std::pair<std::string, nn::Parameter*>> params);

  std::string describe() const override { return "local"; }
  Communicator* communicator() const override { return nullptr; }
  std::vector<Tensor> step_gradients() const override;
  Tensor total_norm(std::span<const Tensor> grads) override;
  void broadcast_parameters(int root = 0) override {}
  std::vector<std::pair<std::string, nn::Parameter*>> parameters() const override;

 protected:
  void finish_step() override {}

 private:
  std::vector<std::pair<std::string, nn::Parameter*>> params_;  // frozen ones too
};

}  // namespace stoker::dist
