// NcclCommunicator in a build without CUDA: the class links, and using it says why it cannot
// work. (The real implementation is src/dist/cuda/nccl_communicator.cpp.)
#include "dist/nccl_communicator.h"
#include "stoker/core/error.h"

#if !STOKER_WITH_CUDA
namespace stoker::dist {

namespace {
[[noreturn]] void unavailable(const char* what) {
  STOKER_THROW(what, ": stoker was built without CUDA, so NCCL is not available",
               " (reconfigure with -DSTOKER_WITH_CUDA=ON, or use the tcp backend on the CPU)");
}
}  // namespace

NcclUniqueId NcclCommunicator::create_unique_id() { unavailable("NcclCommunicator"); }
std::string NcclCommunicator::version() { return "not built"; }

struct NcclCommunicator::Watchdog {};

NcclCommunicator::NcclCommunicator(const NcclUniqueId&, int rank, int world_size, Device device,
                                   NcclOptions options)
    : Communicator(rank, world_size), device_(device), options_(std::move(options)) {
  unavailable("NcclCommunicator");
}
NcclCommunicator::~NcclCommunicator() = default;
std::string NcclCommunicator::describe() const { return "nccl (not built)"; }
void NcclCommunicator::abort(const std::string&) {}
void NcclCommunicator::do_all_reduce(const Tensor&, const Tensor&, ReduceOp) {
  unavailable("all_reduce");
}
void NcclCommunicator::do_broadcast(const Tensor&, int) { unavailable("broadcast"); }
void NcclCommunicator::do_all_gather(const Tensor&, const Tensor&) { unavailable("all_gather"); }
void NcclCommunicator::do_reduce_scatter(const Tensor&, const Tensor&, ReduceOp) {
  unavailable("reduce_scatter");
}
void NcclCommunicator::do_barrier() { unavailable("barrier"); }

}  // namespace stoker::dist
#endif
