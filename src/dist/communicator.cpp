#include "stoker/dist/communicator.h"

#include "stoker/core/error.h"

namespace stoker::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

Communicator::Communicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {
  STOKER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "Communicator: rank ", rank,
               " is not in [0, world_size = ", world_size, ")");
}

void Communicator::check_tensor(const char* op, const char* name, const Tensor& t) const {
  STOKER_CHECK(t.defined(), op, ": ", name, " is undefined");
  STOKER_CHECK(t.device() == device(), op, ": ", name, " ", t.str(), " must be on ", device().str(),
               " (", describe(), ")");
}

void Communicator::all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_tensor("all_reduce", "in", in);
  check_tensor("all_reduce", "out", out);
  STOKER_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel(), "all_reduce: out ",
               out.str(), " must match in ", in.str());
  if (in.numel() == 0) return;
  do_all_reduce(in, out, op);
}

void Communicator::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", "t", t);
  STOKER_CHECK(root >= 0 && root < world_size_, "broadcast: root ", root,
               " is not a rank of this group (world size ", world_size_, ")");
  if (t.numel() == 0) return;
  do_broadcast(t, root);
}

void Communicator::all_gather(const Tensor& in, const Tensor& out) {
  check_tensor("all_gather", "in", in);
  check_tensor("all_gather", "out", out);
  STOKER_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * world_size_,
               "all_gather: out ", out.str(), " must hold world_size (", world_size_,
               ") x the elements of in ", in.str());
  if (in.numel() == 0) return;
  do_all_gather(in, out);
}

void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_tensor("reduce_scatter", "in", in);
  check_tensor("reduce_scatter", "out", out);
  STOKER_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * world_size_,
               "reduce_scatter: in ", in.str(), " must hold world_size (", world_size_,
               ") x the elements of out ", out.str());
  if (out.numel() == 0) return;
  do_reduce_scatter(in, out, op);
}

void Communicator::barrier() { do_barrier(); }

}  // namespace stoker::dist
