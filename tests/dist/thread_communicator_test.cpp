#include "dist/thread_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "stoker/ops/layout.h"
#include "test_util.h"

namespace dist = stoker::dist;
using dist::ReduceOp;
using stoker::DType;
using stoker::Tensor;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Rank r's input: element i = (r + 1) * ((i % 7) + 1), exact in every dtype used here.
Tensor rank_input(int r, int64_t n, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * ((i % 7) + 1));
  return Tensor::from_floats(v, {n}, dtype);
}

float expected(ReduceOp op, int world, int64_t i) {
  const float base = static_cast<float>((i % 7) + 1);
  switch (op) {
    case ReduceOp::sum:
      return base * static_cast<float>(world * (world + 1) / 2);
    case ReduceOp::avg:
      return base * static_cast<float>(world + 1) / 2.0f;
    case ReduceOp::max:
      return base * static_cast<float>(world);
    case ReduceOp::min:
      return base;
  }
  return 0;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const stoker::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ThreadCommunicatorTest, AllReduceEveryOpAndDtypeInAndOutOfPlace) {
  for (int world : {1, 3, 4}) {
    dist::run_ranks(world, [&](dist::Communicator& comm) {
      EXPECT_EQ(comm.world_size(), world);
      for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
          if (op == ReduceOp::avg && !stoker::core::is_float(dtype)) continue;
          const int64_t n = 37;  // not a multiple of the world size: uneven slices
          const Tensor in = rank_input(comm.rank(), n, dtype);
          const Tensor out = Tensor::zeros({n}, dtype);
          comm.all_reduce(in, out, op);
          const Tensor inplace = rank_input(comm.rank(), n, dtype);
          comm.all_reduce(inplace, op);
          const std::vector<float> a = out.to_floats(), b = inplace.to_floats();
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(a[i], expected(op, world, i))
                << dtype_name(dtype) << " " << reduce_op_name(op) << " world " << world;
            ASSERT_EQ(b[i], a[i]);
          }
          // The input of an out-of-place call is left alone.
          EXPECT_EQ(in.to_floats(), rank_input(comm.rank(), n, dtype).to_floats());
        }
      }
    });
  }
}

TEST(ThreadCommunicatorTest, BroadcastAllGatherReduceScatterBarrier) {
  const int world = 4;
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    const int r = comm.rank();
    for (int root : {0, 2}) {
      Tensor t = rank_input(r, 10, DType::i64);
      comm.broadcast(t, root);
      EXPECT_EQ(t.to_floats(), rank_input(root, 10, DType::i64).to_floats());
    }
    const Tensor in = rank_input(r, 5, DType::f32);
    const Tensor gathered = Tensor::zeros({world * 5}, DType::f32);
    comm.all_gather(in, gathered);
    const std::vector<float> g = gathered.to_floats();
    for (int q = 0; q < world; ++q)
      for (int i = 0; i < 5; ++i) EXPECT_EQ(g[q * 5 + i], (q + 1) * ((i % 7) + 1));
    // In place: rank r's input is chunk r of the output.
    const Tensor buf = Tensor::zeros({world * 5}, DType::f32);
    stoker::ops::copy(buf.slice(r * 5, r * 5 + 5), in);
    comm.all_gather(buf.slice(r * 5, r * 5 + 5), buf);
    EXPECT_EQ(buf.to_floats(), g);

    const Tensor big = rank_input(r, world * 6, DType::f32);
    const Tensor mine = Tensor::zeros({6}, DType::f32);
    comm.reduce_scatter(big, mine, ReduceOp::sum);
    const std::vector<float> m = mine.to_floats();
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(m[i], expected(ReduceOp::sum, world, r * 6 + i));
    comm.barrier();
  });
}

