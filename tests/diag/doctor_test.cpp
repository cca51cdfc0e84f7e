// stoker doctor's rules: static checks on a made-up machine, conclusions of made-up ablations.
#include "stoker/diag/doctor.h"

#include <gtest/gtest.h>

namespace diag = stoker::diag;
using diag::CheckStatus;

namespace {

diag::StaticInputs healthy_h200() {
  diag::StaticInputs in;
  in.built_with_cuda = true;
  in.cuda_devices = 1;
  in.cpu_count = 16;
  in.cpu = "Intel Xeon";
  in.self_pid = 100;
  in.libraries = {
      {"CUDA runtime", "13.0"}, {"cuBLASLt", "13.0.0"}, {"cuDNN", "9.14.0"}, {"NCCL", "2.28.3"}};
  in.gpus.nvml = true;
  in.gpus.status = "ok";
  in.gpus.driver = "580.159.04";
  in.gpus.cuda_driver = 13000;
  diag::GpuInfo g;
  g.index = 0;
  g.name = "NVIDIA H200";
  g.sm_clock_mhz = 1980;
  g.sm_clock_max_mhz = 1980;
  g.mem_clock_mhz = g.mem_clock_max_mhz = 3201;
  g.temperature_c = 40;
  g.temperature_slowdown_c = 90;
  g.clock_events = 0;
  g.persistence_mode = 1;
  g.ecc_mode = 1;
  g.ecc_uncorrected_volatile = g.ecc_uncorrected_aggregate = 0;
  g.pcie_gen = g.pcie_gen_max = 5;
  g.pcie_width = g.pcie_width_max = 16;
  g.memory_total = int64_t{140} << 30;
  g.memory_used = int64_t{1} << 29;
  g.processes = {{100, int64_t{1} << 29}};  // this process only
  in.gpus.gpus = {g};
  in.h2d_gb_s = {55.4};
  return in;
}

int count(const std::vector<diag::Check>& checks, CheckStatus s) {
  int n = 0;
  for (const auto& c : checks) n += c.status == s ? 1 : 0;
  return n;
}

const diag::Check* find(const std::vector<diag::Check>& checks, const std::string& text) {
  for (const auto& c : checks)
    if (c.what.find(text) != std::string::npos) return &c;
  return nullptr;
}

}  // namespace

TEST(DoctorStatic, HealthyMachineHasNoWarnings) {
  const auto checks = diag::static_checks(healthy_h200());
  EXPECT_EQ(count(checks, CheckStatus::warn), 0);
  EXPECT_EQ(count(checks, CheckStatus::fail), 0);
  const auto* bw = find(checks, "pinned host-to-device copies reach 55.4 GB/s");
  ASSERT_NE(bw, nullptr);
  EXPECT_NE(bw->what.find("88 % of the link's 63.0 GB/s"), std::string::npos) << bw->what;
  EXPECT_NE(find(checks, "driver 580.159.04 (supports CUDA up to 13.0)"), nullptr);
  EXPECT_NE(find(checks, "no other process"), nullptr);
}

TEST(DoctorStatic, FindsEachProblem) {
  auto in = healthy_h200();
  auto& g = in.gpus.gpus[0];
  g.persistence_mode = 0;
  g.ecc_uncorrected_volatile = 2;
  g.pcie_width = 8;
  g.clock_events = 0x40;  // hardware thermal slowdown
  g.sm_clock_mhz = 900;
  g.temperature_c = 88;
  g.processes.push_back({4242, int64_t{3} << 30});
  in.h2d_gb_s = {12.0};
  in.gpus.cuda_driver = 12040;  // older than the 13.0 runtime
  const auto checks = diag::static_checks(in);
  EXPECT_NE(find(checks, "persistence mode off"), nullptr);
  const auto* ecc = find(checks, "uncorrected ECC errors since the driver loaded");
  ASSERT_NE(ecc, nullptr);
  EXPECT_EQ(ecc->status, CheckStatus::fail);
  EXPECT_NE(find(checks, "fewer lanes"), nullptr);
  EXPECT_NE(find(checks, "slowed down now: thermal (hardware)"), nullptr);
  EXPECT_NE(find(checks, "close to the slowdown threshold"), nullptr);
  const auto* other = find(checks, "1 other process hold 3.0 GiB");
  ASSERT_NE(other, nullptr) << checks.size();
  EXPECT_NE(other->what.find("pid 4242"), std::string::npos);
  EXPECT_EQ(find(checks, "reach 12.0 GB/s")->status, CheckStatus::warn);
  EXPECT_EQ(find(checks, "older than the CUDA runtime")->status, CheckStatus::fail);
  for (const auto& c : checks)
    if (c.status == CheckStatus::warn || c.status == CheckStatus::fail)
      EXPECT_FALSE(c.fix.empty()) << c.what;
}

