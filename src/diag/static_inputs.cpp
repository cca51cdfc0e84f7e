#include <unistd.h>

#include <thread>

#include "stoker/core/device.h"
#include "stoker/diag/doctor.h"

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
  return in;
}

}  // namespace stoker::diag
