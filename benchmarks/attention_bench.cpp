// Causal self-attention core throughput on the GPU (ops::attention_forward / _backward) at
// GPT-2 124M's shape by default: B = 16, T = 1024, H = 12, D = 64, bf16.
//
// Columns: time per call (CUDA events around 10 back-to-back calls after warm-up, as in
// stoker_gemm_bench); FLOP/s = the GEMM FLOPs of the call over its time — forward 2 GEMMs of
// 2*B*H*T*T*D, backward 4 — counting the full T x T products (the causal half is computed
// and masked, not skipped); bytes/s = the T x T traffic of the softmax pass(es) (forward: read
// S up to the diagonal, write P; backward: read dP and P up to the diagonal, write dS) over the
// call's time, for comparison with the ~4.8 TB/s of an H200's HBM. Correctness: batch element 0
// is compared with the CPU reference (relative L2 error of out and dqkv reported, the run fails
// above 3e-2 / bf16).
//
// BM_CudaFlashAttention: the fused kernels (ops/flash_attention.h, bf16/f16, D 64) on the same
// shapes. FLOP/s uses the same nominal count as above (2 or 4 full T x T GEMMs), so the two
// rows compare as inverse times; the fused backward really runs 5 half-size (causal) products,
// recomputing S. No bytes/s column: nothing of size T x T is read or written. Correctness:
// batch element 0 against the CPU reference (f32 math path on the same rounded inputs).
//
// BM_CudaFlashAttentionGqa: the fused kernels at Llama 3.2's grouped-query shapes (1B: H 32,
// KV 8, D 64; 3B: H 24, KV 8, D 128; B 4, T 2048, causal, bf16), forward ("fwd") and forward +
// backward ("fwd+bwd", the training step's cost), with TFLOP/s by the causal count that
// benchmarks/peers/torch_attention.py also uses: 2 B T^2 H D forward (QK^T and PV over half
// the scores of the H query heads), 2.5 times that backward, so fwd+bwd is 3.5 times it.
// Correctness: batch element 0 against the CPU math path (ops::attention_forward in f32 on the
// same rounded inputs, the kv heads repeated to H), relative L2 error below 3e-2.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "bench_context.h"
#include "ops/flash_attention.h"
#include "stoker/ops/attention.h"
#include "stoker/stoker.h"

namespace {

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace ops = stoker::ops;

DType dtype_arg(int64_t v) { return v == 0 ? DType::f32 : v == 1 ? DType::f16 : DType::bf16; }

double rel_l2(const Tensor& got_t, const Tensor& want_t) {
  const std::vector<float> got = got_t.to_floats(), want = want_t.to_floats();
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    norm += want[i] * static_cast<double>(want[i]);
  }
  return std::sqrt(err / norm);
}

struct Problem {
  int64_t b, t, h, d;
  Tensor qkv, dout, out, heads, probs, dqkv;
  Problem(int64_t b_, int64_t t_, int64_t h_, int64_t d_, DType dt, Device dev)
      : b(b_), t(t_), h(h_), d(d_) {
    const int64_t c = h * d;
    qkv = Tensor::empty({b, t, 3 * c}, dt, dev);
    ops::random_normal(qkv, 0.0f, 1.0f, 1, 0);
    dout = Tensor::empty({b, t, c}, dt, dev);
    ops::random_normal(dout, 0.0f, 1.0f, 2, 0);
    out = Tensor::empty({b, t, c}, dt, dev);
    heads = Tensor::empty({3, b, h, t, d}, dt, dev);
    probs = Tensor::empty({b, h, t, t}, dt, dev);
    dqkv = Tensor::empty({b, t, 3 * c}, dt, dev);
  }
  void forward() { ops::attention_forward(out, heads, probs, qkv, h); }
  void backward() { ops::attention_backward(dqkv, dout, heads, probs); }
};

// Times p.forward() (or p.backward() when `bwd`) on the GPU with events, 10 calls per
// iteration, after 3 untimed ones (GEMM plans and autotuning, clocks).
template <typename P>
void time_calls(benchmark::State& state, P& p, bool bwd, Device gpu) {
  const stoker::Stream stream = stoker::core::current_stream(gpu);
  for (int i = 0; i < 3; ++i) bwd ? p.backward() : p.forward();
  stream.synchronize();
  constexpr int kCalls = 10;
  auto start = stoker::Event::create(gpu, true), stop = stoker::Event::create(gpu, true);
  for (auto _ : state) {
    start.record(stream);
    for (int i = 0; i < kCalls; ++i) bwd ? p.backward() : p.forward();
    stop.record(stream);
    stop.synchronize();
    state.SetIterationTime(stoker::Event::elapsed_ms(start, stop) / 1e3 / kCalls);
  }
}

