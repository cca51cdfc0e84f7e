// The ranks meet twice per collective (post → meet → work on the others' buffers → meet → copy
// out): after the second meeting nobody reads another rank's buffers, so a rank may reuse or
// free its tensors as soon as its call returns, and the shared result buffer is only written
// after the next collective's first meeting, when every rank has finished copying from it.
#include "dist/thread_communicator.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/collective_kind.h"
#include "dist/host_reduce.h"
#include "stoker/core/error.h"

namespace stoker::dist {

namespace {

using Kind = detail::CollectiveKind;
using detail::kind_name;

struct Post {
  Kind kind = Kind::barrier;
  DType dtype = DType::u8;
  int64_t in_n = 0, out_n = 0;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  const void* in = nullptr;
  void* out = nullptr;
  const CollectiveRecord* rec = nullptr;  // the poster's record (sequence number, tag)

  bool same_call(const Post& o) const {
    return kind == o.kind && dtype == o.dtype && in_n == o.in_n && out_n == o.out_n && op == o.op &&
           root == o.root;
  }
  std::string str() const {
    std::string s = std::string(kind_name(kind)) + "(";
    if (kind == Kind::barrier) return s + ")";
    s += fmt::format("{} x {}", dtype_name(dtype), in_n);
    if (kind == Kind::all_reduce || kind == Kind::reduce_scatter)
      s += ", " + std::string(reduce_op_name(op));
    if (kind == Kind::broadcast) s += fmt::format(", root {}", root);
    return s + ")";
  }
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

struct ThreadGroup::State {
  int world = 1;
  ThreadGroupOptions options;
  mutable std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;
  int arrived = 0;
  std::vector<char> here, left;
  std::vector<uint64_t> last_seq;  // the last collective each rank reached
  bool aborted = false;
  std::string reason;
  std::vector<Post> posts;
  std::vector<uint8_t> result;

  void abort_locked(const std::string& why) {
    if (!aborted) {
      aborted = true;
      reason = why;
    }
    cv.notify_all();
  }

  [[noreturn]] void throw_aborted(int rank, const Post& p) const {
    STOKER_THROW("ThreadCommunicator: ", p.str(), " on rank ", rank, " was aborted: ", reason);
  }

  // Waits until every rank has arrived at this meeting. The last to arrive runs `on_complete`
  // under the lock before releasing the others.
  void meet(int rank, const Post& p, size_t result_bytes = 0) {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) throw_aborted(rank, p);
    const uint64_t gen = generation;
    here[static_cast<size_t>(rank)] = 1;
    if (p.rec) last_seq[static_cast<size_t>(rank)] = p.rec->seq;
    if (++arrived == world) {
      arrived = 0;
      std::fill(here.begin(), here.end(), 0);
      if (result.size() < result_bytes) result.resize(result_bytes);
      ++generation;
      cv.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(options.timeout_s));
    while (generation == gen) {
      if (aborted) throw_aborted(rank, p);
      for (int q = 0; q < world; ++q) {
        if (left[static_cast<size_t>(q)] && !here[static_cast<size_t>(q)]) {
          abort_locked(fmt::format(
              "rank {} left the group (its communicator was destroyed) while rank {} waited in {}",
              q, rank, p.str()));
          throw_aborted(rank, p);
        }
      }
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && generation == gen) {
        std::vector<int> missing;
        std::string last;
        for (int q = 0; q < world; ++q) {
          if (here[static_cast<size_t>(q)]) continue;
          missing.push_back(q);
          last += fmt::format("{}rank {} #{}", last.empty() ? "" : ", ", q,
                              last_seq[static_cast<size_t>(q)]);
        }
        const std::string why = fmt::format(
            "rank {} waited {:g} s (collective timeout) in {} for rank{}{} (world size {}), which "
            "had not reached it (the last collective each of them reached: {}): a rank failed, "
            "hangs, or called other collectives",
            rank, options.timeout_s, p.rec ? p.rec->str() : p.str(),
            missing.size() > 1 ? "s " : " ", rank_list(missing), world, last);
        abort_locked(why);
        STOKER_THROW("ThreadCommunicator: ", why);
      }
    }
  }

  // After the first meeting: every rank must have called the same collective.
  void check_same_call(int rank) const {
    const Post& mine = posts[static_cast<size_t>(rank)];
    for (int q = 0; q < world; ++q) {
      const Post& other = posts[static_cast<size_t>(q)];
      STOKER_CHECK(other.same_call(mine), "ThreadCommunicator: collective mismatch: rank ", rank,
                   " called ", mine.str(), " but rank ", q, " called ", other.str(),
                   "; every rank must issue the same collectives in the same order");
    }
  }
};

ThreadGroup::ThreadGroup(int world_size, ThreadGroupOptions options)
    : state_(std::make_unique<State>()) {
  STOKER_CHECK(world_size >= 1, "ThreadGroup: world_size ", world_size, " must be >= 1");
  STOKER_CHECK(options.timeout_s > 0, "ThreadGroup: timeout_s ", options.timeout_s,
               " must be positive");
  state_->world = world_size;
  state_->options = options;
  state_->here.assign(static_cast<size_t>(world_size), 0);
  state_->left.assign(static_cast<size_t>(world_size), 0);
  state_->last_seq.assign(static_cast<size_t>(world_size), 0);
  state_->posts.resize(static_cast<size_t>(world_size));
}

ThreadGroup::~ThreadGroup() = default;

int ThreadGroup::world_size() const { return state_->world; }

void ThreadGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->abort_locked(reason);
}

