// GpuInfo: what NVML says about each GPU of the machine, once (the static part of
// `stoker doctor`; the GpuMonitor samples the changing part while training).
//
// NVML is loaded at run time as for the GpuMonitor; without it query_gpus() returns no GPU and
// the reason, and nothing throws. Fields a GPU does not support stay at -1 / empty.
//
// Thread-safety: free functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::diag {

struct GpuProcess {
  unsigned pid = 0;
  int64_t used_bytes = -1;
};

struct GpuInfo {
  int index = 0;  // NVML's index
  std::string name, uuid;
  std::string pci_bus_id;  // "00000000:18:00.0"
  int sm_clock_mhz = -1, sm_clock_max_mhz = -1;
  int mem_clock_mhz = -1, mem_clock_max_mhz = -1;
  double power_w = -1, power_limit_w = -1;
  int temperature_c = -1, temperature_slowdown_c = -1;
  int64_t clock_events = -1;
  int persistence_mode = -1;  // 1 on, 0 off
  int ecc_mode = -1;          // 1 on, 0 off
  int64_t ecc_uncorrected_volatile = -1, ecc_uncorrected_aggregate = -1;
  int pcie_gen = -1, pcie_gen_max = -1, pcie_width = -1, pcie_width_max = -1;
  int64_t memory_total = -1, memory_used = -1;
  std::vector<GpuProcess> processes;  // compute processes using this GPU
};

struct SystemGpuInfo {
  bool nvml = false;     // NVML loaded
  std::string status;    // "ok" or why not
  std::string driver;    // "580.159.04"
  int cuda_driver = -1;  // NVML's CUDA driver version, 13000 = 13.0
  std::vector<GpuInfo> gpus;
};

SystemGpuInfo query_gpus(const std::string& library = "libnvidia-ml.so.1");

// CUDA device `device`'s PCI bus id ("0000:18:00.0"), "" when unknown (CPU-only build, no GPU).
std::string cuda_pci_bus_id(int device);
// True when two PCI bus ids name the same device ("00000000:18:00.0" == "0000:18:00.0").
bool same_pci_device(const std::string& a, const std::string& b);

}  // namespace stoker::diag
