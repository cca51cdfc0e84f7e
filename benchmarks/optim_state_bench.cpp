// Optimizer state formats on the CPU (the reference backend, oneTBB over every core the process
// may use: `taskset -c 0` measures one core): block-wise 8-bit quantization alone and the AdamW
// update of one 4M-value parameter with f32, bf16 and 8-bit (block 2048) moments.
//
// Counters: bytes/s = the bytes each call must move (every tensor read once plus every tensor
// written once: AdamW 28 / 20 / 16 bytes per value for f32 / bf16 / 8-bit state, plus the
// absmax scales; quantize 4 + 1) over wall time; values/s = parameter values per second (G =
// 1e9). The GPU numbers of the same update come from stoker_ops_bench's BM_AdamWStateFormat.
// Each benchmark checks what it timed and stops with an error on a mismatch: quantization
// against its round-trip bound; the 8-bit update against the f32 update of the decoded moments
// (identical parameters) and re-quantization of its results (identical codes).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_context.h"
#include "stoker/stoker.h"

namespace {

using stoker::DType;
using stoker::Tensor;
namespace ops = stoker::ops;

constexpr int64_t kValues = int64_t{1} << 22;
constexpr int64_t kBlock = 2048;

Tensor normal(int64_t n, uint64_t seed, float std) {
  Tensor t = Tensor::empty({n}, DType::f32);
  ops::random_normal(t, 0.0f, std, seed, 0);
  return t;
}

// Moment-like values: exp_avg ~ N(0, 1e-3); exp_avg_sq its square (many decades per block).
Tensor moment(int64_t n, uint64_t seed, bool is_signed) {
  Tensor t = normal(n, seed, 1e-3f);
  if (!is_signed) ops::mul(t, t, t);
  return t;
}

void BM_QuantizeCpu(benchmark::State& state) {
  const bool is_signed = state.range(0) != 0;
  const Tensor x = moment(kValues, 1, is_signed);
  Tensor codes = Tensor::empty({kValues}, DType::u8);
  Tensor absmax = Tensor::empty({ops::quantization_blocks(kValues, kBlock)}, DType::f32);
  for (auto _ : state) ops::quantize_blockwise(codes, absmax, x, is_signed, kBlock);
  const double bytes = 5.0 * kValues + 4.0 * absmax.numel();
  state.counters["bytes/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
  state.counters["values/s"] =
      benchmark::Counter(static_cast<double>(kValues) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  // Round trip within half the map's largest gap times the absmax (plus f32 rounding).
  Tensor back = Tensor::empty({kValues}, DType::f32);
  ops::dequantize_blockwise(back, codes, absmax, is_signed, kBlock);
  const auto v = x.to_floats(), r = back.to_floats(), am = absmax.to_floats();
  const double half_gap = 0.5 * ops::dynamic_map_max_gap(is_signed);
  for (int64_t i = 0; i < kValues; ++i) {
    const double a = am[i / kBlock];
    if (std::fabs(double(r[i]) - v[i]) > half_gap * a + 4 * a * 0x1p-24) {
      state.SkipWithError("a value does not round-trip within the bound");
      return;
    }
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// One AdamW step over state in `form`: 0 f32, 1 bf16, 2 8-bit.
void BM_AdamWStateCpu(benchmark::State& state) {
  const int form = static_cast<int>(state.range(0));
  const DType dtype = form == 0 ? DType::f32 : form == 1 ? DType::bf16 : DType::u8;
  std::vector<Tensor> p{normal(kValues, 2, 1.0f)}, g{normal(kValues, 3, 1e-2f)};
  std::vector<ops::StateTensor> m(1), v(1);
  for (int k = 0; k < 2; ++k) {
    ops::StateTensor& s = k == 0 ? m[0] : v[0];
    const Tensor f = moment(kValues, 4 + k, k == 0);
    s.values = Tensor::empty({kValues}, dtype);
    if (dtype == DType::f32) {
      ops::copy(s.values, f);
    } else if (dtype == DType::bf16) {
      ops::cast(s.values, f);
    } else {
      s.absmax = Tensor::empty({ops::quantization_blocks(kValues, kBlock)}, DType::f32);
      ops::quantize_blockwise(s.values, s.absmax, f, k == 0, kBlock);
    }
  }
  const ops::AdamWHyper h{.lr = 1e-3f, .weight_decay = 0.01f, .step = 10};
  const ops::StateStorage st{.block = kBlock};
  for (auto _ : state) ops::adamw_step(p, g, m, v, h, st);
  const double per_value = form == 0 ? 28.0 : form == 1 ? 20.0 : 16.0;
  const double bytes =
      per_value * kValues + (form == 2 ? 2 * 8.0 * ops::quantization_blocks(kValues, kBlock) : 0);
  state.counters["bytes/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
  state.counters["values/s"] =
      benchmark::Counter(static_cast<double>(kValues) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  if (form != 2) return;
  // One more 8-bit step against the f32 step of the decoded moments: identical parameters, and
  // codes identical to quantizing the f32 step's moments.
  std::vector<Tensor> pq{p[0].clone()}, pf{p[0].clone()}, mf(1), vf(1);
  for (int k = 0; k < 2; ++k) {
    const ops::StateTensor& s = k == 0 ? m[0] : v[0];
    Tensor& f = k == 0 ? mf[0] : vf[0];
    f = Tensor::empty({kValues}, DType::f32);
    ops::dequantize_blockwise(f, s.values, s.absmax, k == 0, kBlock);
  }
  ops::adamw_step(pq, g, m, v, h, st);
  ops::adamw_step(pf, g, mf, vf, h);
  if (!same_bytes(pq[0], pf[0])) {
    state.SkipWithError("8-bit update differs from the f32 update of the decoded moments");
    return;
  }
  for (int k = 0; k < 2; ++k) {
    const ops::StateTensor& s = k == 0 ? m[0] : v[0];
    Tensor codes = Tensor::empty({kValues}, DType::u8);
    Tensor absmax = Tensor::empty(s.absmax.shape(), DType::f32);
    ops::quantize_blockwise(codes, absmax, k == 0 ? mf[0] : vf[0], k == 0, kBlock);
    if (!same_bytes(codes, s.values) || !same_bytes(absmax, s.absmax)) {
      state.SkipWithError("8-bit update's codes differ from quantizing the f32 moments");
      return;
    }
  }
}

}  // namespace

BENCHMARK(BM_QuantizeCpu)
    ->ArgName("signed")
    ->Arg(1)
    ->Arg(0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AdamWStateCpu)
    ->ArgName("state")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::fputs(stoker::bench::add_context().c_str(), stdout);
  std::puts("BM_AdamWStateCpu/state: 0 = f32, 1 = bf16, 2 = 8-bit (block 2048)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