// args: {B, T, H, D, dtype (0 f32, 1 f16, 2 bf16), backward (0: forward only)}
void BM_CudaAttention(benchmark::State& state) {
  if (stoker::core::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t b = state.range(0), t = state.range(1), h = state.range(2), d = state.range(3);
  const DType dt = dtype_arg(state.range(4));
  const bool bwd = state.range(5) != 0;
  const Device gpu = Device::cuda(0);
  Problem p(b, t, h, d, dt, gpu);
  p.forward();  // the backward reads what the forward saved
  time_calls(state, p, bwd, gpu);
  const double gemm = 2.0 * b * h * t * t * d;
  const double tt = static_cast<double>(b * h) * t * t * stoker::core::dtype_size(dt);
  state.counters["FLOP/s"] =
      benchmark::Counter((bwd ? 4 : 2) * gemm * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["bytes/s"] =
      benchmark::Counter((bwd ? 2.0 : 1.5) * tt * state.iterations(), benchmark::Counter::kIsRate);

  // Batch element 0 against the CPU reference.
  Problem ref(1, t, h, d, dt, Device::cpu());
  ops::copy(ref.qkv, p.qkv.slice(0, 1));
  ops::copy(ref.dout, p.dout.slice(0, 1));
  ref.forward();
  ref.backward();
  Problem one(1, t, h, d, dt, gpu);  // the GPU on the same element, forward and backward
  ops::copy(one.qkv, p.qkv.slice(0, 1));
  ops::copy(one.dout, p.dout.slice(0, 1));
  one.forward();
  one.backward();
  const double err_out = rel_l2(one.out, ref.out), err_grad = rel_l2(one.dqkv, ref.dqkv);
  state.counters["err_out"] = err_out;
  state.counters["err_dqkv"] = err_grad;
  const double tol = dt == DType::f32 ? 1e-4 : 3e-2;
  if (!(err_out < tol && err_grad < tol))
    state.SkipWithError("attention does not match the CPU reference");
}

Tensor as_f32(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  Tensor f = Tensor::empty(host.shape(), DType::f32);
  ops::cast(f, host);
  return f;
}

// The fused kernels' tensors for H query and KV key/value heads of dim D (KV = H: multi-head).
struct FlashProblem {
  int64_t b, t, h, kv, d;
  Tensor qkv, dout, out, lse, dqkv;
  FlashProblem(int64_t b_, int64_t t_, int64_t h_, int64_t kv_, int64_t d_, DType dt, Device dev)
      : b(b_), t(t_), h(h_), kv(kv_), d(d_) {
    qkv = Tensor::empty({b, t, (h + 2 * kv) * d}, dt, dev);
    ops::random_normal(qkv, 0.0f, 1.0f, 1, 0);
    dout = Tensor::empty({b, t, h * d}, dt, dev);
    ops::random_normal(dout, 0.0f, 1.0f, 2, 0);
    out = Tensor::empty({b, t, h * d}, dt, dev);
    lse = Tensor::empty({b, h, t}, DType::f32, dev);
    dqkv = Tensor::empty({b, t, (h + 2 * kv) * d}, dt, dev);
  }
  void forward() { ops::flash_attention_forward(out, lse, qkv, h, kv); }
  void backward() { ops::flash_attention_backward(dqkv, dout, qkv, out, lse, h, kv); }
};

// Both passes, for the fwd+bwd rows.
struct FlashStep {
  FlashProblem& p;
  void forward() { p.forward(); }
  void backward() {
    p.forward();
    p.backward();
  }
};

// Batch element 0 of `p` against the CPU math path in f32 on the same rounded inputs, its kv
// heads repeated to H (transformers' repeat_kv) and their gradients summed back over each
// group: relative L2 errors of out and dqkv.
std::pair<double, double> flash_error(const FlashProblem& p, DType dt, Device gpu) {
  FlashProblem one(1, p.t, p.h, p.kv, p.d, dt, gpu);
  ops::copy(one.qkv, p.qkv.slice(0, 1));
  ops::copy(one.dout, p.dout.slice(0, 1));
  one.forward();
  one.backward();
  const int64_t t = p.t, h = p.h, kv = p.kv, d = p.d, group = h / kv;
  const int64_t w = (h + 2 * kv) * d, wm = 3 * h * d;
  const std::vector<float> x = one.qkv.to_floats();
  std::vector<float> xm(static_cast<size_t>(t * wm));
  for (int64_t i = 0; i < t; ++i)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t e = 0; e < d; ++e) {
        const int64_t g = hh / group;
        xm[i * wm + hh * d + e] = x[i * w + hh * d + e];
        xm[i * wm + (h + hh) * d + e] = x[i * w + (h + g) * d + e];
        xm[i * wm + (2 * h + hh) * d + e] = x[i * w + (h + kv + g) * d + e];
      }
  const Tensor qkv = Tensor::from_floats(xm, {1, t, wm});
  const Tensor dout = as_f32(one.dout);
  const Tensor out = Tensor::empty({1, t, h * d}, DType::f32);
  const Tensor heads = Tensor::empty({3, 1, h, t, d}, DType::f32);
  const Tensor probs = Tensor::empty({1, h, t, t}, DType::f32);
  const Tensor dqkv_m = Tensor::empty({1, t, wm}, DType::f32);
  ops::attention_forward(out, heads, probs, qkv, h);
  ops::attention_backward(dqkv_m, dout, heads, probs);
  const std::vector<float> gm = dqkv_m.to_floats();
  std::vector<float> g(static_cast<size_t>(t * w), 0.0f);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t e = 0; e < d; ++e) {
        const int64_t kvh = hh / group;
        g[i * w + hh * d + e] = gm[i * wm + hh * d + e];
        g[i * w + (h + kvh) * d + e] += gm[i * wm + (h + hh) * d + e];
        g[i * w + (h + kv + kvh) * d + e] += gm[i * wm + (2 * h + hh) * d + e];
      }
  return {rel_l2(as_f32(one.out), out),
          rel_l2(as_f32(one.dqkv), Tensor::from_floats(g, {1, t, w}))};
}

