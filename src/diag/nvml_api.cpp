#include "diag/nvml_api.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

namespace stoker::diag::nvml {

namespace {

template <typename F>
void bind(void* lib, F& fn, const char* name, const char* fallback = nullptr) {
  void* sym = dlsym(lib, name);
  if (!sym && fallback) sym = dlsym(lib, fallback);
  fn = reinterpret_cast<F>(sym);
}

}  // namespace

Api::~Api() {
  if (shutdown) shutdown();
  if (handle) dlclose(handle);
}

std::string Api::error(Return r) const {
  if (error_string) {
    const char* s = error_string(r);
    if (s) return s;
  }
  return "NVML error " + std::to_string(r);
}

std::shared_ptr<const Api> load(const std::string& library, std::string* why) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const Api>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto api = loaded[library].lock()) return api;

  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    if (why)
      *why = "NVML not found (" + library + ": " + (err ? err : "dlopen failed") +
             "): GPU clocks, power, temperature and throttling are not monitored";
    return nullptr;
  }
  auto api = std::make_shared<Api>();
  api->handle = lib;
  api->path = library;
  Api& a = *api;
  bind(lib, a.init, "nvmlInit_v2", "nvmlInit");
  bind(lib, a.error_string, "nvmlErrorString");
  if (!a.init) {
    if (why) *why = library + " has no nvmlInit_v2: not an NVML library";
    return nullptr;  // ~Api closes the library (shutdown is not bound yet)
  }
  const Return r = a.init();
  if (r != kSuccess) {
    if (why)
      *why = "NVML could not start (" + a.error(r) + "): is the NVIDIA driver loaded? GPU " +
             "clocks, power, temperature and throttling are not monitored";
    return nullptr;
  }
  bind(lib, a.shutdown, "nvmlShutdown");
  bind(lib, a.system_driver_version, "nvmlSystemGetDriverVersion");
  bind(lib, a.system_cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2",
       "nvmlSystemGetCudaDriverVersion");
  bind(lib, a.device_count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  bind(lib, a.handle_by_index, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  bind(lib, a.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2",
       "nvmlDeviceGetHandleByPciBusId");
  bind(lib, a.name, "nvmlDeviceGetName");
  bind(lib, a.uuid, "nvmlDeviceGetUUID");
  bind(lib, a.pci_info, "nvmlDeviceGetPciInfo_v3");
  bind(lib, a.clock, "nvmlDeviceGetClockInfo");
  bind(lib, a.max_clock, "nvmlDeviceGetMaxClockInfo");
  bind(lib, a.power_usage, "nvmlDeviceGetPowerUsage");
  bind(lib, a.enforced_power_limit, "nvmlDeviceGetEnforcedPowerLimit",
       "nvmlDeviceGetPowerManagementLimit");
  bind(lib, a.temperature, "nvmlDeviceGetTemperature");
  bind(lib, a.temperature_threshold, "nvmlDeviceGetTemperatureThreshold");
  bind(lib, a.utilization, "nvmlDeviceGetUtilizationRates");
  // The clocks-event name is R535+; the throttle-reasons name is its deprecated alias.
  bind(lib, a.clock_events, "nvmlDeviceGetCurrentClocksEventReasons",
       "nvmlDeviceGetCurrentClocksThrottleReasons");
  bind(lib, a.pcie_throughput, "nvmlDeviceGetPcieThroughput");
  bind(lib, a.persistence_mode, "nvmlDeviceGetPersistenceMode");
  bind(lib, a.ecc_mode, "nvmlDeviceGetEccMode");
  bind(lib, a.total_ecc_errors, "nvmlDeviceGetTotalEccErrors");
  bind(lib, a.pcie_link_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
  bind(lib, a.pcie_link_gen_max, "nvmlDeviceGetMaxPcieLinkGeneration");
  bind(lib, a.pcie_link_width, "nvmlDeviceGetCurrPcieLinkWidth");
  bind(lib, a.pcie_link_width_max, "nvmlDeviceGetMaxPcieLinkWidth");
  bind(lib, a.memory_info, "nvmlDeviceGetMemoryInfo");
  bind(lib, a.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  bind(lib, a.mig_mode, "nvmlDeviceGetMigMode");
  bind(lib, a.retired_pages, "nvmlDeviceGetRetiredPages");
  bind(lib, a.retired_pages_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
  bind(lib, a.remapped_rows, "nvmlDeviceGetRemappedRows");
  bind(lib, a.applications_clock, "nvmlDeviceGetApplicationsClock");
  bind(lib, a.default_applications_clock, "nvmlDeviceGetDefaultApplicationsClock");
  bind(lib, a.default_power_limit, "nvmlDeviceGetPowerManagementDefaultLimit");
  bind(lib, a.nvlink_state, "nvmlDeviceGetNvLinkState");
  bind(lib, a.nvlink_remote_pci_info, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  bind(lib, a.nvlink_remote_device_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
  bind(lib, a.topology_common_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
  bind(lib, a.p2p_status, "nvmlDeviceGetP2PStatus");
  loaded[library] = api;
  return api;
}

}  // namespace stoker::diag::nvml
