// The static checks of `stoker doctor` and of the health-check page: rules on the machine as NVML,
// the CUDA runtime and the libraries describe it (the ablations' conclusions:
// doctor_conclusions.cpp).
#include "diag/doctor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "diag/gpu_monitor.h"
#include "diag/number_format.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

namespace {

using detail::fmt;

std::string gib(int64_t bytes) { return fmt("%.1f GiB", static_cast<double>(bytes) / (1 << 30)); }

// "13.0" -> 13000 (CUDA's integer form); -1 when unparsable.
int cuda_version_number(const std::string& v) {
  int major = 0, minor = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) != 2) return -1;
  return major * 1000 + minor * 10;
}

std::string version_of(const std::vector<core::LibraryVersion>& libs, const std::string& name) {
  for (const auto& l : libs)
    if (l.name == name) return l.version;
  return "";
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

// A GPU in MIG mode gives a job one GPU instance: a fraction of its SMs and memory.
void add_mig_check(const GpuInfo& g, const std::string& gpu, std::vector<Check>& out) {
  const std::string admin = "nvidia-smi -i " + std::to_string(g.index);
  if (g.mig_mode == 1)
    out.push_back({CheckStatus::warn,
                   gpu +
                       ": MIG mode on: a training job sees one slice of the GPU (a fraction of "
                       "its SMs and memory)" +
                       (g.mig_mode_pending == 0 ? ", off after the next GPU reset" : ""),
                   admin + " -mig 0 (administrator; takes effect at a GPU reset), or size the "
                           "job to the slice"});
  else if (g.mig_mode == 0 && g.mig_mode_pending == 1)
    out.push_back({CheckStatus::info,
                   gpu + ": MIG mode off, but on after the next GPU reset (jobs will then see "
                         "one slice of the GPU)",
                   admin + " -mig 0 (administrator) cancels the change"});
  else if (g.mig_mode == 0)
    out.push_back({CheckStatus::ok, gpu + ": MIG mode off (the whole GPU)", ""});
}

// Settings that hold the clocks below their maximum: application clocks below the default,
// locked clocks, a power limit below the default. (An idle GPU's low clock is no setting.)
void add_clock_settings_check(const GpuInfo& g, const std::string& gpu, std::vector<Check>& out) {
  const std::string admin = "nvidia-smi -i " + std::to_string(g.index);
  std::vector<std::string> found, fixes;
  if (g.sm_app_clock_mhz > 0 && g.sm_app_clock_default_mhz > 0 &&
      g.sm_app_clock_mhz < g.sm_app_clock_default_mhz) {
    found.push_back("application clocks set to " + format_count(g.sm_app_clock_mhz) +
                    " MHz, below the default " + format_count(g.sm_app_clock_default_mhz) + " MHz");
    fixes.push_back(admin + " -rac (resets the application clocks)");
  }
  const uint64_t r = g.clock_events < 0 ? 0 : static_cast<uint64_t>(g.clock_events);
  const uint64_t settings =
      r & (clock_event::kApplicationsClocksSetting | clock_event::kDisplayClockSetting);
  if (settings) {
    found.push_back("clocks limited now by a setting: " + describe_clock_events(settings) +
                    " (or clocks locked with nvidia-smi -lgc)");
    fixes.push_back(admin + " -rgc (unlocks the GPU clocks)");
  }
  if (g.power_limit_w > 0 && g.power_limit_default_w > 0 &&
      g.power_limit_w < g.power_limit_default_w - 0.5) {
    found.push_back("power limit " + fmt("%.0f", g.power_limit_w) + " W, below the default " +
                    fmt("%.0f", g.power_limit_default_w) + " W");
    fixes.push_back(admin + " -pl " + fmt("%.0f", g.power_limit_default_w) +
                    " (restores the default power limit)");
  }
  if (found.empty()) return;
  out.push_back({CheckStatus::warn, gpu + ": clocks held below their maximum: " + join(found, "; "),
                 "as an administrator: " + join(fixes, "; ")});
}

// Rows remapped to spares (Ampere+) or pages retired (before): the driver repairing memory
// after ECC errors. A failed remapping cannot be repaired; a pending one waits for a reset.
void add_memory_repair_check(const GpuInfo& g, const std::string& gpu, std::vector<Check>& out) {
  std::vector<std::string> parts;
  const bool rows_known = g.remapped_rows_uncorrectable >= 0 && g.remapped_rows_correctable >= 0;
  if (rows_known)
    parts.push_back(
        g.remapped_rows_uncorrectable == 0 && g.remapped_rows_correctable == 0
            ? "no remapped rows"
            : "rows remapped to spares: " + std::to_string(g.remapped_rows_uncorrectable) +
                  " after uncorrectable errors, " + std::to_string(g.remapped_rows_correctable) +
                  " after correctable ones");
  const bool pages_known = g.retired_pages_double_bit >= 0 && g.retired_pages_single_bit >= 0;
  if (pages_known)
    parts.push_back(g.retired_pages_double_bit == 0 && g.retired_pages_single_bit == 0
                        ? "no retired pages"
                        : "retired pages: " + std::to_string(g.retired_pages_double_bit) +
                              " after double-bit errors, " +
                              std::to_string(g.retired_pages_single_bit) +
                              " after repeated single-bit errors");
  const std::string found = join(parts, "; ");
  const std::string tail = found.empty() ? "" : " (" + found + ")";
  const bool repaired = g.remapped_rows_uncorrectable > 0 || g.remapped_rows_correctable > 0 ||
                        g.retired_pages_double_bit > 0 || g.retired_pages_single_bit > 0;
  if (g.remap_failed == 1)
    out.push_back({CheckStatus::fail,
                   gpu +
                       ": a row remapping failed: the GPU has memory errors it can no longer "
                       "repair" +
                       tail,
                   "drain the GPU and have it replaced (RMA); nvidia-smi -q -d ROW_REMAPPER shows "
                   "the state"});
  else if (g.remap_pending == 1 || g.retired_pages_pending == 1)
    out.push_back({CheckStatus::warn,
                   gpu + ": " +
                       (g.remap_pending == 1 ? "a row remapping is pending"
                                             : "pages are pending retirement") +
                       ": the repair takes effect at the next GPU reset" + tail,
                   "reset the GPU when nothing runs on it (nvidia-smi -i " +
                       std::to_string(g.index) + " -r, administrator) or reboot"});
  else if (repaired)
    out.push_back({CheckStatus::info, gpu + ": memory repaired by the driver: " + found,
                   "watch the counts (nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT): a growing "
                   "count means failing memory"});
  else if (!found.empty())
    out.push_back({CheckStatus::ok, gpu + ": " + found, ""});
}

// How each pair of GPUs reaches the other; pairs that read the same share one line.
void add_link_checks(const std::vector<GpuLink>& links, std::vector<Check>& out) {
  struct Group {
    CheckStatus status;
    std::string finding, fix;
    std::vector<std::string> pairs;
  };
  std::vector<Group> groups;
  for (const GpuLink& l : links) {
    const std::string p2p = l.p2p_read == 0  ? "P2P ok"
                            : l.p2p_read > 0 ? "no P2P (" + p2p_status_name(l.p2p_read) + ")"
                                             : "P2P unknown";
    const std::string path = "PCIe " + topology_name(l.topology);
    Group g{CheckStatus::ok, "", "", {}};
    if (l.nvlinks > 0) {
      g.finding = std::to_string(l.nvlinks) + (l.nvlinks > 1 ? " NVLinks, " : " NVLink, ") + p2p;
      if (l.p2p_read > 0) {
        g.status = CheckStatus::warn;
        g.fix =
            "NVLink joins them but the driver refuses P2P: check its P2P settings and that "
            "both GPUs are given to this job alike (same container / VM)";
      }
    } else if (l.p2p_read > 0) {
      g.status = CheckStatus::warn;
      g.finding = (l.nvlinks == 0 ? "no NVLink, " : "") + p2p + ", " + path +
                  ": all-reduce between them goes through host memory (slower)";
      g.fix =
          "pick GPUs under one PCIe switch or joined by NVLink (nvidia-smi topo -m), or have "
          "an administrator check that ACS and the IOMMU allow P2P";
    } else if (l.p2p_read == 0) {
      g.status = CheckStatus::info;
      g.finding = (l.nvlinks == 0 ? "no NVLink, " : "") + std::string("P2P ok over ") + path;
    } else if (l.nvlinks == 0 || l.topology >= 0) {
      g.status = CheckStatus::info;
      g.finding = (l.nvlinks == 0 ? "no NVLink, " : "") + path + ", " + p2p;
    } else {
      continue;  // nothing known about this pair
    }
    const std::string pair = std::to_string(l.a) + "-" + std::to_string(l.b);
    auto same = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
      return x.status == g.status && x.finding == g.finding;
    });
    if (same == groups.end()) {
      g.pairs.push_back(pair);
      groups.push_back(std::move(g));
    } else {
      same->pairs.push_back(pair);
    }
  }
  for (const Group& g : groups) {
    const std::string who = g.pairs.size() == 1 ? "GPU " + g.pairs[0]
                            : g.pairs.size() == links.size()
                                ? "all " + std::to_string(links.size()) + " GPU pairs"
                                : "GPU pairs " + join(g.pairs, ", ");
    out.push_back({g.status, who + ": " + g.finding, g.fix});
  }
}

}  // namespace