// args: {B, T, H, D (must be 64), dtype (1 f16, 2 bf16), backward (0: forward only)}
void BM_CudaFlashAttention(benchmark::State& state) {
  if (stoker::core::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t b = state.range(0), t = state.range(1), h = state.range(2), d = state.range(3);
  const DType dt = dtype_arg(state.range(4));
  const bool bwd = state.range(5) != 0;
  const Device gpu = Device::cuda(0);
  FlashProblem p(b, t, h, h, d, dt, gpu);
  if (!ops::flash_attention_supported(p.qkv, h, h)) {
    state.SkipWithError("shape or dtype not supported by the fused kernels");
    return;
  }
  p.forward();  // the backward reads out and lse
  time_calls(state, p, bwd, gpu);
  const double gemm = 2.0 * b * h * t * t * d;
  state.counters["FLOP/s"] =
      benchmark::Counter((bwd ? 4 : 2) * gemm * state.iterations(), benchmark::Counter::kIsRate);

  // Batch element 0 against the CPU reference (the math path in f32 on the same inputs).
  const auto [err_out, err_grad] = flash_error(p, dt, gpu);
  state.counters["err_out"] = err_out;
  state.counters["err_dqkv"] = err_grad;
  if (!(err_out < 3e-2 && err_grad < 3e-2))
    state.SkipWithError("fused attention does not match the CPU reference");
}

// args: {B, T, H, KV, D, fwd+bwd (0: forward only)}; bf16, causal.
void BM_CudaFlashAttentionGqa(benchmark::State& state) {
  if (stoker::core::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t b = state.range(0), t = state.range(1), h = state.range(2), kv = state.range(3),
                d = state.range(4);
  const bool bwd = state.range(5) != 0;
  const Device gpu = Device::cuda(0);
  FlashProblem p(b, t, h, kv, d, DType::bf16, gpu);
  if (!ops::flash_attention_supported(p.qkv, h, kv)) {
    state.SkipWithError("shape not supported by the fused kernels");
    return;
  }
  FlashStep step{p};
  time_calls(state, step, bwd, gpu);
  const double causal = 2.0 * b * t * t * h * d;  // the forward's causal FLOPs
  state.counters["TFLOP/s"] = benchmark::Counter(
      (bwd ? 3.5 : 1.0) * causal / 1e12 * state.iterations(), benchmark::Counter::kIsRate);
  const auto [err_out, err_grad] = flash_error(p, DType::bf16, gpu);
  state.counters["err_out"] = err_out;
  state.counters["err_dqkv"] = err_grad;
  if (!(err_out < 3e-2 && err_grad < 3e-2))
    state.SkipWithError("fused attention does not match the CPU reference");
}

}  // namespace

BENCHMARK(BM_CudaFlashAttentionGqa)
    ->ArgNames({"B", "T", "H", "KV", "D", "bwd"})
    ->Args({4, 2048, 32, 8, 64, 0})
    ->Args({4, 2048, 32, 8, 64, 1})
    ->Args({4, 2048, 24, 8, 128, 0})
    ->Args({4, 2048, 24, 8, 128, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_CudaFlashAttention)
    ->ArgNames({"B", "T", "H", "D", "dtype", "bwd"})
    ->Args({16, 1024, 12, 64, 2, 0})
    ->Args({16, 1024, 12, 64, 2, 1})
    ->Args({16, 1024, 12, 64, 1, 0})
    ->Args({16, 1024, 12, 64, 1, 1})
    ->Args({8, 2048, 12, 64, 2, 0})
    ->Args({8, 2048, 12, 64, 2, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_CudaAttention)
    ->ArgNames({"B", "T", "H", "D", "dtype", "bwd"})
    ->Args({16, 1024, 12, 64, 2, 0})
    ->Args({16, 1024, 12, 64, 2, 1})
    ->Args({16, 1024, 12, 64, 1, 0})
    ->Args({16, 1024, 12, 64, 1, 1})
    ->Args({8, 2048, 12, 64, 2, 0})
    ->Args({8, 2048, 12, 64, 2, 1})
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
