// stoker demo: what this machine offers and a first computation on it.
//
// Finds the best device (the first GPU, else the CPU), prints the libraries stoker runs with,
// fills two matrices with Philox random numbers, multiplies them (bf16 on the GPU, fp32 on the
// CPU), checks a few rows against the CPU reference and reports the throughput and memory.
// (The README's demo is now stoker_classifier, scripts/demo.sh; this stays as a quick check.)
//   stoker_demo [DEVICE]     DEVICE: auto (default), cpu, cuda or cuda:N
// Exit status 0 when the check passes, 1 on a mismatch or an error, CLI11's codes for bad
// arguments.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/program.h"
#include "stoker/stoker.h"

namespace ops = stoker::ops;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;

int main(int argc, char** argv) {
  std::string device_name = "auto";
  CLI::App app{"stoker_demo: this machine's devices and libraries, and a first checked GEMM"};
  app.add_option("device", device_name, "auto, cpu or cuda[:N]")->capture_default_str();
  return stoker::program::run("stoker_demo", app, argc, argv, [&] {
    const Device device = stoker::program::device(device_name, "DEVICE");
    std::printf("stoker %s demo\n\n", stoker::core::version());
    for (const auto& lib : stoker::core::library_versions())
      std::printf("  %-24s %s\n", lib.name.c_str(), lib.version.c_str());
    std::printf("\n  device                   %s: %s\n", device.str().c_str(),
                stoker::core::describe_device(device).c_str());
    if (device.is_cpu() && stoker::core::built_with_cuda())
      std::printf("  (no usable GPU found: running on the CPU)\n");

    const int64_t n = device.is_cuda() ? 8192 : 1024;
    const DType dtype = device.is_cuda() ? DType::bf16 : DType::f32;
    Tensor a = Tensor::empty({n, n}, dtype, device);
    Tensor b = Tensor::empty({n, n}, dtype, device);
    Tensor c = Tensor::empty({n, n}, DType::f32, device);
    stoker::Generator gen(/*seed=*/2026);
    ops::random_normal(a, 0.0f, 1.0f, gen);
    ops::random_normal(b, 0.0f, 1.0f, gen);

    ops::gemm(c, a, b);  // warm-up (library handles, algorithm choice)
    stoker::core::synchronize_device(device);
    const int reps = device.is_cuda() ? 20 : 3;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) ops::gemm(c, a, b);
    stoker::core::synchronize_device(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tflops = ops::gemm_flops(n, n, n) * reps / s / 1e12;

    // Check 4 rows against the CPU reference on the same rounded inputs.
    const int64_t rows = 4;
    Tensor ref = Tensor::empty({rows, n}, DType::f32, Device::cpu());
    ops::gemm(ref, a.slice(0, rows).to(Device::cpu()), b.to(Device::cpu()));
    const auto got = c.slice(0, rows).to_floats();
    const auto want = ref.to_floats();
    double err = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += double(got[i] - want[i]) * (got[i] - want[i]);
      norm += double(want[i]) * want[i];
    }
    const double rel = std::sqrt(err / norm);

    std::printf("\n  gemm %s %lldx%lldx%lld (fp32 accumulate): %.2f ms/call, %.1f %s\n",
                std::string(stoker::core::dtype_name(dtype)).c_str(), (long long)n, (long long)n,
                (long long)n, s / reps * 1e3, tflops >= 1 ? tflops : tflops * 1e3,
                tflops >= 1 ? "TFLOP/s" : "GFLOP/s");
    std::printf("  check against the CPU reference (%lld rows): relative error %.2e %s\n",
                (long long)rows, rel, rel < 1e-2 ? "OK" : "MISMATCH");
    std::printf("  memory %s\n", stoker::core::format_memory_stats(device).c_str());
    return rel < 1e-2 ? 0 : 1;
  });
}
