#include "stoker/diag/gpu_info.h"

#include <cstdio>
#include <cstring>

#include "diag/nvml_api.h"

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace stoker::diag {

SystemGpuInfo query_gpus(const std::string& library) {
  SystemGpuInfo out;
  std::string why;
  auto api = nvml::load(library, &why);
  if (!api) {
    out.status = why;
    return out;
  }
  const nvml::Api& a = *api;
  out.nvml = true;
  out.status = "ok";
  auto ok = [](nvml::Return r) { return r == nvml::kSuccess; };
  char buf[96] = {};
  if (a.system_driver_version && ok(a.system_driver_version(buf, sizeof buf))) out.driver = buf;
  int v = 0;
  if (a.system_cuda_driver_version && ok(a.system_cuda_driver_version(&v))) out.cuda_driver = v;
  unsigned count = 0;
  if (!a.device_count || !ok(a.device_count(&count))) return out;
  for (unsigned i = 0; i < count; ++i) {
    nvml::Device d = nullptr;
    if (!a.handle_by_index || !ok(a.handle_by_index(i, &d))) continue;
    GpuInfo g;
    g.index = static_cast<int>(i);
    char name[96] = {};
    if (a.name && ok(a.name(d, name, sizeof name))) g.name = name;
    char uuid[96] = {};
    if (a.uuid && ok(a.uuid(d, uuid, sizeof uuid))) g.uuid = uuid;
    nvml::PciInfo pci{};
    if (a.pci_info && ok(a.pci_info(d, &pci)))
      g.pci_bus_id = std::string(pci.bus_id, strnlen(pci.bus_id, sizeof pci.bus_id));
    unsigned u = 0;
    if (a.clock && ok(a.clock(d, nvml::kClockSm, &u))) g.sm_clock_mhz = static_cast<int>(u);
    if (a.max_clock && ok(a.max_clock(d, nvml::kClockSm, &u)))
      g.sm_clock_max_mhz = static_cast<int>(u);
    if (a.clock && ok(a.clock(d, nvml::kClockMem, &u))) g.mem_clock_mhz = static_cast<int>(u);
    if (a.max_clock && ok(a.max_clock(d, nvml::kClockMem, &u)))
      g.mem_clock_max_mhz = static_cast<int>(u);
    if (a.power_usage && ok(a.power_usage(d, &u))) g.power_w = u / 1e3;
    if (a.enforced_power_limit && ok(a.enforced_power_limit(d, &u))) g.power_limit_w = u / 1e3;
    if (a.temperature && ok(a.temperature(d, nvml::kTemperatureGpu, &u)))
      g.temperature_c = static_cast<int>(u);
    if (a.temperature_threshold &&
        ok(a.temperature_threshold(d, nvml::kTemperatureThresholdSlowdown, &u)))
      g.temperature_slowdown_c = static_cast<int>(u);
    unsigned long long r = 0;
    if (a.clock_events && ok(a.clock_events(d, &r))) g.clock_events = static_cast<int64_t>(r);
    int mode = 0, pending = 0;
    if (a.persistence_mode && ok(a.persistence_mode(d, &mode))) g.persistence_mode = mode;
    if (a.ecc_mode && ok(a.ecc_mode(d, &mode, &pending))) g.ecc_mode = mode;
    if (a.total_ecc_errors) {
      if (ok(a.total_ecc_errors(d, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &r)))
        g.ecc_uncorrected_volatile = static_cast<int64_t>(r);
      if (ok(a.total_ecc_errors(d, nvml::kMemoryErrorUncorrected, nvml::kAggregateEcc, &r)))
        g.ecc_uncorrected_aggregate = static_cast<int64_t>(r);
    }
    if (a.pcie_link_gen && ok(a.pcie_link_gen(d, &u))) g.pcie_gen = static_cast<int>(u);
    if (a.pcie_link_gen_max && ok(a.pcie_link_gen_max(d, &u))) g.pcie_gen_max = static_cast<int>(u);
    if (a.pcie_link_width && ok(a.pcie_link_width(d, &u))) g.pcie_width = static_cast<int>(u);
    if (a.pcie_link_width_max && ok(a.pcie_link_width_max(d, &u)))
      g.pcie_width_max = static_cast<int>(u);
    nvml::Memory m{};
    if (a.memory_info && ok(a.memory_info(d, &m))) {
      g.memory_total = static_cast<int64_t>(m.total);
      g.memory_used = static_cast<int64_t>(m.used);
    }
    if (a.compute_processes) {
      unsigned n = 0;
      nvml::Return rc = a.compute_processes(d, &n, nullptr);
      if (rc == nvml::kErrorInsufficientSize || (ok(rc) && n > 0)) {
        std::vector<nvml::ProcessInfo> procs(n + 8);
        n = static_cast<unsigned>(procs.size());
        if (ok(a.compute_processes(d, &n, procs.data()))) {
          for (unsigned k = 0; k < n; ++k) {
            GpuProcess p;
            p.pid = procs[k].pid;
            // NVML_VALUE_NOT_AVAILABLE (all bits set) when the driver cannot tell.
            p.used_bytes = procs[k].used_gpu_memory == ~0ull
                               ? -1
                               : static_cast<int64_t>(procs[k].used_gpu_memory);
            g.processes.push_back(p);
          }
        }
      }
    }
    out.gpus.push_back(std::move(g));
  }
  return out;
}

std::string cuda_pci_bus_id(int device) {
#if STOKER_WITH_CUDA
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) == cudaSuccess) return bus;
  cudaGetLastError();
#endif
  (void)device;
  return "";
}

bool same_pci_device(const std::string& a, const std::string& b) {
  unsigned d1 = 0, b1 = 0, s1 = 0, f1 = 0, d2 = 0, b2 = 0, s2 = 0, f2 = 0;
  if (std::sscanf(a.c_str(), "%x:%x:%x.%x", &d1, &b1, &s1, &f1) != 4) return false;
  if (std::sscanf(b.c_str(), "%x:%x:%x.%x", &d2, &b2, &s2, &f2) != 4) return false;
  return d1 == d2 && b1 == b2 && s1 == s2 && f1 == f2;
}

}  // namespace stoker::diag
