// stoker doctor's rules: static checks on a made-up machine, conclusions of made-up ablations.
#include "diag/doctor.h"

#include <gtest/gtest.h>

#include "diag/gpu_monitor.h"

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
  g.ecc_corrected_volatile = g.ecc_corrected_aggregate = 0;
  g.mig_mode = g.mig_mode_pending = 0;
  g.remapped_rows_uncorrectable = g.remapped_rows_correctable = 0;
  g.remap_pending = g.remap_failed = 0;
  g.sm_app_clock_mhz = g.sm_app_clock_default_mhz = 1980;
  g.power_limit_w = g.power_limit_default_w = 700;
  g.pcie_gen = g.pcie_gen_max = 5;
  g.pcie_width = g.pcie_width_max = 16;
  g.memory_total = int64_t{140} << 30;
  g.memory_used = int64_t{1} << 29;
  g.processes = {{100, int64_t{1} << 29}};  // this process only
  in.gpus.gpus = {g};
  in.h2d_gb_s = {55.4};
  return in;
}

// `n` healthy H200s whose pairs all have `link`.
diag::StaticInputs healthy_h200s(int n, const diag::GpuLink& link) {
  diag::StaticInputs in = healthy_h200();
  const diag::GpuInfo first = in.gpus.gpus[0];
  in.gpus.gpus.clear();
  for (int i = 0; i < n; ++i) {
    diag::GpuInfo g = first;
    g.index = i;
    in.gpus.gpus.push_back(g);
    for (int j = i + 1; j < n; ++j) {
      diag::GpuLink l = link;
      l.a = i;
      l.b = j;
      in.gpus.links.push_back(l);
    }
  }
  in.cuda_devices = n;
  in.cpu_count = 16 * n;
  in.h2d_gb_s.assign(static_cast<size_t>(n), 55.4);
  return in;
}

diag::GpuLink nvlinked(int nvlinks) {
  diag::GpuLink l;
  l.nvlinks = nvlinks;
  l.topology = diag::topology::kSystem;  // NVLink makes the PCIe path irrelevant
  l.p2p_read = 0;
  return l;
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
  EXPECT_EQ(find(checks, "MIG mode off")->status, CheckStatus::ok);
  EXPECT_EQ(find(checks, "no remapped rows")->status, CheckStatus::ok);
  EXPECT_EQ(find(checks, "ECC on, no uncorrected errors (volatile or aggregate)")->status,
            CheckStatus::ok);
  EXPECT_EQ(find(checks, "held below their maximum"), nullptr);
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
  EXPECT_EQ(find(checks, "held below their maximum"), nullptr);  // idle is no setting
}

TEST(DoctorStatic, MigMode) {
  auto in = healthy_h200();
  auto& g = in.gpus.gpus[0];
  g.mig_mode = g.mig_mode_pending = 1;
  auto checks = diag::static_checks(in);
  const auto* mig = find(checks, "MIG mode on: a training job sees one slice of the GPU");
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ(mig->status, CheckStatus::warn);
  EXPECT_NE(mig->fix.find("nvidia-smi -i 0 -mig 0"), std::string::npos) << mig->fix;
  EXPECT_EQ(find(checks, "off after the next GPU reset"), nullptr);
  g.mig_mode_pending = 0;  // being turned off
  checks = diag::static_checks(in);
  EXPECT_NE(find(checks,
                 "MIG mode on: a training job sees one slice of the GPU (a fraction of "
                 "its SMs and memory), off after the next GPU reset"),
            nullptr);
  g.mig_mode = 0;
  g.mig_mode_pending = 1;  // being turned on
  checks = diag::static_checks(in);
  EXPECT_EQ(find(checks, "MIG mode off, but on after the next GPU reset")->status,
            CheckStatus::info);
  EXPECT_EQ(count(checks, CheckStatus::warn), 0);
  g.mig_mode = g.mig_mode_pending = -1;  // not supported: no line
  checks = diag::static_checks(in);
  EXPECT_EQ(find(checks, "MIG"), nullptr);
}

TEST(DoctorStatic, RowRemappingFailureFails) {
  auto in = healthy_h200();
  auto& g = in.gpus.gpus[0];
  g.remap_failed = 1;
  g.remapped_rows_uncorrectable = 3;
  g.remap_pending = 1;  // the failure outranks the pending remapping
  const auto checks = diag::static_checks(in);
  const auto* c = find(checks, "a row remapping failed");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::fail);
  EXPECT_NE(c->what.find("3 after uncorrectable errors, 0 after correctable ones"),
            std::string::npos)
      << c->what;
  EXPECT_NE(c->fix.find("RMA"), std::string::npos);
  EXPECT_EQ(find(checks, "pending"), nullptr);
}

