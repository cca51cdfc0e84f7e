// The static checks of `stoker doctor`: diag::static_checks on NVML's view of the machine, the
// libraries, the CPU and the other processes, plus a measured host-to-device bandwidth per GPU.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "diag/gpu_info.h"
#include "parts.h"
#include "stoker/core/allocator.h"
#include "stoker/core/device.h"
#include "stoker/core/stream.h"
#include "stoker/core/tensor.h"

namespace stoker::cli::doctor {

namespace {

// Pinned host-to-device copies of 256 MiB: the median of five, in GB/s (-1: not measurable).
double measure_h2d_gb_s(Device d) {
  const int64_t bytes = int64_t{256} << 20;
  Tensor host = Tensor::empty_pinned({bytes}, DType::u8);
  Tensor dev = Tensor::empty({bytes}, DType::u8, d);
  const Stream s = core::current_stream(d);
  std::vector<double> ms;
  for (int i = 0; i < 6; ++i) {
    Event a = Event::create(d, true), b = Event::create(d, true);
    a.record(s);
    core::detail::copy_bytes(dev, host);
    b.record(s);
    b.synchronize();
    if (i > 0) ms.push_back(Event::elapsed_ms(a, b));  // the first one warms up
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  return med > 0 ? static_cast<double>(bytes) / (med * 1e6) : -1;
}

}  // namespace

json run_static(const DoctorOptions& o, std::vector<diag::Check>* checks_out) {
  std::printf("== static checks ==\n");
  diag::StaticInputs in = diag::collect_static_inputs(o.nvml);
  in.h2d_gb_s.assign(in.gpus.gpus.size(), -1.0);
  for (int c = 0; c < in.cuda_devices; ++c) {
    double bw = -1;
    try {
      bw = measure_h2d_gb_s(Device::cuda(c));
    } catch (const std::exception& e) {
      std::printf("  [warn] cuda:%d: host-to-device bandwidth test failed: %s\n", c, e.what());
    }
    const std::string bus = diag::cuda_pci_bus_id(c);
    bool matched = false;
    for (size_t g = 0; g < in.gpus.gpus.size(); ++g) {
      if (!bus.empty() && diag::same_pci_device(bus, in.gpus.gpus[g].pci_bus_id)) {
        in.h2d_gb_s[g] = bw;
        matched = true;
      }
    }
    if (!matched && bw > 0)
      std::printf("  [ok]   cuda:%d: pinned host-to-device copies reach %.1f GB/s\n", c, bw);
  }
  json checks = json::array();
  for (const diag::Check& c : diag::static_checks(in)) {
    std::printf("  [%-4s] %s\n", diag::check_status_name(c.status), c.what.c_str());
    if (!c.fix.empty() &&
        (c.status == diag::CheckStatus::warn || c.status == diag::CheckStatus::fail))
      std::printf("         fix: %s\n", c.fix.c_str());
    checks.push_back(
        {{"status", diag::check_status_name(c.status)}, {"what", c.what}, {"fix", c.fix}});
    if (checks_out) checks_out->push_back(c);
  }
  std::fflush(stdout);
  return checks;
}

}  // namespace stoker::cli::doctor
