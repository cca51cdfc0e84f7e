// GpuMonitor and query_gpus: absent NVML is a status, not an error; against a fake NVML the
// dlopen path, the struct layouts and the summaries are checked.
#include "diag/gpu_monitor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "diag/doctor.h"
#include "diag/gpu_info.h"

namespace diag = stoker::diag;
using stoker::Device;

// The fake NVML is built beside the tests; a copy of the test binary without it (the GPU
// bundle, docs/development.md) skips the tests that load it.
#define REQUIRE_FAKE_NVML()                                                \
  do {                                                                     \
    if (!std::filesystem::exists(STOKER_FAKE_NVML))                        \
      GTEST_SKIP() << "fake NVML library not found: " << STOKER_FAKE_NVML; \
  } while (0)

TEST(GpuMonitor, AbsentNvmlIsReportedNotThrown) {
  diag::GpuMonitorOptions o;
  o.library = "libstoker-no-such-nvml.so.1";
  o.report_unavailable = false;
  diag::GpuMonitor m(Device::cuda(0), o);
  EXPECT_FALSE(m.available());
  EXPECT_NE(m.status().find("NVML not found"), std::string::npos) << m.status();
  m.sample_now();
  EXPECT_TRUE(m.samples().empty());
  const diag::GpuHealth h = m.health();
  EXPECT_FALSE(h.available);
  EXPECT_NE(h.line().find("not monitored"), std::string::npos);
  const diag::SystemGpuInfo info = diag::query_gpus("libstoker-no-such-nvml.so.1");
  EXPECT_FALSE(info.nvml);
  EXPECT_TRUE(info.gpus.empty());
  EXPECT_NE(info.status.find("NVML not found"), std::string::npos);
}

TEST(GpuMonitor, CpuRunIsNotMonitored) {
  diag::GpuMonitor m(Device::cpu());
  EXPECT_FALSE(m.available());
  EXPECT_NE(m.status().find("not a GPU run"), std::string::npos);
}

