// Device: where a tensor lives and where an op runs (`cpu` or `cuda:N`).
//
// `cuda_device_count()` is 0 on machines without a GPU or driver, and in CPU-only builds; it
// never throws, so programs can pick `best_device()` and run anywhere.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::core {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }

  constexpr bool is_cpu() const { return kind == DeviceKind::cpu; }
  constexpr bool is_cuda() const { return kind == DeviceKind::cuda; }
  constexpr bool operator==(const Device&) const = default;

  std::string str() const;  // "cpu" or "cuda:0"
};

// "cpu", "cuda", "cuda:1"; throws stoker::Error naming the string otherwise.
Device parse_device(std::string_view name);

// Number of usable CUDA devices (0 without GPU/driver or in a CPU-only build).
int cuda_device_count();

// cuda:0 when a GPU is usable, else cpu.
Device best_device();

// True when this library was built with the CUDA backend.
bool built_with_cuda();

// A CUDA device's compute capability as major * 10 + minor (90 for Hopper's sm_90, 89 for Ada);
// 0 for the CPU. Throws stoker::Error for a CUDA device that does not exist.
int compute_capability(Device d);

// One line describing the device: "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)" or the CPU model.
std::string describe_device(Device d);

std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace stoker::core

namespace stoker {
using core::Device;
}  // namespace stoker

// What this build of stoker is and which libraries it runs with (for the demo, logs, doctor).
namespace stoker::core {

// "0.1.0"
const char* version();

struct LibraryVersion {
  std::string name;     // "CUDA runtime", "cuBLASLt", "oneTBB", ...
  std::string version;  // as the library reports it at run time; "not built" when absent
};

// Versions reported by the libraries themselves at run time (not the headers compiled against).
std::vector<LibraryVersion> library_versions();

}  // namespace stoker::core