const char* check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::ok:
      return "ok";
    case CheckStatus::info:
      return "info";
    case CheckStatus::warn:
      return "warn";
    case CheckStatus::fail:
      return "FAIL";
  }
  return "?";
}

double pcie_gb_s(int gen, int width) {
  // Per lane and direction, after line coding (8b/10b up to Gen2, 128b/130b from Gen3).
  static const double per_lane[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563};
  if (gen < 1 || gen > 6 || width <= 0) return -1;
  return per_lane[gen] * width;
}

std::vector<Check> static_checks(const StaticInputs& in) {
  std::vector<Check> out;
  auto add = [&](CheckStatus s, std::string what, std::string fix = "") {
    out.push_back({s, std::move(what), std::move(fix)});
  };
  const SystemGpuInfo& sys = in.gpus;

  // Build and libraries.
  if (!in.built_with_cuda) {
    add(CheckStatus::info, "stoker was built without CUDA: CPU backend only",
        "rebuild with the CUDA toolkit (STOKER_WITH_CUDA=ON) to train on GPUs");
  } else {
    std::string libs = "CUDA runtime " + version_of(in.libraries, "CUDA runtime") + ", cuBLASLt " +
                       version_of(in.libraries, "cuBLASLt") + ", cuDNN " +
                       version_of(in.libraries, "cuDNN") + ", NCCL " +
                       version_of(in.libraries, "NCCL");
    add(CheckStatus::ok, "libraries: " + libs);
  }
  if (!sys.nvml) {
    if (in.cuda_devices > 0)
      add(CheckStatus::warn, sys.status,
          "make the driver's libnvidia-ml.so.1 visible (in a container: the NVIDIA container "
          "toolkit mounts it)");
    else
      add(CheckStatus::info, "no GPU visible (" + sys.status + ")");
  } else {
    std::string driver = "driver " + sys.driver;
    if (sys.cuda_driver > 0)
      driver += " (supports CUDA up to " + std::to_string(sys.cuda_driver / 1000) + "." +
                std::to_string((sys.cuda_driver % 1000) / 10) + ")";
    const int runtime = cuda_version_number(version_of(in.libraries, "CUDA runtime"));
    if (runtime > 0 && sys.cuda_driver > 0 && runtime > sys.cuda_driver)
      add(CheckStatus::fail,
          driver + " is older than the CUDA runtime stoker uses (" +
              version_of(in.libraries, "CUDA runtime") + ")",
          "install a driver that supports this CUDA version (or use CUDA forward compatibility)");
    else
      add(CheckStatus::ok, driver);
    if (in.built_with_cuda && in.cuda_devices == 0 && !sys.gpus.empty())
      add(CheckStatus::fail,
          "NVML sees " + std::to_string(sys.gpus.size()) + " GPUs but CUDA sees none",
          "check CUDA_VISIBLE_DEVICES and that the CUDA driver library matches the kernel "
          "module");
  }

  for (const GpuInfo& g : sys.gpus) {
    const std::string gpu = "GPU " + std::to_string(g.index) + " (" + g.name + ")";
    if (g.persistence_mode == 0)
      add(CheckStatus::warn,
          gpu +
              ": persistence mode off: the driver may unload between jobs (slow start, "
              "clocks and volatile ECC counters reset)",
          "nvidia-smi -pm 1 (administrator), or run the nvidia-persistenced daemon");
    else if (g.persistence_mode == 1)
      add(CheckStatus::ok, gpu + ": persistence mode on");
    add_mig_check(g, gpu, out);

    if (g.sm_clock_mhz >= 0 && g.sm_clock_max_mhz > 0) {
      const std::string clocks = gpu + ": SM clock " + format_count(g.sm_clock_mhz) + " of " +
                                 format_count(g.sm_clock_max_mhz) + " MHz, memory " +
                                 format_count(g.mem_clock_mhz) + " of " +
                                 format_count(g.mem_clock_max_mhz) + " MHz";
      const uint64_t r = g.clock_events < 0 ? 0 : static_cast<uint64_t>(g.clock_events);
      const uint64_t bad =
          r & (clock_event::kHwSlowdown | clock_event::kSwThermalSlowdown |
               clock_event::kHwThermalSlowdown | clock_event::kHwPowerBrakeSlowdown);
      if (bad)
        add(CheckStatus::warn, clocks + " — slowed down now: " + describe_clock_events(bad),
            "check cooling and power delivery (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)");
      else if (g.sm_clock_mhz < 0.9 * g.sm_clock_max_mhz)
        add(CheckStatus::info,
            clocks + " (reasons: " + describe_clock_events(r) +
                "); an idle GPU lowers its clocks, the ablations below show the clocks under "
                "load");
      else
        add(CheckStatus::ok, clocks);
    }
    add_clock_settings_check(g, gpu, out);
    if (g.temperature_c >= 0 && g.temperature_slowdown_c > 0 &&
        g.temperature_c >= g.temperature_slowdown_c - 5)
      add(CheckStatus::warn,
          gpu + ": " + std::to_string(g.temperature_c) + " C, close to the slowdown threshold (" +
              std::to_string(g.temperature_slowdown_c) + " C)",
          "check the cooling");

    // Corrected errors cost nothing (ECC repaired them); they are quoted so that a count that
    // grows is seen.
    std::string corrected;
    if (g.ecc_corrected_volatile >= 0 && g.ecc_corrected_aggregate >= 0)
      corrected = "; corrected errors: " + std::to_string(g.ecc_corrected_volatile) +
                  " volatile (since the driver loaded), " +
                  std::to_string(g.ecc_corrected_aggregate) + " aggregate (lifetime)";
    if (g.ecc_mode == 0) {
      add(CheckStatus::info, gpu + ": ECC off (memory errors go undetected)");
    } else if (g.ecc_uncorrected_volatile > 0) {
      add(CheckStatus::fail,
          gpu + ": " + std::to_string(g.ecc_uncorrected_volatile) +
              " uncorrected ECC errors since the driver loaded" + corrected,
          "drain the GPU: a reset may retire the pages; persistent errors mean RMA");
    } else if (g.ecc_uncorrected_aggregate > 0) {
      add(CheckStatus::warn,
          gpu + ": " + std::to_string(g.ecc_uncorrected_aggregate) +
              " uncorrected ECC errors in its lifetime (none since the driver loaded)" + corrected,
          "watch the count (nvidia-smi -q -d ECC)");
    } else if (g.ecc_mode == 1) {
      const bool any_corrected = g.ecc_corrected_volatile > 0 || g.ecc_corrected_aggregate > 0;
      std::string none;
      if (g.ecc_uncorrected_volatile == 0 && g.ecc_uncorrected_aggregate == 0)
        none = ", no uncorrected errors (volatile or aggregate)";
      else if (g.ecc_uncorrected_volatile == 0)
        none = ", no uncorrected errors";
      add(any_corrected ? CheckStatus::info : CheckStatus::ok, gpu + ": ECC on" + none + corrected);
    }
    add_memory_repair_check(g, gpu, out);

    if (g.pcie_width > 0 && g.pcie_width_max > 0) {
      const std::string link = "PCIe Gen" + std::to_string(g.pcie_gen) + " x" +
                               std::to_string(g.pcie_width) + " (the GPU supports Gen" +
                               std::to_string(g.pcie_gen_max) + " x" +
                               std::to_string(g.pcie_width_max) + ")";
      if (g.pcie_width < g.pcie_width_max)
        add(CheckStatus::warn, gpu + ": " + link + ": fewer lanes than the GPU has",
            "check the slot (an x8 or riser slot) and re-seat the card");
      else if (g.pcie_gen < g.pcie_gen_max)
        add(CheckStatus::info, gpu + ": " + link +
                                   " now; an idle GPU lowers its link speed, the bandwidth test "
                                   "below runs it at full speed");
      else
        add(CheckStatus::ok, gpu + ": " + link);
    }
    const size_t i = static_cast<size_t>(g.index);
    if (i < in.h2d_gb_s.size() && in.h2d_gb_s[i] > 0) {
      const double peak = pcie_gb_s(g.pcie_gen_max, g.pcie_width_max);
      const double bw = in.h2d_gb_s[i];
      if (peak > 0 && bw < 0.5 * peak)
        add(CheckStatus::warn,
            gpu + ": pinned host-to-device copies reach " + fmt("%.1f", bw) + " GB/s, " +
                fmt("%.0f", 100 * bw / peak) + " % of the link's " + fmt("%.1f", peak) + " GB/s",
            "check the PCIe link and NUMA placement (run on the GPU's CPU socket)");
      else
        add(CheckStatus::ok, gpu + ": pinned host-to-device copies reach " + fmt("%.1f", bw) +
                                 " GB/s" +
                                 (peak > 0 ? " (" + fmt("%.0f", 100 * bw / peak) +
                                                 " % of the link's " + fmt("%.1f", peak) + " GB/s)"
                                           : std::string()));
    }

    int64_t others = 0;
    int n_others = 0;
    std::string pids;
    for (const GpuProcess& p : g.processes) {
      if (p.pid == in.self_pid) continue;
      ++n_others;
      if (p.used_bytes > 0) others += p.used_bytes;
      if (!pids.empty()) pids += ", ";
      pids += "pid " + std::to_string(p.pid) + " " + (p.used_bytes >= 0 ? gib(p.used_bytes) : "?");
    }
    if (n_others > 0)
      add(CheckStatus::warn,
          gpu + ": " + std::to_string(n_others) + " other process" + (n_others > 1 ? "es" : "") +
              " hold " + gib(others) + " of GPU memory (" + pids + ")",
          "they compete for the GPU's time and memory: stop them or pick another GPU");
    else if (g.memory_total > 0)
      add(CheckStatus::ok, gpu + ": no other process on it; " + gib(g.memory_used) + " of " +
                               gib(g.memory_total) + " in use");
  }

  add_link_checks(sys.links, out);

  if (in.cpu_count > 0) {
    const int gpus = std::max<int>(1, static_cast<int>(sys.gpus.size()));
    std::string cpu = "CPU: " + in.cpu + ", " + std::to_string(in.cpu_count) + " hardware threads";
    if (!sys.gpus.empty()) cpu += " (" + fmt("%.0f", double(in.cpu_count) / gpus) + " per GPU)";
    add(in.cpu_count < 4 * gpus && !sys.gpus.empty() ? CheckStatus::warn : CheckStatus::info, cpu,
        in.cpu_count < 4 * gpus && !sys.gpus.empty()
            ? "few cores per GPU: JPEG decoding may not keep up (pack smaller images)"
            : "");
  }
  return out;
}

}  // namespace stoker::diag
