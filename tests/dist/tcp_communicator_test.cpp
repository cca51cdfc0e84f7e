// TcpCommunicator with its ranks as threads of this process (each with its own sockets, exactly
// as separate processes would have); the launcher test runs it across real processes.
#include "dist/tcp_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "dist_test_util.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace dist = stoker::dist;
using dist::ReduceOp;
using stoker::DType;
using stoker::Tensor;
using stoker::test::error_of;

namespace {

// Runs fn(comm) on `world` threads, each with its own TcpCommunicator; returns each rank's
// error ("(no error)" when it succeeded).
std::vector<std::string> run_tcp(int world, double timeout_s,
                                 const std::function<void(dist::Communicator&)>& fn) {
  const int port = stoker::test::free_port();
  std::vector<std::future<std::string>> f;
  for (int r = 0; r < world; ++r) {
    f.push_back(std::async(std::launch::async, [=] {
      return error_of([&] {
        dist::TcpCommunicator comm(
            r, world,
            {.rendezvous = {.master_addr = "127.0.0.1", .master_port = port, .timeout_s = 10},
             .timeout_s = timeout_s});
        fn(comm);
      });
    }));
  }
  std::vector<std::string> errors;
  for (auto& x : f) errors.push_back(x.get());
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "(no error)") << "rank " << r;
}

Tensor rank_input(int r, int64_t n, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * ((i % 7) + 1));
  return Tensor::from_floats(v, {n}, dtype);
}

}  // namespace

TEST(TcpCommunicatorTest, EveryCollective) {
  const int world = 3;
  expect_no_errors(run_tcp(world, 10, [&](dist::Communicator& comm) {
    const int r = comm.rank();
    for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
      const Tensor t = rank_input(r, 1000, dtype);
      comm.all_reduce(t, ReduceOp::sum);
      const std::vector<float> v = t.to_floats();
      for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(v[i], 6.0f * ((i % 7) + 1));
      const Tensor m = rank_input(r, 9, dtype), out = Tensor::zeros({9}, dtype);
      comm.all_reduce(m, out, ReduceOp::max);
      EXPECT_EQ(out.to_floats(), rank_input(2, 9, dtype).to_floats());
    }
    Tensor b = rank_input(r, 5, DType::f32);
    comm.broadcast(b, 1);
    EXPECT_EQ(b.to_floats(), rank_input(1, 5, DType::f32).to_floats());
    const Tensor g = Tensor::zeros({world * 4}, DType::i32);
    comm.all_gather(rank_input(r, 4, DType::i32), g);
    const std::vector<float> gv = g.to_floats();
    for (int q = 0; q < world; ++q)
      for (int i = 0; i < 4; ++i) EXPECT_EQ(gv[q * 4 + i], (q + 1) * (i + 1));
    const Tensor chunk = Tensor::zeros({2}, DType::f32);
    comm.reduce_scatter(rank_input(r, world * 2, DType::f32), chunk, ReduceOp::avg);
    const std::vector<float> c = chunk.to_floats();
    for (int i = 0; i < 2; ++i) EXPECT_EQ(c[i], 2.0f * (((r * 2 + i) % 7) + 1));
    comm.barrier();
  }));
}

TEST(TcpCommunicatorTest, ReplicatedGradSyncOverTcp) {
  const int world = 2;
  std::vector<std::unique_ptr<stoker::nn::Sequential>> models;
  for (int r = 0; r < world; ++r) models.push_back(stoker::test::make_mlp(3 + r));
  expect_no_errors(run_tcp(world, 10, [&](dist::Communicator& comm) {
    stoker::nn::Sequential& m = *models[comm.rank()];
    dist::ReplicatedGradSync sync(comm, m, {.first_bucket_bytes = 256});
    m.forward(stoker::test::random_tensor({4, 8}, DType::f32, 70 + comm.rank()));
    m.backward(stoker::test::random_tensor({4, 3}, DType::f32, 80 + comm.rank()));
    sync.finish();
  }));
  EXPECT_EQ(stoker::test::weights_of(*models[0]), stoker::test::weights_of(*models[1]));
  for (size_t i = 0; i < models[0]->parameters().size(); ++i)
    EXPECT_EQ(models[0]->parameters()[i]->grad().to_floats(),
              models[1]->parameters()[i]->grad().to_floats());
}

TEST(TcpCommunicatorTest, MismatchIsReportedToEveryRank) {
  const auto errors = run_tcp(3, 10, [&](dist::Communicator& comm) {
    if (comm.rank() == 2) {
      comm.broadcast(Tensor::zeros({4}, DType::f32), 0);
    } else {
      comm.all_reduce(Tensor::zeros({4}, DType::f32));
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 2 called broadcast(f32 x 4, root 0)"), std::string::npos) << e;
  EXPECT_NE(errors[1].find("rank 0 reports"), std::string::npos) << errors[1];
}

TEST(TcpCommunicatorTest, ARankThatDiesFailsTheOthersQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_tcp(3, 30, [&](dist::Communicator& comm) {
    comm.barrier();
    if (comm.rank() == 1) {
      comm.abort("rank 1 failed");  // what a crash does to its sockets
      return;
    }
    comm.all_reduce(Tensor::zeros({4}, DType::f32));
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 5.0);
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("closed the connection"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("rank 0 reports"), std::string::npos) << errors[2];
}

TEST(TcpCommunicatorTest, AHangingRankTimesOut) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_tcp(2, 0.5, [&](dist::Communicator& comm) {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    comm.all_reduce(Tensor::zeros({4}, DType::f32));
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 4.0);
  EXPECT_NE(errors[0].find("before the timeout"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("waiting for rank 1"), std::string::npos) << errors[0];
}