TEST(GpuMonitor, SamplesAFakeNvml) {
  REQUIRE_FAKE_NVML();
  diag::GpuMonitorOptions o;
  o.library = STOKER_FAKE_NVML;
  o.interval_s = 0.005;
  diag::GpuMonitor m(Device::cuda(0), o);
  ASSERT_TRUE(m.available()) << m.status();
  EXPECT_EQ(m.name(), "NVIDIA H200");
  for (int i = 0; i < 200 && m.samples().size() < 6; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  m.stop();
  const auto samples = m.samples();
  ASSERT_GE(samples.size(), 6u);
  const diag::GpuSample& s = samples.front();
  EXPECT_EQ(s.sm_clock_mhz, 1500);
  EXPECT_EQ(s.sm_clock_max_mhz, 1980);
  EXPECT_EQ(s.mem_clock_mhz, 2619);
  EXPECT_DOUBLE_EQ(s.power_w, 650);
  EXPECT_DOUBLE_EQ(s.power_limit_w, 700);
  EXPECT_EQ(s.temperature_c, 71);
  EXPECT_EQ(s.util_gpu, 97);
  EXPECT_EQ(s.util_memory, 40);
  EXPECT_NEAR(s.pcie_rx_mb_s, 3072, 1);  // 3,000,000 KB/s
  const diag::GpuHealth h = m.health();
  EXPECT_TRUE(h.available);
  EXPECT_EQ(h.samples, static_cast<int>(samples.size()));
  EXPECT_EQ(h.busy_samples, h.samples);
  EXPECT_DOUBLE_EQ(h.sm_clock_mhz, 1500);
  EXPECT_NEAR(h.power_cap_share, 0.5, 0.2);  // every other sample carries the power cap
  EXPECT_DOUBLE_EQ(h.slowdown_share, h.power_cap_share);
  EXPECT_DOUBLE_EQ(h.thermal_share, 0);
  const std::string line = h.line();
  EXPECT_NE(line.find("SM 1,500/1,980 MHz (76 %)"), std::string::npos) << line;
  EXPECT_NE(line.find("power 650/700 W"), std::string::npos) << line;
  // A window that starts after the last sample is empty.
  EXPECT_EQ(m.health(samples.back().time_ms + 1).samples, 0);
}

TEST(GpuMonitor, StaticInfoFromAFakeNvml) {
  REQUIRE_FAKE_NVML();
  const diag::SystemGpuInfo info = diag::query_gpus(STOKER_FAKE_NVML);
  ASSERT_TRUE(info.nvml) << info.status;
  EXPECT_EQ(info.driver, "580.159.04");
  EXPECT_EQ(info.cuda_driver, 13000);
  ASSERT_EQ(info.gpus.size(), 1u);
  const diag::GpuInfo& g = info.gpus[0];
  EXPECT_EQ(g.name, "NVIDIA H200");
  EXPECT_EQ(g.pci_bus_id, "00000000:18:00.0");
  EXPECT_TRUE(diag::same_pci_device(g.pci_bus_id, "0000:18:00.0"));
  EXPECT_FALSE(diag::same_pci_device(g.pci_bus_id, "0000:19:00.0"));
  EXPECT_FALSE(diag::same_pci_device(g.pci_bus_id, ""));
  EXPECT_EQ(g.persistence_mode, 0);
  EXPECT_EQ(g.ecc_mode, 1);
  // ECC counters by (error type, counter): distinct values catch swapped arguments.
  EXPECT_EQ(g.ecc_uncorrected_volatile, 0);
  EXPECT_EQ(g.ecc_uncorrected_aggregate, 1);
  EXPECT_EQ(g.ecc_corrected_volatile, 3);
  EXPECT_EQ(g.ecc_corrected_aggregate, 12);
  EXPECT_EQ(g.mig_mode, 0);
  EXPECT_EQ(g.mig_mode_pending, 0);
  EXPECT_EQ(g.remapped_rows_correctable, 2);
  EXPECT_EQ(g.remapped_rows_uncorrectable, 1);
  EXPECT_EQ(g.remap_pending, 0);
  EXPECT_EQ(g.remap_failed, 0);
  EXPECT_EQ(g.retired_pages_double_bit, -1);  // not supported: left unknown
  EXPECT_EQ(g.retired_pages_single_bit, -1);
  EXPECT_EQ(g.retired_pages_pending, -1);
  EXPECT_EQ(g.sm_app_clock_mhz, 1755);
  EXPECT_EQ(g.sm_app_clock_default_mhz, 1980);
  EXPECT_DOUBLE_EQ(g.power_limit_default_w, 700);
  EXPECT_TRUE(info.links.empty());  // one GPU: no pair
  EXPECT_EQ(g.pcie_gen, 4);
  EXPECT_EQ(g.pcie_gen_max, 5);
  EXPECT_EQ(g.pcie_width, 16);
  EXPECT_EQ(g.temperature_slowdown_c, 90);
  EXPECT_EQ(g.memory_used, int64_t{3} << 30);
  ASSERT_EQ(g.processes.size(), 2u);
  EXPECT_EQ(g.processes[0].pid, 4242u);
  EXPECT_EQ(g.processes[0].used_bytes, int64_t{2} << 30);
  EXPECT_EQ(g.processes[1].used_bytes, -1);  // NVML_VALUE_NOT_AVAILABLE
}

namespace {

// Sets an environment variable the fake NVML reads, for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

const diag::GpuLink* find_link(const diag::SystemGpuInfo& info, int a, int b) {
  for (const auto& l : info.links)
    if (l.a == a && l.b == b) return &l;
  return nullptr;
}

}  // namespace

TEST(GpuMonitor, GpuPairsFromAFakeNvml) {
  REQUIRE_FAKE_NVML();
  ScopedEnv gpus("FAKE_NVML_GPUS", "4");  // pairs 0-1 and 2-3 joined by 4 NVLinks
  const diag::SystemGpuInfo info = diag::query_gpus(STOKER_FAKE_NVML);
  ASSERT_TRUE(info.nvml) << info.status;
  ASSERT_EQ(info.gpus.size(), 4u);
  EXPECT_EQ(info.gpus[3].index, 3);
  EXPECT_EQ(info.gpus[3].pci_bus_id, "00000000:1B:00.0");
  ASSERT_EQ(info.links.size(), 6u);
  const diag::GpuLink* pair = find_link(info, 0, 1);
  ASSERT_NE(pair, nullptr);
  EXPECT_EQ(pair->nvlinks, 4);
  EXPECT_EQ(pair->topology, diag::topology::kSingleSwitch);
  EXPECT_EQ(pair->p2p_read, 0);
  EXPECT_EQ(find_link(info, 2, 3)->nvlinks, 4);
  const diag::GpuLink* across = find_link(info, 1, 2);
  ASSERT_NE(across, nullptr);
  EXPECT_EQ(across->nvlinks, 0);
  EXPECT_EQ(across->topology, diag::topology::kSystem);
  EXPECT_EQ(across->p2p_read, 3);  // IOH topology not supported
  EXPECT_EQ(diag::p2p_status_name(across->p2p_read), "PCIe topology not supported");

  // The same machine through `stoker doctor`'s rules.
  diag::StaticInputs in;
  in.gpus = info;
  const auto checks = diag::static_checks(in);
  auto find = [&](const std::string& text) -> const diag::Check* {
    for (const auto& c : checks)
      if (c.what.find(text) != std::string::npos) return &c;
    return nullptr;
  };
  ASSERT_NE(find("GPU pairs 0-1, 2-3: 4 NVLinks, P2P ok"), nullptr);
  const diag::Check* no_p2p = find("GPU pairs 0-2, 0-3, 1-2, 1-3: no NVLink, no P2P");
  ASSERT_NE(no_p2p, nullptr);
  EXPECT_EQ(no_p2p->status, diag::CheckStatus::warn);
  // The fake's application clocks (1,755 of 1,980 MHz) reach the clock-settings rule.
  const diag::Check* clocks = find(
      "GPU 0 (NVIDIA H200): clocks held below their maximum: "
      "application clocks set to 1,755 MHz");
  ASSERT_NE(clocks, nullptr);
  EXPECT_EQ(clocks->status, diag::CheckStatus::warn);
}

TEST(GpuMonitor, NvSwitchedGpusFromAFakeNvml) {
  REQUIRE_FAKE_NVML();
  ScopedEnv gpus("FAKE_NVML_GPUS", "3");
  ScopedEnv nvswitch("FAKE_NVML_NVSWITCH", "1");  // 18 NVLinks per GPU, all to NVSwitches
  const diag::SystemGpuInfo info = diag::query_gpus(STOKER_FAKE_NVML);
  ASSERT_TRUE(info.nvml) << info.status;
  ASSERT_EQ(info.links.size(), 3u);
  for (const auto& l : info.links) {
    EXPECT_EQ(l.nvlinks, 18) << l.a << "-" << l.b;
    EXPECT_EQ(l.p2p_read, 0) << l.a << "-" << l.b;
  }
}

TEST(GpuMonitor, ClockEventNames) {
  EXPECT_EQ(diag::describe_clock_events(0), "none");
  EXPECT_EQ(diag::describe_clock_events(0x4 | 0x40), "power cap, thermal (hardware)");
  EXPECT_EQ(diag::describe_clock_events(0x1000), "other 0x1000");
}

TEST(GpuMonitor, IdleSamplesDoNotCountAsThrottled) {
  std::vector<diag::GpuSample> s(4);
  for (auto& x : s) {
    x.sm_clock_mhz = 345;
    x.sm_clock_max_mhz = 1980;
    x.util_gpu = 0;
    x.clock_events = diag::clock_event::kGpuIdle;
  }
  s[3].sm_clock_mhz = 1980;
  s[3].util_gpu = 100;
  s[3].clock_events = 0;
  const diag::GpuHealth h = diag::summarize_samples(s);
  EXPECT_EQ(h.busy_samples, 1);
  EXPECT_DOUBLE_EQ(h.sm_clock_mhz, 1980);  // busy samples only
  EXPECT_DOUBLE_EQ(h.slowdown_share, 0);
  EXPECT_DOUBLE_EQ(h.util_gpu, 25);
}
