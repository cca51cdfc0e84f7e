#include "stoker/dist/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>

#include "dist/flight_recorder.h"
#include "stoker/core/error.h"
#include "util/atomic_file.h"

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

Communicator::Communicator(int rank, int world_size)
    : rank_(rank), world_size_(world_size), recorder_(std::make_unique<FlightRecorder>()) {
  STOKER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "Communicator: rank ", rank,
               " is not in [0, world_size = ", world_size, ")");
}

namespace {

void copy_tag(std::array<char, CollectiveRecord::kTagBytes>& dst, std::string_view tag) {
  const size_t n = std::min(tag.size(), dst.size() - 1);
  std::memcpy(dst.data(), tag.data(), n);
  dst[n] = '\0';
}

}  // namespace

void Communicator::set_collective_tag(std::string_view tag) { copy_tag(tag_, tag); }

Communicator::~Communicator() = default;

const FlightRecorder& Communicator::flight_recorder() const { return *recorder_; }

void Communicator::mark_collective_started(uint64_t seq, int64_t t_ns) {
  recorder_->mark_started(seq, t_ns);
}

void Communicator::mark_collective_ended(uint64_t seq, CollectiveState state, int64_t t_ns) {
  recorder_->mark_ended(seq, state, t_ns);
}

void Communicator::configure_flight_recorder(const FlightRecorderOptions& options) {
  recorder_->reset(options.entries);
  recorder_options_ = options;
}

std::string Communicator::dump_flight_recorder(const std::string& reason,
                                               const std::string& path) const {
  std::filesystem::path target = path;
  if (target.empty()) {
    const std::string dir = flight_recorder_dir(recorder_options_);
    if (dir.empty()) return "";
    target = std::filesystem::path(dir) / ("rank" + std::to_string(rank_) + ".json");
  }
  if (target.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
  }
  const std::string json = recorder_->to_json(rank_, world_size_, describe(), reason);
  util::write_file_atomically(
      target, [&](int fd) { util::write_all(fd, json.data(), json.size(), target); });
  return target.string();
}

void Communicator::dump_flight_recorder_on_failure(const std::string& reason) const noexcept {
  try {
    const std::string written = dump_flight_recorder(reason);
    if (!written.empty())
      std::fprintf(stderr, "stoker: rank %d: flight recorder written to %s\n", rank_,
                   written.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker: rank %d: could not write the flight recorder: %s\n", rank_,
                 e.what());
  } catch (...) {
  }
}

template <class F>
void Communicator::issue(const char* op, const Tensor* t, const char* reduce_op, int root, F&& f) {
  CollectiveRecord& r = current_;
  r.seq = seq_->fetch_add(1, std::memory_order_relaxed) + 1;
  r.op = op;
  r.dtype = t ? t->dtype() : DType::u8;
  r.numel = t ? t->numel() : 0;
  r.bytes = t ? static_cast<int64_t>(t->nbytes()) : 0;
  r.reduce_op = reduce_op;
  r.root = root;
  r.tag = tag_;
  r.enqueue_ns = FlightRecorder::now_ns();
  const bool sync = completes_on_return();
  r.state = sync ? CollectiveState::started : CollectiveState::enqueued;
  r.start_ns = sync ? r.enqueue_ns : 0;
  r.end_ns = 0;
  recorder_->record(r);
  try {
    f();
  } catch (const std::exception& e) {
    recorder_->mark_ended(r.seq, CollectiveState::failed, FlightRecorder::now_ns());
    dump_flight_recorder_on_failure(e.what());
    throw;
  }
  if (sync) recorder_->mark_ended(r.seq, CollectiveState::completed, FlightRecorder::now_ns());
}

CollectiveTag::CollectiveTag(Communicator& comm, std::string_view tag) : comm_(comm) {
  copy_tag(previous_, comm.collective_tag());
  comm.set_collective_tag(tag);
}

CollectiveTag::CollectiveTag(Communicator& comm, std::string_view what, int64_t index)
    : comm_(comm) {
  copy_tag(previous_, comm.collective_tag());
  char buf[CollectiveRecord::kTagBytes];
  std::snprintf(buf, sizeof(buf), "%.*s %lld", static_cast<int>(what.size()), what.data(),
                static_cast<long long>(index));
  comm.set_collective_tag(buf);
}

CollectiveTag::~CollectiveTag() { comm_.set_collective_tag(previous_.data()); }

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
  issue("all_reduce", &in, reduce_op_name(op), -1, [&] { do_all_reduce(in, out, op); });
}

void Communicator::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", "t", t);
  STOKER_CHECK(root >= 0 && root < world_size_, "broadcast: root ", root,
               " is not a rank of this group (world size ", world_size_, ")");
  if (t.numel() == 0) return;
  issue("broadcast", &t, "", root, [&] { do_broadcast(t, root); });
}

void Communicator::all_gather(const Tensor& in, const Tensor& out) {
  check_tensor("all_gather", "in", in);
  check_tensor("all_gather", "out", out);
  STOKER_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * world_size_,
               "all_gather: out ", out.str(), " must hold world_size (", world_size_,
               ") x the elements of in ", in.str());
  if (in.numel() == 0) return;
  issue("all_gather", &in, "", -1, [&] { do_all_gather(in, out); });
}

void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  check_tensor("reduce_scatter", "in", in);
  check_tensor("reduce_scatter", "out", out);
  STOKER_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * world_size_,
               "reduce_scatter: in ", in.str(), " must hold world_size (", world_size_,
               ") x the elements of out ", out.str());
  if (out.numel() == 0) return;
  issue("reduce_scatter", &in, reduce_op_name(op), -1, [&] { do_reduce_scatter(in, out, op); });
}

void Communicator::barrier() {
  issue("barrier", nullptr, "", -1, [&] { do_barrier(); });
}

}  // namespace stoker::dist
