// What `stoker doctor` concludes, as pure functions of what it measured (so the rules are
// unit-tested): the static checks of the machine, and the conclusions of the ablations —
// synthetic vs real data, a batch-size sweep, 1 vs N GPUs (docs/diagnostics.md, "stoker
// doctor"). Running the ablations needs the Trainer, so that part lives in the CLI.
//
// Thread-safety: free functions on values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diag/gpu_info.h"
#include "stoker/core/device.h"

namespace stoker::diag {

enum class CheckStatus { ok, info, warn, fail };
const char* check_status_name(CheckStatus s);  // "ok", "info", "warn", "FAIL"

struct Check {
  CheckStatus status = CheckStatus::ok;
  std::string what;  // one line: the finding
  std::string fix;   // what to do about it ("" when nothing)
};

struct StaticInputs {
  SystemGpuInfo gpus;                           // query_gpus()
  std::vector<core::LibraryVersion> libraries;  // core::library_versions()
  bool built_with_cuda = false;
  int cuda_devices = 0;  // core::cuda_device_count()
  int cpu_count = 0;
  std::string cpu;
  // Measured pinned host-to-device bandwidth per GPU (GB/s; -1 when not measured).
  std::vector<double> h2d_gb_s;
  unsigned self_pid = 0;  // this process (its own GPU memory is not "another process")
};

// This process's view of the machine for the static checks: NVML (loaded from `nvml_library`),
// the libraries, the CUDA devices, the CPU; no bandwidth measured (h2d_gb_s empty).
StaticInputs collect_static_inputs(const std::string& nvml_library = "libnvidia-ml.so.1");

// Versions, persistence mode, MIG mode, clocks vs max and the settings that hold them lower
// (application clocks, locked clocks, power limit), ECC errors (volatile and aggregate), rows
// remapped or pages retired, PCIe link generation and width (and the measured bandwidth against
// it), memory used by other processes, the link between each pair of GPUs (NVLink, PCIe path,
// P2P).
std::vector<Check> static_checks(const StaticInputs& in);

// Theoretical PCIe bandwidth per direction in GB/s for a link (gen 1..6, lanes), -1 unknown.
double pcie_gb_s(int gen, int width);

// One training measurement of an ablation.
struct Measurement {
  std::string name;   // "real data", "synthetic data", "batch 256", "4 GPUs", ...
  std::string kind;   // "real", "synthetic", "sweep", "graph", "ranks"
  int64_t batch = 0;  // per rank
  int ranks = 1;
  double samples_per_s = 0;  // all ranks together
  double step_ms = 0;        // median
  std::string verdict;       // verdict_name()
  double input_share = 0, launch_share = 0, comm_share = 0;
  std::string headline;
  bool failed = false;
  std::string error;
};

// The conclusions of the ablations, one sentence each, from the measurements of every kind
// that ran.
std::vector<std::string> conclude(const std::vector<Measurement>& m);

// "the loader" vs "the model": the print-out of the measurements as a table.
std::string measurement_table(const std::vector<Measurement>& m);

}  // namespace stoker::diag
