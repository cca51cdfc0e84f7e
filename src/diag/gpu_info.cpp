#include "diag/gpu_info.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "diag/nvml_api.h"

#if STOKER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace stoker::diag {

namespace {

bool ok(nvml::Return r) { return r == nvml::kSuccess; }

// Pages retired for `cause`, -1 unknown. A buffer size of 0 asks for the count only: NVML
// answers it with success (none) or "insufficient size" (some).
int retired_page_count(const nvml::Api& a, nvml::Device d, int cause) {
  unsigned count = 0;
  unsigned long long unused = 0;  // some drivers refuse a null buffer even when its size is 0
  const nvml::Return r = a.retired_pages(d, cause, &count, &unused);
  return ok(r) || r == nvml::kErrorInsufficientSize ? static_cast<int>(count) : -1;
}

// The fields of GpuInfo that tell whether its memory was repaired (ECC, retired pages,
// remapped rows) and whether it runs below its clocks (MIG, application clocks, power limit).
void query_health(const nvml::Api& a, nvml::Device d, GpuInfo& g) {
  unsigned long long r = 0;
  if (a.total_ecc_errors) {
    if (ok(a.total_ecc_errors(d, nvml::kMemoryErrorCorrected, nvml::kVolatileEcc, &r)))
      g.ecc_corrected_volatile = static_cast<int64_t>(r);
    if (ok(a.total_ecc_errors(d, nvml::kMemoryErrorCorrected, nvml::kAggregateEcc, &r)))
      g.ecc_corrected_aggregate = static_cast<int64_t>(r);
  }
  unsigned current = 0, pending = 0;
  if (a.mig_mode && ok(a.mig_mode(d, &current, &pending))) {
    g.mig_mode = static_cast<int>(current);
    g.mig_mode_pending = static_cast<int>(pending);
  }
  if (a.retired_pages) {
    g.retired_pages_double_bit = retired_page_count(a, d, nvml::kPageRetirementDoubleBit);
    g.retired_pages_single_bit = retired_page_count(a, d, nvml::kPageRetirementMultipleSingleBit);
  }
  int flag = 0;
  if (a.retired_pages_pending && ok(a.retired_pages_pending(d, &flag)))
    g.retired_pages_pending = flag;
  unsigned corrected = 0, uncorrected = 0, remap_pending = 0, failed = 0;
  if (a.remapped_rows &&
      ok(a.remapped_rows(d, &corrected, &uncorrected, &remap_pending, &failed))) {
    g.remapped_rows_correctable = static_cast<int>(corrected);
    g.remapped_rows_uncorrectable = static_cast<int>(uncorrected);
    g.remap_pending = static_cast<int>(remap_pending);
    g.remap_failed = static_cast<int>(failed);
  }
  unsigned u = 0;
  if (a.applications_clock && ok(a.applications_clock(d, nvml::kClockSm, &u)))
    g.sm_app_clock_mhz = static_cast<int>(u);
  if (a.default_applications_clock && ok(a.default_applications_clock(d, nvml::kClockSm, &u)))
    g.sm_app_clock_default_mhz = static_cast<int>(u);
  if (a.default_power_limit && ok(a.default_power_limit(d, &u))) g.power_limit_default_w = u / 1e3;
}

// Active NVLinks of one GPU: those to each other GPU (by PCI bus id) and those to NVSwitches.
struct NvLinkCounts {
  std::vector<int> to_gpu;  // by position in `gpus`
  int to_switch = 0;
  bool known = false;
};

NvLinkCounts count_nvlinks(const nvml::Api& a, nvml::Device d, const std::vector<GpuInfo>& gpus) {
  NvLinkCounts c;
  c.to_gpu.assign(gpus.size(), 0);
  if (!a.nvlink_state) return c;
  for (unsigned link = 0; link < nvml::kNvLinkMaxLinks; ++link) {
    int active = 0;
    const nvml::Return r = a.nvlink_state(d, link, &active);
    // A GPU without NVLink answers "not supported": it has none (0), not an unknown count.
    if (r == nvml::kErrorNotSupported) {
      c.known = true;
      break;
    }
    if (!ok(r)) continue;
    c.known = true;
    if (active != nvml::kFeatureEnabled) continue;
    int type = nvml::kNvLinkDeviceGpu;
    if (a.nvlink_remote_device_type && ok(a.nvlink_remote_device_type(d, link, &type)) &&
        type == nvml::kNvLinkDeviceSwitch) {
      ++c.to_switch;
      continue;
    }
    nvml::PciInfo remote{};
    if (!a.nvlink_remote_pci_info || !ok(a.nvlink_remote_pci_info(d, link, &remote))) continue;
    const std::string bus(remote.bus_id, strnlen(remote.bus_id, sizeof remote.bus_id));
    for (size_t j = 0; j < gpus.size(); ++j)
      if (same_pci_device(bus, gpus[j].pci_bus_id)) ++c.to_gpu[j];
  }
  return c;
}

std::vector<GpuLink> query_links(const nvml::Api& a, const std::vector<nvml::Device>& devices,
                                 const std::vector<GpuInfo>& gpus) {
  std::vector<NvLinkCounts> nvlinks;
  for (nvml::Device d : devices) nvlinks.push_back(count_nvlinks(a, d, gpus));
  std::vector<GpuLink> links;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = i + 1; j < gpus.size(); ++j) {
      GpuLink l;
      l.a = gpus[i].index;
      l.b = gpus[j].index;
      if (nvlinks[i].known && nvlinks[j].known) {
        // Through NVSwitches every GPU reaches every other with all its switch links: the GPU
        // with fewer of them limits the pair.
        const int switched = std::min(nvlinks[i].to_switch, nvlinks[j].to_switch);
        l.nvlinks = std::max(nvlinks[i].to_gpu[j], nvlinks[j].to_gpu[i]) + switched;
      }
      int level = 0;
      if (a.topology_common_ancestor &&
          ok(a.topology_common_ancestor(devices[i], devices[j], &level)))
        l.topology = level;
      int status = 0;
      if (a.p2p_status &&
          ok(a.p2p_status(devices[i], devices[j], nvml::kP2PCapsIndexRead, &status)))
        l.p2p_read = status;
      links.push_back(l);
    }
  }
  return links;
}

}  // namespace

