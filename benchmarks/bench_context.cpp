#include "bench_context.h"

#include <benchmark/benchmark.h>

#include "stoker/stoker.h"

namespace stoker::bench {

std::string add_context() {
  std::string text;
  auto add = [&](const std::string& k, const std::string& v) {
    benchmark::AddCustomContext(k, v);
    text += k + ": " + v + "\n";
  };
  add("cpu", core::describe_device(Device::cpu()));
  const int gpus = core::cuda_device_count();
  add("gpus", std::to_string(gpus));
  for (int i = 0; i < gpus; ++i)
    add("cuda:" + std::to_string(i), core::describe_device(Device::cuda(i)));
  for (const auto& lib : core::library_versions()) add(lib.name, lib.version);
  return text;
}

}  // namespace stoker::bench
