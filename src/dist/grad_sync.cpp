#include "stoker/dist/grad_sync.h"

#include "stoker/core/error.h"
#include "stoker/optim/optimizer.h"

namespace stoker::dist {

int GradSync::rank() const {
  const Communicator* comm = communicator();
  return comm ? comm->rank() : 0;
}

int GradSync::world_size() const {
  const Communicator* comm = communicator();
  return comm ? comm->world_size() : 1;
}

void GradSync::finish() {
  struct SyncOnExit {
    GradSync* s;
    ~SyncOnExit() { s->sync_ = true; }
  } reset{this};
  finish_step();
}

void GradSync::check_optimizer(const optim::Optimizer& optimizer) const {
  // Only a ShardedGradSync slices the gradients the way a ShardedOptimizer updates them.
  STOKER_CHECK_HINT(
      optimizer.sharded_over() == nullptr,
      "use the dist::ShardedGradSync the optimizer was built over (TrainerOptions::grad_sync), "
      "or an optimizer over the whole parameters",
      "the optimizer ", optimizer.describe(),
      " updates this rank's slices of a dist::ShardedGradSync, but the gradient synchronization \"",
      describe(), "\" does not slice the gradients");
}

}  // namespace stoker::dist
