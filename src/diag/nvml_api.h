// NVML loaded at run time: the few functions, enums and structs stoker uses, declared here from
// NVIDIA's documented API (https://docs.nvidia.com/deploy/nvml-api/) because the machines that
// build stoker have no nvml.h. Every entry point is optional: a driver too old for one leaves
// its pointer null, and callers treat that as "not supported".
//
// Private to src/diag. Thread-safety: NVML itself is thread-safe; an NvmlApi is immutable
// after load() and shared by reference count (nvmlShutdown runs when the last user is gone).
#pragma once

#include <memory>
#include <string>

namespace stoker::diag::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorInsufficientSize = 7;
using Device = struct nvmlDevice_st*;

enum ClockType { kClockGraphics = 0, kClockSm = 1, kClockMem = 2 };
enum { kTemperatureGpu = 0 };
enum { kTemperatureThresholdShutdown = 0, kTemperatureThresholdSlowdown = 1 };
enum { kPcieUtilTxBytes = 0, kPcieUtilRxBytes = 1 };
enum { kMemoryErrorCorrected = 0, kMemoryErrorUncorrected = 1 };
enum { kVolatileEcc = 0, kAggregateEcc = 1 };
enum { kFeatureDisabled = 0, kFeatureEnabled = 1 };
enum { kPageRetirementMultipleSingleBit = 0, kPageRetirementDoubleBit = 1 };  // ...Cause_t
inline constexpr unsigned kNvLinkMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
enum { kNvLinkDeviceGpu = 0, kNvLinkDeviceIbmNpu = 1, kNvLinkDeviceSwitch = 2 };
enum { kP2PCapsIndexRead = 0 };  // nvmlGpuP2PCapsIndex_t
enum { kP2PStatusOk = 0 };       // nvmlGpuP2PStatus_t

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct PciInfo {  // nvmlPciInfo_t (also filled by nvmlDeviceGetNvLinkRemotePciInfo_v2)
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct ProcessInfo {  // nvmlProcessInfo_t (v2 layout, used by the _v3 process queries)
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct Api {
  void* handle = nullptr;
  std::string path;
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  const char* (*error_string)(Return) = nullptr;
  Return (*system_driver_version)(char*, unsigned int) = nullptr;
  Return (*system_cuda_driver_version)(int*) = nullptr;
  Return (*device_count)(unsigned int*) = nullptr;
  Return (*handle_by_index)(unsigned int, Device*) = nullptr;
  Return (*handle_by_pci_bus_id)(const char*, Device*) = nullptr;
  Return (*name)(Device, char*, unsigned int) = nullptr;
  Return (*uuid)(Device, char*, unsigned int) = nullptr;
  Return (*pci_info)(Device, PciInfo*) = nullptr;
  Return (*clock)(Device, int, unsigned int*) = nullptr;
  Return (*max_clock)(Device, int, unsigned int*) = nullptr;
  Return (*power_usage)(Device, unsigned int*) = nullptr;           // mW
  Return (*enforced_power_limit)(Device, unsigned int*) = nullptr;  // mW
  Return (*temperature)(Device, int, unsigned int*) = nullptr;
  Return (*temperature_threshold)(Device, int, unsigned int*) = nullptr;
  Return (*utilization)(Device, Utilization*) = nullptr;
  Return (*clock_events)(Device, unsigned long long*) = nullptr;    // or ...ThrottleReasons
  Return (*pcie_throughput)(Device, int, unsigned int*) = nullptr;  // KB/s
  Return (*persistence_mode)(Device, int*) = nullptr;
  Return (*ecc_mode)(Device, int*, int*) = nullptr;
  Return (*total_ecc_errors)(Device, int, int, unsigned long long*) = nullptr;
  Return (*pcie_link_gen)(Device, unsigned int*) = nullptr;
  Return (*pcie_link_gen_max)(Device, unsigned int*) = nullptr;
  Return (*pcie_link_width)(Device, unsigned int*) = nullptr;
  Return (*pcie_link_width_max)(Device, unsigned int*) = nullptr;
  Return (*memory_info)(Device, Memory*) = nullptr;
  Return (*compute_processes)(Device, unsigned int*, ProcessInfo*) = nullptr;
  Return (*mig_mode)(Device, unsigned int*, unsigned int*) = nullptr;  // current, pending
  // Pre-Ampere page retirement: count (in: buffer size) and addresses, by cause.
  Return (*retired_pages)(Device, int, unsigned int*, unsigned long long*) = nullptr;
  Return (*retired_pages_pending)(Device, int*) = nullptr;
  // Ampere+ row remapping: corrected rows, uncorrected rows, pending, failure occurred.
  Return (*remapped_rows)(Device, unsigned int*, unsigned int*, unsigned int*,
                          unsigned int*) = nullptr;
  Return (*applications_clock)(Device, int, unsigned int*) = nullptr;          // MHz
  Return (*default_applications_clock)(Device, int, unsigned int*) = nullptr;  // MHz
  Return (*default_power_limit)(Device, unsigned int*) = nullptr;              // mW
  Return (*nvlink_state)(Device, unsigned int, int*) = nullptr;  // link, nvmlEnableState_t
  Return (*nvlink_remote_pci_info)(Device, unsigned int, PciInfo*) = nullptr;
  Return (*nvlink_remote_device_type)(Device, unsigned int, int*) = nullptr;
  Return (*topology_common_ancestor)(Device, Device, int*) = nullptr;  // nvmlGpuTopologyLevel_t
  Return (*p2p_status)(Device, Device, int, int*) = nullptr;  // caps index, nvmlGpuP2PStatus_t

  ~Api();
  std::string error(Return r) const;  // NVML's message for r
};

// Loads and initializes NVML from `library` (dlopen name or path). Returns null with the reason
// in `*why` when the library, a required symbol or nvmlInit fails. The same library is loaded
// and initialized once per process and shared.
std::shared_ptr<const Api> load(const std::string& library, std::string* why);

}  // namespace stoker::diag::nvml
