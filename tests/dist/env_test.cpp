#include "stoker/dist/env.h"

#include <gtest/gtest.h>

#include <map>

#include "dist/tcp_communicator.h"
#include "dist_test_util.h"

namespace dist = stoker::dist;
using stoker::test::error_of;

namespace {

dist::DistEnv read(const std::map<std::string, std::string>& vars) {
  return dist::read_env([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string read_error(const std::map<std::string, std::string>& vars) {
  return error_of([&] { read(vars); });
}

}  // namespace

TEST(EnvTest, NothingSetIsOneProcess) {
  const dist::DistEnv e = read({});
  EXPECT_EQ(e.source, "none");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(EnvTest, TorchrunVariables) {
  const dist::DistEnv e = read({{"RANK", "5"},
                                {"WORLD_SIZE", "8"},
                                {"LOCAL_RANK", "1"},
                                {"LOCAL_WORLD_SIZE", "4"},
                                {"MASTER_ADDR", "node7"},
                                {"MASTER_PORT", "1234"}});
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.rendezvous_port, 1234);
}

TEST(EnvTest, UnderTorchrunsAgentTheRendezvousMovesOffItsStorePort) {
  std::map<std::string, std::string> vars = {{"RANK", "0"},
                                             {"WORLD_SIZE", "2"},
                                             {"MASTER_PORT", "29500"},
                                             {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  EXPECT_EQ(read(vars).rendezvous_port, 29501);
  vars["STOKER_RENDEZVOUS_PORT"] = "40000";
  EXPECT_EQ(read(vars).rendezvous_port, 40000);
  vars.erase("STOKER_RENDEZVOUS_PORT");
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_EQ(read(vars).rendezvous_port, 29500);
}

TEST(EnvTest, SlurmFallback) {
  const dist::DistEnv e = read({{"SLURM_PROCID", "6"},
                                {"SLURM_NTASKS", "8"},
                                {"SLURM_LOCALID", "2"},
                                {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                {"SLURM_JOB_NODELIST", "gpu[07-08],cpu1"}});
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(
      read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_NODELIST", "n1,n2"}}).master_addr,
      "n1");
  // An explicit MASTER_ADDR wins over the node list; torchrun's variables over SLURM's.
  EXPECT_EQ(read({{"SLURM_PROCID", "0"},
                  {"SLURM_NTASKS", "2"},
                  {"SLURM_JOB_NODELIST", "a[1-2]"},
                  {"MASTER_ADDR", "10.0.0.1"}})
                .master_addr,
            "10.0.0.1");
  EXPECT_EQ(read({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}})
                .source,
            "torchrun");
}

TEST(EnvTest, OpenMpiFallback) {
  const dist::DistEnv e = read({{"OMPI_COMM_WORLD_RANK", "3"},
                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.master_addr, "127.0.0.1");  // one node: rank 0 is here
  const std::string err = read_error({{"OMPI_COMM_WORLD_RANK", "3"},
                                      {"OMPI_COMM_WORLD_SIZE", "8"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_NE(err.find("MASTER_ADDR is not set"), std::string::npos) << err;
}

TEST(EnvTest, MalformedValuesNameTheVariable) {
  std::string e = read_error({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(e.find("RANK='x' is not an integer"), std::string::npos) << e;
  e = read_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(e.find("rank 2 is not in [0, world size 2)"), std::string::npos) << e;
  e = read_error({{"RANK", "0"}});
  EXPECT_NE(e.find("RANK and WORLD_SIZE must be set together"), std::string::npos) << e;
  e = read_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(e.find("MASTER_PORT 70000"), std::string::npos) << e;
  e = read_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}});
  EXPECT_NE(e.find("local rank 2"), std::string::npos) << e;
}

TEST(EnvTest, InitFromEnvWithoutALauncherIsOneCpuRank) {
  // The test runs without RANK & co (CTest does not set them).
  if (std::getenv("RANK") || std::getenv("SLURM_PROCID") || std::getenv("OMPI_COMM_WORLD_RANK"))
    GTEST_SKIP() << "launched by a job launcher";
  dist::DistContext ctx = dist::init_from_env({.backend = dist::Backend::tcp});
  EXPECT_EQ(ctx.comm->world_size(), 1);
  EXPECT_EQ(ctx.device, stoker::Device::cpu());
  const stoker::Tensor t = stoker::Tensor::from_floats({1, 2, 3}, {3});
  ctx.comm->all_reduce(t, dist::ReduceOp::avg);
  EXPECT_EQ(t.to_floats(), (std::vector<float>{1, 2, 3}));
  ctx.comm->barrier();
}