bool ThreadGroup::aborted() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->aborted;
}

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
    : Communicator(rank, group ? group->world_size() : 0), group_(std::move(group)) {
  configure_flight_recorder(group_->state_->options.flight_recorder);
}

ThreadCommunicator::~ThreadCommunicator() {
  ThreadGroup::State& s = *group_->state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.left[static_cast<size_t>(rank())] = 1;
  s.cv.notify_all();
}

std::string ThreadCommunicator::describe() const {
  return fmt::format("threads rank {}/{}", rank(), world_size());
}

void ThreadCommunicator::abort(const std::string& reason) {
  group_->abort(fmt::format("rank {} aborted: {}", rank(), reason));
}

void ThreadCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) {
  ThreadGroup::State& s = *group_->state_;
  const int r = rank(), w = world_size();
  const int64_t n = in.numel();
  const Post p{Kind::all_reduce, in.dtype(),           n, n, op, 0, in.data(),
               out.data(),       &current_collective()};
  s.posts[static_cast<size_t>(r)] = p;
  s.meet(r, p, in.nbytes());
  s.check_same_call(r);
  std::vector<const void*> srcs(static_cast<size_t>(w));
  for (int q = 0; q < w; ++q) srcs[static_cast<size_t>(q)] = s.posts[static_cast<size_t>(q)].in;
  detail::host_reduce(in.dtype(), op, srcs, s.result.data(), n * r / w, n * (r + 1) / w);
  s.meet(r, p);
  std::memcpy(out.data(), s.result.data(), out.nbytes());
}

void ThreadCommunicator::do_broadcast(const Tensor& t, int root) {
  ThreadGroup::State& s = *group_->state_;
  const int r = rank();
  const Post p{Kind::broadcast, t.dtype(),     t.numel(),
               t.numel(),       ReduceOp::sum, root,
               t.data(),        t.data(),      &current_collective()};
  s.posts[static_cast<size_t>(r)] = p;
  s.meet(r, p);
  s.check_same_call(r);
  if (r != root) std::memcpy(t.data(), s.posts[static_cast<size_t>(root)].in, t.nbytes());
  s.meet(r, p);
}

void ThreadCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  ThreadGroup::State& s = *group_->state_;
  const int r = rank(), w = world_size();
  const Post p{Kind::all_gather, in.dtype(), in.numel(),           out.numel(), ReduceOp::sum, 0,
               in.data(),        out.data(), &current_collective()};
  s.posts[static_cast<size_t>(r)] = p;
  s.meet(r, p);
  s.check_same_call(r);
  const size_t bytes = in.nbytes();
  for (int q = 0; q < w; ++q) {
    auto* dst = static_cast<uint8_t*>(out.data()) + static_cast<size_t>(q) * bytes;
    const void* src = s.posts[static_cast<size_t>(q)].in;
    if (dst != src) std::memmove(dst, src, bytes);
  }
  s.meet(r, p);
}

void ThreadCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  ThreadGroup::State& s = *group_->state_;
  const int r = rank(), w = world_size();
  const Post p{
      Kind::reduce_scatter, in.dtype(),           in.numel(), out.numel(), op, 0, in.data(),
      out.data(),           &current_collective()};
  s.posts[static_cast<size_t>(r)] = p;
  s.meet(r, p);
  s.check_same_call(r);
  // Rank r reduces chunk r straight into its output: other ranks read only their own chunks of
  // this rank's input, so an output inside the input's chunk r (in place) is safe.
  const size_t chunk = out.nbytes();
  std::vector<const void*> srcs(static_cast<size_t>(w));
  for (int q = 0; q < w; ++q)
    srcs[static_cast<size_t>(q)] = static_cast<const uint8_t*>(s.posts[static_cast<size_t>(q)].in) +
                                   static_cast<size_t>(r) * chunk;
  detail::host_reduce(in.dtype(), op, srcs, out.data(), 0, out.numel());
  s.meet(r, p);
}

void ThreadCommunicator::do_barrier() {
  ThreadGroup::State& s = *group_->state_;
  Post p{};
  p.rec = &current_collective();
  s.posts[static_cast<size_t>(rank())] = p;
  s.meet(rank(), p);
  s.check_same_call(rank());
}

void run_ranks(int world_size, const std::function<void(Communicator&)>& fn,
               ThreadGroupOptions options) {
  auto group = std::make_shared<ThreadGroup>(world_size, options);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      // The communicator outlives the catch: the abort below names the cause before the
      // destructor tells waiting ranks that this one left.
      ThreadCommunicator comm(group, r);
      try {
        fn(comm);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        group->abort(fmt::format("rank {} failed: {}", r, e.what()));
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        group->abort(fmt::format("rank {} failed with a non-standard exception", r));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace stoker::dist
