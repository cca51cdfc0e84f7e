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
  double power_limit_default_w = -1;  // the limit the GPU boots with
  // Application clocks: the SM clock the GPU runs kernels at, and its factory default (MHz).
  int sm_app_clock_mhz = -1, sm_app_clock_default_mhz = -1;
  int temperature_c = -1, temperature_slowdown_c = -1;
  int64_t clock_events = -1;
  int persistence_mode = -1;                 // 1 on, 0 off
  int ecc_mode = -1;                         // 1 on, 0 off
  int mig_mode = -1, mig_mode_pending = -1;  // 1 on, 0 off; pending: after the next reset
  // Volatile: since the driver loaded; aggregate: the GPU's lifetime.
  int64_t ecc_uncorrected_volatile = -1, ecc_uncorrected_aggregate = -1;
  int64_t ecc_corrected_volatile = -1, ecc_corrected_aggregate = -1;
  // Pre-Ampere page retirement: pages retired after a double-bit error and after multiple
  // single-bit errors; pending: retired at the next driver reload.
  int retired_pages_double_bit = -1, retired_pages_single_bit = -1, retired_pages_pending = -1;
  // Ampere+ row remapping: rows replaced by spares after uncorrectable / correctable errors;
  // pending: remapped at the next GPU reset; failed: a remapping failed (no spare row left).
  int remapped_rows_uncorrectable = -1, remapped_rows_correctable = -1;
  int remap_pending = -1, remap_failed = -1;
  int pcie_gen = -1, pcie_gen_max = -1, pcie_width = -1, pcie_width_max = -1;
  int64_t memory_total = -1, memory_used = -1;
  std::vector<GpuProcess> processes;  // compute processes using this GPU
};

// How two GPUs reach each other (a < b, NVML indices).
struct GpuLink {
  int a = -1, b = -1;
  // Active NVLinks between them: direct links, or through NVSwitches the links of the GPU with
  // fewer switch links (all GPUs on the switches reach each other); -1 unknown.
  int nvlinks = -1;
  // PCIe path (nvmlGpuTopologyLevel_t): 0 one board, 10 one switch, 20 several switches,
  // 30 host bridge, 40 NUMA node, 50 across CPU sockets; -1 unknown.
  int topology = -1;
  // P2P reads between them (nvmlGpuP2PStatus_t): 0 ok, > 0 why not (p2p_status_name); -1 unknown.
  int p2p_read = -1;
};

namespace topology {
inline constexpr int kInternal = 0, kSingleSwitch = 10, kMultipleSwitches = 20, kHostBridge = 30,
                     kNumaNode = 40, kSystem = 50;
}  // namespace topology

// "through one PCIe switch", "across CPU sockets", ... for a GpuLink::topology ("path unknown").
std::string topology_name(int level);
// "chipset not supported", "disabled by registry key", ... for a GpuLink::p2p_read > 0.
std::string p2p_status_name(int status);

struct SystemGpuInfo {
  bool nvml = false;     // NVML loaded
  std::string status;    // "ok" or why not
  std::string driver;    // "580.159.04"
  int cuda_driver = -1;  // NVML's CUDA driver version, 13000 = 13.0
  std::vector<GpuInfo> gpus;
  std::vector<GpuLink> links;  // every pair of gpus, (0,1), (0,2), ..., (1,2), ...
};

SystemGpuInfo query_gpus(const std::string& library = "libnvidia-ml.so.1");

// CUDA device `device`'s PCI bus id ("0000:18:00.0"), "" when unknown (CPU-only build, no GPU).
std::string cuda_pci_bus_id(int device);
// True when two PCI bus ids name the same device ("00000000:18:00.0" == "0000:18:00.0").
bool same_pci_device(const std::string& a, const std::string& b);

}  // namespace stoker::diag