TEST(DoctorStatic, IdleClocksAndLinkAreInformationOnly) {
  auto in = healthy_h200();
  auto& g = in.gpus.gpus[0];
  g.sm_clock_mhz = 345;
  g.clock_events = 0x1;  // idle
  g.pcie_gen = 1;        // links slow down when idle
  const auto checks = diag::static_checks(in);
  EXPECT_EQ(count(checks, CheckStatus::warn), 0);
  EXPECT_EQ(find(checks, "SM clock 345 of 1,980 MHz")->status, CheckStatus::info);
  EXPECT_EQ(find(checks, "PCIe Gen1 x16")->status, CheckStatus::info);
}

TEST(DoctorStatic, NoNvml) {
  diag::StaticInputs in;
  in.built_with_cuda = true;
  in.cuda_devices = 1;
  in.gpus.status = "NVML not found";
  auto checks = diag::static_checks(in);
  ASSERT_NE(find(checks, "NVML not found"), nullptr);
  EXPECT_EQ(find(checks, "NVML not found")->status, CheckStatus::warn);
  in.cuda_devices = 0;
  checks = diag::static_checks(in);
  EXPECT_EQ(find(checks, "no GPU visible")->status, CheckStatus::info);
}

TEST(DoctorStatic, PcieBandwidth) {
  EXPECT_NEAR(diag::pcie_gb_s(5, 16), 63.0, 0.01);
  EXPECT_NEAR(diag::pcie_gb_s(4, 16), 31.5, 0.01);
  EXPECT_NEAR(diag::pcie_gb_s(3, 8), 7.88, 0.01);
  EXPECT_LT(diag::pcie_gb_s(0, 16), 0);
  EXPECT_LT(diag::pcie_gb_s(5, 0), 0);
}

TEST(DoctorConclusions, InputPipelineSweepAndScaling) {
  auto m = [](std::string name, std::string kind, int64_t batch, int ranks, double sps,
              std::string verdict, double comm = 0) {
    diag::Measurement x;
    x.name = name;
    x.kind = kind;
    x.batch = batch;
    x.ranks = ranks;
    x.samples_per_s = sps;
    x.verdict = verdict;
    x.headline = verdict + ": ...";
    x.comm_share = comm;
    return x;
  };
  const std::vector<diag::Measurement> ms = {
      m("real data", "real", 256, 1, 3100, "input-bound"),
      m("synthetic data", "synthetic", 256, 1, 5400, "compute-bound"),
      m("batch 64", "sweep", 64, 1, 2000, "launch-bound"),
      m("batch 128", "sweep", 128, 1, 4000, "launch-bound"),
      m("batch 256", "sweep", 256, 1, 5400, "compute-bound"),
      m("batch 512", "sweep", 512, 1, 5600, "compute-bound"),
      m("1 GPU", "ranks", 256, 1, 5400, "compute-bound"),
      m("8 GPUs", "ranks", 256, 8, 30000, "communication-bound", 0.25),
  };
  const auto c = diag::conclude(ms);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_NE(c[0].find("the input pipeline limits training: real data trains at 3,100"),
            std::string::npos)
      << c[0];
  EXPECT_NE(c[0].find("5,400 (57 %)"), std::string::npos) << c[0];
  EXPECT_NE(c[1].find("the model itself"), std::string::npos);
  EXPECT_NE(c[2].find("throughput grows 2.8x from batch 64 to 512"), std::string::npos) << c[2];
  EXPECT_NE(c[2].find("launch-bound"), std::string::npos);
  EXPECT_NE(c[2].find("batch 256 reaches 90 %"), std::string::npos) << c[2];
  EXPECT_NE(c[3].find("8 GPUs reach only 69 % of 8 times 1 GPU"), std::string::npos) << c[3];
  EXPECT_NE(c[3].find("communication-bound (exposed communication 25.0 %"), std::string::npos)
      << c[3];

  // A pipeline that keeps up, a flat sweep, good scaling, a failed run.
  std::vector<diag::Measurement> good = {
      m("real data", "real", 256, 1, 5300, "compute-bound"),
      m("synthetic data", "synthetic", 256, 1, 5400, "compute-bound"),
      m("batch 256", "sweep", 256, 1, 5400, "compute-bound"),
      m("batch 512", "sweep", 512, 1, 5500, "compute-bound"),
      m("1 GPU", "ranks", 256, 1, 5400, "compute-bound"),
      m("2 GPUs", "ranks", 256, 2, 10500, "compute-bound"),
  };
  diag::Measurement failed = m("batch 1024", "sweep", 1024, 1, 0, "");
  failed.failed = true;
  failed.error = "out of memory";
  good.push_back(failed);
  const auto g = diag::conclude(good);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_NE(g[0].find("batch 1024 could not run: out of memory"), std::string::npos);
  EXPECT_NE(g[1].find("the input pipeline keeps up"), std::string::npos) << g[1];
  EXPECT_NE(g[3].find("throughput is flat"), std::string::npos) << g[3];
  EXPECT_NE(g[4].find("2 GPUs train at 97 %"), std::string::npos) << g[4];
  const std::string table = diag::measurement_table(good);
  EXPECT_NE(table.find("samples/s"), std::string::npos);
  EXPECT_NE(table.find("failed: out of memory"), std::string::npos);
}
