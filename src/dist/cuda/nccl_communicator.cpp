// NcclCommunicator over NCCL (compiled only with CUDA; src/dist/nccl_unavailable.cpp stands in
// otherwise). Every call goes through STOKER_NCCL_CHECK; the device is made current around each
// call because NCCL launches on the current device of the calling thread.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "core/cuda_util.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "stoker/core/stream.h"
#include "stoker/dist/nccl_communicator.h"

namespace stoker::dist {

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes),
              "NcclUniqueId must hold NCCL_UNIQUE_ID_BYTES");

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

ncclComm_t comm_of(void* p) { return static_cast<ncclComm_t>(p); }

}  // namespace

NcclUniqueId NcclCommunicator::create_unique_id() {
  ncclUniqueId id;
  STOKER_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

std::string NcclCommunicator::version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, Device device)
    : Communicator(rank, world_size), device_(device) {
  STOKER_CHECK(device.is_cuda(), "NcclCommunicator: needs a CUDA device, got ", device.str());
  STOKER_CHECK_HINT(device.index < core::cuda_device_count(),
                    "with torchrun or `stoker launch`, start at most one process per visible GPU",
                    "NcclCommunicator: rank ", rank, " wants ", device.str(), " but ",
                    core::cuda_device_count(), " CUDA devices are visible");
  core::DeviceScope scope(device.index);
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof(nid));
  ncclComm_t comm = nullptr;
  STOKER_NCCL_CHECK(ncclCommInitRank(&comm, world_size, nid, rank));
  comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm_ || aborted_) return;  // ncclCommAbort already freed it
  core::DeviceScope scope(device_.index);
  ncclCommDestroy(comm_of(comm_));
}

std::string NcclCommunicator::describe() const {
  return core::detail::str("nccl rank ", rank(), "/", world_size(), " on ", device_.str());
}

void NcclCommunicator::abort(const std::string& reason) {
  if (!comm_ || aborted_) return;
  aborted_ = true;
  core::DeviceScope scope(device_.index);
  ncclCommAbort(comm_of(comm_));
}

void NcclCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) {
  STOKER_CHECK(!aborted_, "NcclCommunicator: all_reduce after abort()");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclAllReduce(in.data(), out.data(), static_cast<size_t>(in.numel()),
                                  nccl_dtype(in.dtype()), nccl_op(op), comm_of(comm_),
                                  core::cuda_stream(device_)));
}

void NcclCommunicator::do_broadcast(const Tensor& t, int root) {
  STOKER_CHECK(!aborted_, "NcclCommunicator: broadcast after abort()");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclBroadcast(t.data(), t.data(), static_cast<size_t>(t.numel()),
                                  nccl_dtype(t.dtype()), root, comm_of(comm_),
                                  core::cuda_stream(device_)));
}

void NcclCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  STOKER_CHECK(!aborted_, "NcclCommunicator: all_gather after abort()");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()),
                                  nccl_dtype(in.dtype()), comm_of(comm_),
                                  core::cuda_stream(device_)));
}

void NcclCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  STOKER_CHECK(!aborted_, "NcclCommunicator: reduce_scatter after abort()");
  core::DeviceScope scope(device_.index);
  STOKER_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()),
                                      nccl_dtype(in.dtype()), nccl_op(op), comm_of(comm_),
                                      core::cuda_stream(device_)));
}

void NcclCommunicator::do_barrier() {
  STOKER_CHECK(!aborted_, "NcclCommunicator: barrier after abort()");
  // NCCL has no barrier: a one-element all-reduce that every rank must join, then a wait.
  const Tensor one = Tensor::zeros({1}, DType::f32, device_);
  do_all_reduce(one, one, ReduceOp::sum);
  core::current_stream(device_).synchronize();
}

}  // namespace stoker::dist