TEST(DoctorStatic, PendingMemoryRepairWarns) {
  auto in = healthy_h200();
  auto& g = in.gpus.gpus[0];
  g.remap_pending = 1;
  g.remapped_rows_uncorrectable = 1;
  auto checks = diag::static_checks(in);
  const auto* c = find(checks, "a row remapping is pending");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::warn);
  EXPECT_NE(c->fix.find("nvidia-smi -i 0 -r"), std::string::npos) << c->fix;

  // A pre-Ampere GPU: pages retired instead of rows remapped.
  auto old = healthy_h200();
  auto& v = old.gpus.gpus[0];
  v.remapped_rows_uncorrectable = v.remapped_rows_correctable = -1;
  v.remap_pending = v.remap_failed = -1;
  v.retired_pages_double_bit = 1;
  v.retired_pages_single_bit = 0;
  v.retired_pages_pending = 1;
  checks = diag::static_checks(old);
  c = find(checks, "pages are pending retirement");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::warn);
  EXPECT_NE(c->what.find("retired pages: 1 after double-bit errors, 0 after repeated single-bit "
                         "errors"),
            std::string::npos)
      << c->what;
  EXPECT_EQ(find(checks, "remapped rows"), nullptr);  // not supported: not mentioned
}

TEST(DoctorStatic, RepairedMemoryIsInformation) {
  auto in = healthy_h200();
  auto& g = in.gpus.gpus[0];
  g.remapped_rows_uncorrectable = 2;
  g.remapped_rows_correctable = 5;
  g.ecc_corrected_volatile = 3;
  g.ecc_corrected_aggregate = 12;
  const auto checks = diag::static_checks(in);
  EXPECT_EQ(count(checks, CheckStatus::warn), 0);
  EXPECT_EQ(count(checks, CheckStatus::fail), 0);
  const auto* rows = find(checks,
                          "memory repaired by the driver: rows remapped to spares: 2 "
                          "after uncorrectable errors, 5 after correctable ones");
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->status, CheckStatus::info);
  const auto* ecc = find(checks,
                         "corrected errors: 3 volatile (since the driver loaded), 12 "
                         "aggregate (lifetime)");
  ASSERT_NE(ecc, nullptr);
  EXPECT_EQ(ecc->status, CheckStatus::info);
  EXPECT_NE(ecc->what.find("no uncorrected errors"), std::string::npos) << ecc->what;
}

TEST(DoctorStatic, ClockSettingsBelowDefaultWarn) {
  auto in = healthy_h200();
  auto& g = in.gpus.gpus[0];
  g.sm_app_clock_mhz = 1410;
  auto checks = diag::static_checks(in);
  const auto* c = find(checks, "clocks held below their maximum");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::warn);
  EXPECT_NE(c->what.find("application clocks set to 1,410 MHz, below the default 1,980 MHz"),
            std::string::npos)
      << c->what;
  EXPECT_NE(c->fix.find("nvidia-smi -i 0 -rac"), std::string::npos) << c->fix;
  EXPECT_EQ(c->fix.find("-pl"), std::string::npos) << c->fix;  // only the fixes that apply

  g.sm_app_clock_mhz = 1980;
  g.power_limit_w = 500;
  checks = diag::static_checks(in);
  c = find(checks, "clocks held below their maximum");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::warn);
  EXPECT_NE(c->what.find("power limit 500 W, below the default 700 W"), std::string::npos)
      << c->what;
  EXPECT_NE(c->fix.find("nvidia-smi -i 0 -pl 700"), std::string::npos) << c->fix;

  g.power_limit_w = 700;
  g.clock_events = diag::clock_event::kApplicationsClocksSetting;  // locked clocks
  checks = diag::static_checks(in);
  c = find(checks, "clocks held below their maximum");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->what.find("clocks limited now by a setting: application clocks"), std::string::npos)
      << c->what;
  EXPECT_NE(c->fix.find("-rgc"), std::string::npos) << c->fix;
}

TEST(DoctorStatic, NvLinkedPairsAreOneOkLine) {
  auto checks = diag::static_checks(healthy_h200s(2, nvlinked(18)));
  const auto* pair = find(checks, "GPU 0-1: 18 NVLinks, P2P ok");
  ASSERT_NE(pair, nullptr);
  EXPECT_EQ(pair->status, CheckStatus::ok);
  EXPECT_EQ(count(checks, CheckStatus::warn), 0);

  checks = diag::static_checks(healthy_h200s(8, nvlinked(18)));
  EXPECT_EQ(find(checks, "all 28 GPU pairs: 18 NVLinks, P2P ok")->status, CheckStatus::ok);
  int lines = 0;
  for (const auto& c : checks) lines += c.what.find("NVLink") != std::string::npos ? 1 : 0;
  EXPECT_EQ(lines, 1);
  EXPECT_EQ(count(checks, CheckStatus::warn), 0);
}

