// GpuMonitor: the GPU's health while training, sampled through NVML in a background thread
// (docs/architecture.md#diagnostics, docs/diagnostics.md).
//
// NVML is loaded at run time (dlopen of libnvidia-ml.so.1, from the driver): stoker neither
// links it nor needs its header. Without it — no driver, a CPU machine, a container without the
// driver's libraries — the monitor is simply unavailable: available() is false, status() says
// why, and the first such monitor of the process prints that reason once on stderr. Nothing
// throws. A query the GPU does not support (NVML_ERROR_NOT_SUPPORTED) leaves its field at -1.
//
// Each sample reads: SM and memory clocks and their maxima, power draw and the enforced power
// limit, GPU temperature, utilization (NVML's duty cycle: the share of the last sample period
// in which any kernel ran — not SM occupancy), the clock-event (throttle) reasons bitmask and
// PCIe throughput. health() summarises the samples taken since a given time.
//
// Thread-safety: all methods may be called from any thread; the sampler is the monitor's own
// thread, stopped by stop() or the destructor.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stoker/core/device.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

// NVML clock-event reason bits (nvmlClocksEventReason*, formerly ClocksThrottleReason*).
namespace clock_event {
inline constexpr uint64_t kGpuIdle = 0x1;
inline constexpr uint64_t kApplicationsClocksSetting = 0x2;
inline constexpr uint64_t kSwPowerCap = 0x4;
inline constexpr uint64_t kHwSlowdown = 0x8;
inline constexpr uint64_t kSyncBoost = 0x10;
inline constexpr uint64_t kSwThermalSlowdown = 0x20;
inline constexpr uint64_t kHwThermalSlowdown = 0x40;
inline constexpr uint64_t kHwPowerBrakeSlowdown = 0x80;
inline constexpr uint64_t kDisplayClockSetting = 0x100;
// The reasons that mean "slower than it could be" (what the throttled verdict counts).
inline constexpr uint64_t kSlowdown =
    kSwPowerCap | kHwSlowdown | kSwThermalSlowdown | kHwThermalSlowdown | kHwPowerBrakeSlowdown;
}  // namespace clock_event

// "power cap, thermal (software)" for a reasons bitmask ("none" for 0).
std::string describe_clock_events(uint64_t reasons);

struct GpuSample {
  double time_ms = 0;  // diag::now_ms() when taken
  int sm_clock_mhz = -1, sm_clock_max_mhz = -1;
  int mem_clock_mhz = -1, mem_clock_max_mhz = -1;
  double power_w = -1, power_limit_w = -1;
  int temperature_c = -1;
  int util_gpu = -1, util_memory = -1;  // percent
  int64_t clock_events = -1;            // reasons bitmask (-1: not readable)
  double pcie_tx_mb_s = -1, pcie_rx_mb_s = -1;
  double memory_used_mib = -1;  // device memory in use, all processes (NVML)
};

// Reduces samples (GpuMonitor::health does this over its window; tests feed made-up samples).
GpuHealth summarize_samples(const std::vector<GpuSample>& samples);

struct GpuMonitorOptions {
  double interval_s = 0.1;
  std::string library = "libnvidia-ml.so.1";
  size_t max_samples = 100000;     // oldest dropped beyond this
  bool pcie = true;                // read PCIe throughput (a 20 ms NVML window per direction)
  bool report_unavailable = true;  // print the reason once per process on stderr
};

class GpuMonitor {
 public:
  // Starts sampling `device` (a CUDA device; for a CPU device the monitor is unavailable and
  // says so, without printing). The NVML device is found by PCI bus id, else by index.
  explicit GpuMonitor(Device device, GpuMonitorOptions options = {});
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  bool available() const { return available_; }
  const std::string& status() const { return status_; }
  const std::string& name() const { return name_; }

  // Takes one sample now (the thread also does, every interval).
  void sample_now();
  // Samples taken at or after `since_ms` (diag::now_ms() time line); all when since_ms < 0.
  std::vector<GpuSample> samples(double since_ms = -1) const;
  GpuHealth health(double since_ms = -1) const;
  void stop();

 private:
  struct Impl;
  void run();
  GpuSample read() const;

  Device device_;
  GpuMonitorOptions options_;
  std::unique_ptr<Impl> impl_;
  bool available_ = false;
  std::string status_;
  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<GpuSample> samples_;
  std::thread thread_;
};

}  // namespace stoker::diag
