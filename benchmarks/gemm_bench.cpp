// GEMM throughput: stoker::ops::gemm on the CPU (against the BLAS library called directly, to
// show the wrapper costs nothing) and on the GPU through cuBLASLt (bf16 8192^3 against the
// H200's ~790 TFLOP/s measured ceiling).
//
// Counters: FLOP/s = 2*M*N*K / time (Google Benchmark prints it scaled: G = 1e9, T = 1e12).
// GPU times come from CUDA events around 10 back-to-back calls (manual time, per call), after
// warm-up; inputs are
// random normal (never zeros: zeros run faster than real data). Every benchmark checks its
// result against a CPU reference on a few rows and fails loudly on a mismatch.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "bench_context.h"
#include "stoker/stoker.h"

namespace {

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace ops = stoker::ops;

Tensor random_matrix(int64_t rows, int64_t cols, DType dtype, Device device, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, dtype, device);
  ops::random_normal(t, 0.0f, 1.0f, seed, 0);
  return t;
}

// Max relative error of rows [0, check_rows) of C = A * B (row-major, no transposes) against
// the CPU GEMM in fp32 on the same (rounded) inputs; relative to the row's L2 norm.
double check_rows(const Tensor& c, const Tensor& a, const Tensor& b, int64_t check_rows) {
  const Tensor a_rows = a.slice(0, check_rows).to(Device::cpu());
  const Tensor b_cpu = b.to(Device::cpu());
  Tensor ref = Tensor::empty({check_rows, c.size(1)}, DType::f32, Device::cpu());
  ops::gemm(ref, a_rows, b_cpu);
  const std::vector<float> got = c.slice(0, check_rows).to_floats();
  const std::vector<float> want = ref.to_floats();
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    norm += want[i] * static_cast<double>(want[i]);
  }
  return std::sqrt(err / norm);
}

void set_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops_per_iter * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_CpuGemmStoker(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = random_matrix(n, n, DType::f32, Device::cpu(), 1);
  const Tensor b = random_matrix(n, n, DType::f32, Device::cpu(), 2);
  Tensor c = Tensor::empty({n, n}, DType::f32, Device::cpu());
  for (auto _ : state) {
    ops::gemm(c, a, b);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, ops::gemm_flops(n, n, n));
}

void BM_CpuGemmBlasDirect(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const Tensor a = random_matrix(n, n, DType::f32, Device::cpu(), 1);
  const Tensor b = random_matrix(n, n, DType::f32, Device::cpu(), 2);
  Tensor c = Tensor::empty({n, n}, DType::f32, Device::cpu());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n,
                b.data<float>(), n, 0.0f, c.data<float>(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, ops::gemm_flops(n, n, n));
}

// args: {n, dtype of A/B (0 f32, 1 f16, 2 bf16), tf32, C in f32 (else C in the input dtype)}
void BM_CudaGemm(benchmark::State& state) {
  if (stoker::core::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t n = state.range(0);
  const DType dtype = state.range(1) == 0   ? DType::f32
                      : state.range(1) == 1 ? DType::f16
                                            : DType::bf16;
  ops::set_allow_tf32(state.range(2) != 0);
  const Device gpu = Device::cuda(0);
  const Tensor a = random_matrix(n, n, dtype, gpu, 11);
  const Tensor b = random_matrix(n, n, dtype, gpu, 12);
  Tensor c = Tensor::empty({n, n}, state.range(3) ? DType::f32 : dtype, gpu);
  const stoker::Stream stream = stoker::core::current_stream(gpu);
  for (int i = 0; i < 3; ++i) ops::gemm(c, a, b);  // warm-up: handle, heuristic, clocks
  stream.synchronize();
  // Each iteration times kCalls back-to-back calls between two events, as a training step
  // issues them: the host sync between iterations would otherwise idle the GPU and time the
  // clock ramp-up, not the GEMM. Reported time is per call.
  constexpr int kCalls = 10;
  auto start = stoker::Event::create(gpu, true), stop = stoker::Event::create(gpu, true);
  for (auto _ : state) {
    start.record(stream);
    for (int i = 0; i < kCalls; ++i) ops::gemm(c, a, b);
    stop.record(stream);
    stop.synchronize();
    state.SetIterationTime(stoker::Event::elapsed_ms(start, stop) / 1e3 / kCalls);
  }
  set_flops(state, ops::gemm_flops(n, n, n));
  // fp32 accumulation over k terms: relative error ~ the output's rounding.
  const double err = check_rows(c, a, b, 2);
  const double tol = dtype == DType::f32 ? (state.range(2) ? 5e-3 : 1e-5) : 1e-2;
  state.counters["rel_err"] = err;
  if (!(err < tol)) state.SkipWithError("result does not match the CPU reference");
  ops::set_allow_tf32(false);
}

}  // namespace

BENCHMARK(BM_CpuGemmStoker)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(2048)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuGemmBlasDirect)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(2048)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaGemm)
    ->ArgNames({"n", "dtype", "tf32", "out_f32"})
    ->Args({8192, 2, 0, 0})
    ->Args({8192, 2, 0, 1})
    ->Args({4096, 2, 0, 0})
    ->Args({8192, 1, 0, 0})
    ->Args({8192, 0, 1, 1})
    ->Args({8192, 0, 0, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::fputs(stoker::bench::add_context().c_str(), stdout);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