TEST(DoctorStatic, PairWithoutP2PWarns) {
  diag::GpuLink across;
  across.nvlinks = 0;
  across.topology = diag::topology::kSystem;
  across.p2p_read = 3;  // NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
  auto checks = diag::static_checks(healthy_h200s(2, across));
  const auto* c = find(checks,
                       "GPU 0-1: no NVLink, no P2P (PCIe topology not supported), PCIe "
                       "across CPU sockets: all-reduce between them goes through host "
                       "memory");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::warn);
  EXPECT_NE(c->fix.find("ACS"), std::string::npos) << c->fix;

  diag::GpuLink pcie;
  pcie.nvlinks = 0;
  pcie.topology = diag::topology::kSingleSwitch;
  pcie.p2p_read = 0;
  checks = diag::static_checks(healthy_h200s(2, pcie));
  c = find(checks, "GPU 0-1: no NVLink, P2P ok over PCIe through one PCIe switch");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::info);
}

TEST(DoctorStatic, IdenticalPairsShareALine) {
  // Two NVLink pairs (0-1, 2-3) across CPU sockets without P2P between them.
  diag::GpuLink across;
  across.nvlinks = 0;
  across.topology = diag::topology::kSystem;
  across.p2p_read = 3;
  auto in = healthy_h200s(4, across);
  for (auto& l : in.gpus.links) {
    if ((l.a == 0 && l.b == 1) || (l.a == 2 && l.b == 3)) {
      l.nvlinks = 4;
      l.p2p_read = 0;
    }
  }
  const auto checks = diag::static_checks(in);
  EXPECT_EQ(find(checks, "GPU pairs 0-1, 2-3: 4 NVLinks, P2P ok")->status, CheckStatus::ok);
  const auto* c = find(checks, "GPU pairs 0-2, 0-3, 1-2, 1-3: no NVLink, no P2P");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::warn);
  EXPECT_EQ(count(checks, CheckStatus::warn), 1);
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

// The CUDA-graph run against the eager run at its batch: the sweep's, else the replayed batch.
TEST(DoctorConclusions, CudaGraphAgainstTheEagerStepAtItsBatch) {
  auto m = [](std::string name, std::string kind, int64_t batch, double sps) {
    diag::Measurement x;
    x.name = name;
    x.kind = kind;
    x.batch = batch;
    x.samples_per_s = sps;
    x.verdict = "launch-bound";
    x.headline = "launch-bound: ...";
    return x;
  };
  const auto text = [](const std::vector<std::string>& c) {
    std::string t;
    for (const std::string& s : c) t += s + "\n";
    return t;
  };
  // Faster than the sweep's batch-32 run (not the batch-64 one, nor the replayed batch).
  const std::string faster = text(
      diag::conclude({m("synthetic data", "synthetic", 32, 900), m("batch 32", "sweep", 32, 1000),
                      m("batch 64", "sweep", 64, 1800), m("CUDA graph", "graph", 32, 1500)}));
  EXPECT_NE(faster.find("a CUDA graph makes the step 50 % faster (1,500 vs 1,000 samples/s at "
                        "batch 32): the host's launches hold the GPU back; turn on "
                        "TrainerOptions::cuda_graph (--cuda-graph in the example trainers)"),
            std::string::npos)
      << faster;
  // No sweep at its batch: the replayed batch; within 5 %: little change.
  const std::string same = text(diag::conclude(
      {m("synthetic data", "synthetic", 32, 1000), m("CUDA graph", "graph", 32, 1020)}));
  EXPECT_NE(same.find("a CUDA graph changes little (x1.02 (1,020 vs 1,000 samples/s at batch "
                      "32)"),
            std::string::npos)
      << same;
  // Nothing to compare with: no conclusion about it; a failed graph run is reported.
  diag::Measurement failed = m("CUDA graph", "graph", 32, 0);
  failed.failed = true;
  failed.error = "capture failed";
  const std::string alone =
      text(diag::conclude({m("batch 64", "sweep", 64, 1800), m("CUDA graph", "graph", 32, 1500)}));
  EXPECT_EQ(alone.find("CUDA graph"), std::string::npos) << alone;
  EXPECT_NE(text(diag::conclude({failed})).find("CUDA graph could not run: capture failed"),
            std::string::npos);
}
