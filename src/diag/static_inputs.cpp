#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "diag/doctor.h"
#include "stoker/core/device.h"

namespace stoker::diag {

StaticInputs collect_static_inputs(const std::string& nvml_library) {
  StaticInputs in;
  in.gpus = query_gpus(nvml_library);
  in.libraries = core::library_versions();
  in.built_with_cuda = core::built_with_cuda();
  in.cuda_devices = core::cuda_device_count();
  in.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  in.cpu = core::describe_device(Device::cpu());
  in.self_pid = static_cast<unsigned>(::getpid());
  // NVML sees every GPU of the machine (CUDA_VISIBLE_DEVICES does not apply to it): the pairs
  // that matter are those between the job's GPUs, matched by PCI bus id (CUDA builds).
  std::vector<int> job_gpus;  // NVML indices of the GPUs CUDA gives this process
  for (int c = 0; c < in.cuda_devices; ++c) {
    const std::string bus = cuda_pci_bus_id(c);
    for (const GpuInfo& g : in.gpus.gpus)
      if (!bus.empty() && same_pci_device(bus, g.pci_bus_id)) job_gpus.push_back(g.index);
  }
  if (!job_gpus.empty())
    std::erase_if(in.gpus.links, [&](const GpuLink& l) {
      return std::find(job_gpus.begin(), job_gpus.end(), l.a) == job_gpus.end() ||
             std::find(job_gpus.begin(), job_gpus.end(), l.b) == job_gpus.end();
    });
  return in;
}

}  // namespace stoker::diag