std::string topology_name(int level) {
  switch (level) {
    case topology::kInternal:
      return "on one board";
    case topology::kSingleSwitch:
      return "through one PCIe switch";
    case topology::kMultipleSwitches:
      return "through several PCIe switches";
    case topology::kHostBridge:
      return "through the CPU's host bridge";
    case topology::kNumaNode:
      return "across host bridges of one NUMA node";
    case topology::kSystem:
      return "across CPU sockets";
  }
  return "path unknown";
}

std::string p2p_status_name(int status) {
  switch (status) {
    case 0:
      return "ok";
    case 1:
      return "chipset not supported";
    case 2:
      return "GPU not supported";
    case 3:
      return "PCIe topology not supported";
    case 4:
      return "disabled by registry key";
    case 5:
      return "not supported";
  }
  return "unknown";
}

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
  char buf[96] = {};
  if (a.system_driver_version && ok(a.system_driver_version(buf, sizeof buf))) out.driver = buf;
  int v = 0;
  if (a.system_cuda_driver_version && ok(a.system_cuda_driver_version(&v))) out.cuda_driver = v;
  unsigned count = 0;
  if (!a.device_count || !ok(a.device_count(&count))) return out;
  std::vector<nvml::Device> devices;  // beside out.gpus
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
    query_health(a, d, g);
    out.gpus.push_back(std::move(g));
    devices.push_back(d);
  }
  out.links = query_links(a, devices, out.gpus);
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