TEST(ThreadCommunicatorTest, EveryRankGetsTheSameBits) {
  const int world = 3;
  std::vector<std::vector<float>> results(world);
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    const Tensor t = stoker::test::random_tensor({1000}, DType::f32, 10 + comm.rank());
    comm.all_reduce(t, ReduceOp::avg);
    results[comm.rank()] = t.to_floats();
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(ThreadCommunicatorTest, MismatchedCollectivesFailOnEveryRank) {
  std::atomic<int> failures{0};
  const std::string err = error_of([&] {
    dist::run_ranks(2, [&](dist::Communicator& comm) {
      try {
        const Tensor t = Tensor::zeros({comm.rank() == 0 ? 8 : 9}, DType::f32);
        comm.all_reduce(t);
      } catch (const stoker::Error&) {
        ++failures;
        throw;
      }
    });
  });
  EXPECT_NE(err.find("collective mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("f32 x 8"), std::string::npos) << err;
  EXPECT_NE(err.find("f32 x 9"), std::string::npos) << err;
  EXPECT_EQ(failures.load(), 2);
}

TEST(ThreadCommunicatorTest, AFailingRankMakesTheOthersFailAtOnce) {
  // The timeout is long: the others must fail because run_ranks aborts the group, not by
  // timing out.
  std::atomic<int> aborted{0};
  const auto start = Clock::now();
  const std::string err = error_of([&] {
    dist::run_ranks(
        4,
        [&](dist::Communicator& comm) {
          const Tensor t = Tensor::zeros({16}, DType::f32);
          comm.all_reduce(t);
          if (comm.rank() == 2) STOKER_THROW("rank 2 hit a bad batch");
          try {
            comm.all_reduce(t);
          } catch (const stoker::Error& e) {
            if (std::string(e.what()).find("rank 2 hit a bad batch") != std::string::npos)
              ++aborted;
            throw;
          }
        },
        {.timeout_s = 30.0});
  });
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_NE(err.find("rank 2 hit a bad batch"), std::string::npos) << err;  // the cause
  EXPECT_EQ(aborted.load(), 3);  // every other rank saw why
}

TEST(ThreadCommunicatorTest, AHangingRankTimesOutNamingIt) {
  auto group = std::make_shared<dist::ThreadGroup>(3, dist::ThreadGroupOptions{.timeout_s = 0.3});
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      dist::ThreadCommunicator comm(group, r);
      if (r == 1) {  // stuck (a deadlock, a slow disk): never joins the collective
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return;
      }
      errors[r] = error_of([&] { comm.all_reduce(Tensor::zeros({4}, DType::f32)); });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(seconds_since(start), 3.0);
  for (int r : {0, 2}) {
    // The first to time out names rank 1; the other fails through the abort with that reason.
    EXPECT_NE(errors[r].find("for rank 1 (world size 3)"), std::string::npos) << errors[r];
  }
}

TEST(ThreadCommunicatorTest, ARankThatLeavesFailsTheOthers) {
  auto group = std::make_shared<dist::ThreadGroup>(2, dist::ThreadGroupOptions{.timeout_s = 30});
  std::string error;
  const auto start = Clock::now();
  std::thread t0([&] {
    dist::ThreadCommunicator comm(group, 0);
    error = error_of([&] { comm.barrier(); });
  });
  std::thread t1([&] { dist::ThreadCommunicator comm(group, 1); });  // returns without a call
  t0.join();
  t1.join();
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_NE(error.find("rank 1 left the group"), std::string::npos) << error;
}

TEST(ThreadCommunicatorTest, RejectsDeviceAndShapeErrors) {
  dist::run_ranks(1, [&](dist::Communicator& comm) {
    const std::string e1 = error_of(
        [&] { comm.all_reduce(Tensor::zeros({4}, DType::f32), Tensor::zeros({5}, DType::f32)); });
    EXPECT_NE(e1.find("must match"), std::string::npos) << e1;
    const std::string e2 = error_of([&] { comm.broadcast(Tensor::zeros({4}, DType::f32), 3); });
    EXPECT_NE(e2.find("root 3"), std::string::npos) << e2;
    const std::string e3 = error_of(
        [&] { comm.all_gather(Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f16)); });
    EXPECT_NE(e3.find("all_gather"), std::string::npos) << e3;
  });
}
