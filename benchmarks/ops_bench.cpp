// Memory-bound training kernels on the GPU at the shapes of the bundled models: the GELU of the
// MLP benchmark (8192 x 4096 bf16), GPT-2 124M's LM-head cross-entropy (16384 x 50304 bf16) and
// its layer norm (16384 x 768 bf16), and the multi-tensor cast that refreshes the half compute
// copies of the MLP's weights. What bounds them is the bytes each moves, so the counter is
// bytes/s: bytes = every tensor the kernel must read once plus every tensor it writes once
// (Google Benchmark prints it scaled: G = 1e9, T = 1e12); the H200's device-to-device copy
// reaches ~4.2 TB/s (docs/benchmarks.md). Times come from CUDA events around 10 back-to-back
// calls after warm-up (manual time, per call). Each benchmark checks a slice of what it timed
// against the CPU reference and fails loudly on a mismatch. BM_AdamWStateFormat/state:0|1|2 is
// the AdamW update of the MLP's weights with f32 / bf16 / 8-bit moments. BM_MaxPoolForward,
// BM_MaxPoolBackward and BM_ResNetStemConv are ResNet-50's stem: its max pool without and with
// the argmax bytes (bytes/s) and its 7x7 convolution with 3 input channels as they are or padded
// to 4 / 8 (useful FLOP/s). BM_WeightGradBiasGrad is a GPT-2 Linear's weight gradient with its
// bias gradient as a separate pass or from the GEMM (FLOP/s of the GEMM). BM_RmsNorm*,
// BM_AddRmsNorm*, BM_Rope* and BM_SwiGlu* are Llama-3.2-1B's kernels (B 4 x T 2048 bf16); their
// bytes are the ones benchmarks/peers/torch_llama_ops.py counts for PyTorch's same ops.
// BM_LinearCrossEntropy/vocab:V/pad:0|1 is GPT-2's head + loss (forward and backward, FLOP/s)
// at vocabularies 50,257 / 50,256 / 50,304, padded to a multiple of 64 classes or not.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "bench_context.h"
#include "stoker/stoker.h"

namespace {

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace ops = stoker::ops;

bool have_gpu(benchmark::State& state) {
  if (stoker::core::cuda_device_count() > 0) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

Tensor random_tensor(const stoker::Shape& shape, DType dtype, Device device, uint64_t seed,
                     float std = 1.0f) {
  Tensor t = Tensor::empty(shape, dtype, device);
  ops::random_normal(t, 0.0f, std, seed, 0);
  return t;
}

// Times `call` (kCalls back-to-back per iteration, as a training step issues them) and sets the
// bytes/s counter from `bytes` per call.
void time_calls(benchmark::State& state, double bytes, const std::function<void()>& call) {
  const Device gpu = Device::cuda(0);
  const stoker::Stream stream = stoker::core::current_stream(gpu);
  for (int i = 0; i < 3; ++i) call();
  stream.synchronize();
  constexpr int kCalls = 10;
  auto start = stoker::Event::create(gpu, true), stop = stoker::Event::create(gpu, true);
  for (auto _ : state) {
    start.record(stream);
    for (int i = 0; i < kCalls; ++i) call();
    stop.record(stream);
    stop.synchronize();
    state.SetIterationTime(stoker::Event::elapsed_ms(start, stop) / 1e3 / kCalls);
  }
  state.counters["bytes/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

// Largest |got - want| / (rtol |want| + atol) over the first `n` elements.
double worst(const Tensor& got, const Tensor& want, int64_t n, double rtol, double atol) {
  const std::vector<float> g = got.reshape({got.numel()}).slice(0, n).to_floats();
  const std::vector<float> w = want.reshape({want.numel()}).slice(0, n).to_floats();
  double r = 0.0;
  for (int64_t i = 0; i < n; ++i)
    r = std::max(r, std::fabs(double(g[i]) - w[i]) / (rtol * std::fabs(double(w[i])) + atol));
  return r;
}

void check(benchmark::State& state, double ratio) {
  state.counters["err/tol"] = ratio;
  if (!(ratio <= 1.0)) state.SkipWithError("result does not match the CPU reference");
}

constexpr int64_t kRowsMlp = 8192, kWidthMlp = 4096;

void BM_GeluForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0);
  const Tensor x = random_tensor({kRowsMlp, kWidthMlp}, DType::bf16, gpu, 1, 2.0f);
  Tensor y = Tensor::empty(x.shape(), DType::bf16, gpu);
  time_calls(state, 2.0 * x.nbytes(), [&] { ops::gelu_forward(y, x); });
  const int64_t n = 1 << 16;
  const Tensor xc = x.reshape({x.numel()}).slice(0, n).to(Device::cpu());
  Tensor yc = Tensor::empty({n}, DType::bf16, Device::cpu());
  ops::gelu_forward(yc, xc);
  check(state, worst(y, yc, n, std::ldexp(1.0, -7), 1e-30));
}

void BM_GeluBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0);
  const Tensor x = random_tensor({kRowsMlp, kWidthMlp}, DType::bf16, gpu, 2, 2.0f);
  const Tensor dy = random_tensor({kRowsMlp, kWidthMlp}, DType::bf16, gpu, 3);
  Tensor dx = Tensor::empty(x.shape(), DType::bf16, gpu);
  time_calls(state, 3.0 * x.nbytes(), [&] { ops::gelu_backward(dx, dy, x); });
  const int64_t n = 1 << 16;
  const Tensor xc = x.reshape({x.numel()}).slice(0, n).to(Device::cpu());
  const Tensor dyc = dy.reshape({dy.numel()}).slice(0, n).to(Device::cpu());
  Tensor dxc = Tensor::empty({n}, DType::bf16, Device::cpu());
  ops::gelu_backward(dxc, dyc, xc);
  check(state, worst(dx, dxc, n, std::ldexp(1.0, -7), 1e-5));
}

constexpr int64_t kTokens = 16 * 1024, kVocab = 50304, kWidthGpt = 768;

struct Xent {
  Tensor logits, target, loss, count, lse, dlogits;
  explicit Xent(Device gpu) {
    logits = random_tensor({kTokens, kVocab}, DType::bf16, gpu, 4, 2.0f);
    std::vector<int64_t> t(kTokens);
    for (int64_t i = 0; i < kTokens; ++i) t[i] = (i * 7919) % kVocab;
    target = Tensor::from_vector<int64_t>(t, {kTokens}).to(gpu);
    loss = Tensor::empty({}, DType::f32, gpu);
    count = Tensor::empty({}, DType::f32, gpu);
    lse = Tensor::empty({kTokens}, DType::f32, gpu);
  }
  // lse of the first rows against the CPU's.
  double check_lse() const {
    const int64_t rows = 8;
    const Tensor lc = logits.slice(0, rows).to(Device::cpu());
    const Tensor tc = target.slice(0, rows).to(Device::cpu());
    Tensor l = Tensor::empty({}, DType::f32, Device::cpu()),
           c = Tensor::empty({}, DType::f32, Device::cpu());
    Tensor s = Tensor::empty({rows}, DType::f32, Device::cpu());
    ops::cross_entropy_forward(l, c, s, lc, tc, -100, 0.0f);
    return worst(lse, s, rows, 1e-6, 1e-6);
  }
};

void BM_CrossEntropyForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Xent x(Device::cuda(0));
  time_calls(state, static_cast<double>(x.logits.nbytes()), [&] {
    ops::cross_entropy_forward(x.loss, x.count, x.lse, x.logits, x.target, -100, 0.0f);
  });
  check(state, x.check_lse());
}

void BM_CrossEntropyBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Xent x(Device::cuda(0));
  ops::cross_entropy_forward(x.loss, x.count, x.lse, x.logits, x.target, -100, 0.0f);
  Tensor dl = Tensor::empty(x.logits.shape(), DType::bf16, Device::cuda(0));
  time_calls(state, 2.0 * x.logits.nbytes(), [&] {
    ops::cross_entropy_backward(dl, x.logits, x.target, x.lse, x.count, -100, 0.0f, 1.0f);
  });
  // Row 0 against the CPU's gradient on the same inputs.
  const Tensor lc = x.logits.slice(0, 1).to(Device::cpu());
  const Tensor tc = x.target.slice(0, 1).to(Device::cpu());
  Tensor l = Tensor::empty({}, DType::f32, Device::cpu()),
         c = Tensor::empty({}, DType::f32, Device::cpu());
  Tensor s = Tensor::empty({1}, DType::f32, Device::cpu());
  Tensor dc = Tensor::empty({1, kVocab}, DType::bf16, Device::cpu());
  ops::cross_entropy_forward(l, c, s, lc, tc, -100, 0.0f);
  ops::cross_entropy_backward(dc, lc, tc, s, c, -100, 0.0f, 1.0f / kTokens);
  check(state, worst(dl, dc, kVocab, std::ldexp(1.0, -7), 1e-12));
}

// GPT-2 124M's LM head and loss as the trainers run them (nn::LinearCrossEntropyLoss's
// forward_backward from a zeroed weight gradient: three GEMMs and the cross-entropy, chunked):
// x [16384, 768] bf16, weight [vocab, 768], at vocab 50,257 (GPT-2's), 50,256 (16-byte rows,
// not a multiple of 64) and 50,304, with the head padded to a multiple of 64 (pad:0, the CUDA
// default) or not (pad:1). FLOP/s counts the unpadded problem's 3 x 2 N vocab K: the useful
// rate. Checked: the loss of the first 64 rows against the CPU's unpadded head.
void BM_LinearCrossEntropy(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0);
  const int64_t vocab = state.range(0);
  const stoker::nn::LinearCrossEntropyOptions o{.pad_classes_to = state.range(1)};
  const Tensor x = random_tensor({kTokens, kWidthGpt}, DType::bf16, gpu, 61);
  std::vector<int64_t> t(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) t[i] = (i * 7919) % vocab;
  const Tensor target = Tensor::from_vector<int64_t>(t, {kTokens}).to(gpu);
  stoker::nn::Parameter w(random_tensor({vocab, kWidthGpt}, DType::f32, gpu, 62, 0.02f));
  stoker::nn::LinearCrossEntropyLoss loss(w, o);
  time_calls(state, 0.0, [&] {
    w.zero_grad();
    loss.forward_backward(x, target, 1.0f);
  });
  state.counters["padded"] = static_cast<double>(loss.padded_classes());
  state.counters["FLOP/s"] = benchmark::Counter(
      3.0 * ops::gemm_flops(kTokens, vocab, kWidthGpt) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  const int64_t rows = 64;
  const Device cpu = Device::cpu();
  stoker::nn::Parameter wc(w.value().to(cpu));
  stoker::nn::LinearCrossEntropyLoss ref(wc, {.pad_classes_to = 1});
  const Tensor got = loss.forward(x.slice(0, rows), target.slice(0, rows));
  const Tensor want = ref.forward(x.slice(0, rows).to(cpu), target.slice(0, rows).to(cpu));
  check(state, worst(got, want, 1, 1e-3, 1e-3));
}

struct Norm {
  Tensor x, gamma, beta, y, mean, rstd;
  explicit Norm(Device gpu) {
    x = random_tensor({kTokens, kWidthGpt}, DType::bf16, gpu, 5);
    gamma = random_tensor({kWidthGpt}, DType::f32, gpu, 6);
    beta = random_tensor({kWidthGpt}, DType::f32, gpu, 7);
    y = Tensor::empty(x.shape(), DType::bf16, gpu);
    mean = Tensor::empty({kTokens}, DType::f32, gpu);
    rstd = Tensor::empty({kTokens}, DType::f32, gpu);
  }
};

void BM_LayerNormForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Norm m(Device::cuda(0));
  time_calls(state, 2.0 * m.x.nbytes(),
             [&] { ops::layernorm_forward(m.y, m.mean, m.rstd, m.x, m.gamma, m.beta, 1e-5f); });
  const int64_t rows = 64;
  const Device cpu = Device::cpu();
  Tensor yc = Tensor::empty({rows, kWidthGpt}, DType::bf16, cpu);
  Tensor mc = Tensor::empty({rows}, DType::f32, cpu), rc = Tensor::empty({rows}, DType::f32, cpu);
  ops::layernorm_forward(yc, mc, rc, m.x.slice(0, rows).to(cpu), m.gamma.to(cpu), m.beta.to(cpu),
                         1e-5f);
  check(state, worst(m.y, yc, rows * kWidthGpt, std::ldexp(1.0, -7), 1e-4));
}

void BM_LayerNormBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0);
  Norm m(gpu);
  ops::layernorm_forward(m.y, m.mean, m.rstd, m.x, m.gamma, m.beta, 1e-5f);
  const Tensor dy = random_tensor(m.x.shape(), DType::bf16, gpu, 8);
  Tensor dx = Tensor::empty(m.x.shape(), DType::bf16, gpu);
  Tensor dgamma = Tensor::zeros({kWidthGpt}, DType::f32, gpu);
  Tensor dbeta = Tensor::zeros({kWidthGpt}, DType::f32, gpu);
  time_calls(state, 3.0 * m.x.nbytes(),
             [&] { ops::layernorm_backward(dx, dgamma, dbeta, dy, m.x, m.mean, m.rstd, m.gamma); });
  const int64_t rows = 64;
  const Device cpu = Device::cpu();
  Tensor dxc = Tensor::empty({rows, kWidthGpt}, DType::bf16, cpu);
  Tensor dg = Tensor::zeros({kWidthGpt}, DType::f32, cpu),
         db = Tensor::zeros({kWidthGpt}, DType::f32, cpu);
  ops::layernorm_backward(dxc, dg, db, dy.slice(0, rows).to(cpu), m.x.slice(0, rows).to(cpu),
                          m.mean.slice(0, rows).to(cpu), m.rstd.slice(0, rows).to(cpu),
                          m.gamma.to(cpu));
  check(state, worst(dx, dxc, rows * kWidthGpt, std::ldexp(1.0, -7), 1e-3));
}

// The MLP benchmark's weights: 8 x [4096, 4096] f32 masters -> bf16 compute copies.
void BM_CastMultiRefresh(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> src, dst;
  double bytes = 0;
  for (int i = 0; i < 8; ++i) {
    src.push_back(random_tensor({kWidthMlp, kWidthMlp}, DType::f32, gpu, 10 + i));
    dst.push_back(Tensor::empty({kWidthMlp, kWidthMlp}, DType::bf16, gpu));
    bytes += src.back().nbytes() + dst.back().nbytes();
  }
  time_calls(state, bytes, [&] { ops::cast_multi(dst, src); });
  const int64_t n = 1 << 16;
  Tensor want = Tensor::empty({n}, DType::bf16, Device::cpu());
  ops::cast(want, src[7].reshape({src[7].numel()}).slice(0, n).to(Device::cpu()));
  check(state, worst(dst[7], want, n, 0.0, 1e-30));
}

// AdamW over 4 of the MLP benchmark's weights (4 x [4096, 4096] = 64 Mi values, f32 masters
// and gradients, 1 GiB of them: far beyond L2) with the moments in f32 (the f32 kernel the
// optimizer uses for f32 state), bf16 and 8-bit (block 2048), as optim::AdamW runs it (step
// state on the device). bytes per value:
// p read + written, g read, and each moment read + written: 28 / 20 / 16 (+ 16 per 2048 for
// the 8-bit absmax scales). Checked: one more step of the last tensor against the CPU (state
// forms other than f32 must match it bit for bit: parameters, bf16 bits, codes, absmax).
void BM_AdamWStateFormat(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  const int form = static_cast<int>(state.range(0));  // 0 f32, 1 bf16, 2 8-bit
  constexpr int64_t kBlockQ8 = 2048;
  std::vector<Tensor> p, g;
  std::vector<ops::StateTensor> m, v;
  double bytes = 0;
  constexpr int kTensors = 4;
  for (int i = 0; i < kTensors; ++i) {
    p.push_back(random_tensor({kWidthMlp, kWidthMlp}, DType::f32, gpu, 20 + i, 0.02f));
    g.push_back(random_tensor({kWidthMlp, kWidthMlp}, DType::f32, gpu, 30 + i, 1e-3f));
    for (int k = 0; k < 2; ++k) {
      Tensor f = random_tensor({kWidthMlp, kWidthMlp}, DType::f32, gpu, 40 + 2 * i + k, 1e-3f);
      if (k == 1) ops::mul(f, f, f);
      ops::StateTensor st;
      if (form == 0) {
        st.values = f;
      } else if (form == 1) {
        st.values = Tensor::empty(f.shape(), DType::bf16, gpu);
        ops::cast(st.values, f);
      } else {
        st.values = Tensor::empty(f.shape(), DType::u8, gpu);
        st.absmax = Tensor::empty({ops::quantization_blocks(f.numel(), kBlockQ8)}, DType::f32, gpu);
        ops::quantize_blockwise(st.values, st.absmax, f, k == 0, kBlockQ8);
      }
      (k == 0 ? m : v).push_back(st);
    }
    const double per_value = form == 0 ? 28.0 : form == 1 ? 20.0 : 16.0;
    bytes += per_value * static_cast<double>(p.back().numel()) +
             (form == 2 ? 16.0 * ops::quantization_blocks(p.back().numel(), kBlockQ8) : 0.0);
  }
  const ops::AdamWHyper h{.lr = 1e-3f, .weight_decay = 0.01f};
  const ops::StateStorage storage{.block = kBlockQ8};
  const Tensor step_state = ops::adamw_step_state_create(gpu);
  const auto values = [](const std::vector<ops::StateTensor>& s) {
    std::vector<Tensor> out;
    for (const auto& x : s) out.push_back(x.values);
    return out;
  };
  const auto step = [&](std::vector<Tensor>& ps, std::vector<Tensor>& gs,
                        std::vector<ops::StateTensor>& ms, std::vector<ops::StateTensor>& vs,
                        const Tensor& st) {
    if (form == 0)
      ops::adamw_step(ps, gs, values(ms), values(vs), h, Tensor(), st);
    else
      ops::adamw_step(ps, gs, ms, vs, h, storage, Tensor(), st);
  };
  time_calls(state, bytes, [&] { step(p, g, m, v, step_state); });
  state.counters["values/s"] =
      benchmark::Counter(static_cast<double>(kTensors * kWidthMlp * kWidthMlp) *
                             static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  // One more step of the last tensor on both devices from the same state.
  const auto host = [&](const ops::StateTensor& s) {
    return ops::StateTensor{s.values.to(cpu), s.absmax.defined() ? s.absmax.to(cpu) : Tensor()};
  };
  const int last = kTensors - 1;
  std::vector<Tensor> pc{p[last].to(cpu)}, gc{g[last].to(cpu)}, pg{p[last]}, gg{g[last]};
  std::vector<ops::StateTensor> mc{host(m[last])}, vc{host(v[last])}, mg{m[last]}, vg{v[last]};
  const Tensor sc = ops::adamw_step_state_create(cpu), sg = ops::adamw_step_state_create(gpu);
  step(pc, gc, mc, vc, sc);
  step(pg, gg, mg, vg, sg);
  const auto same = [](const Tensor& a, const Tensor& b) {
    const Tensor h = b.to(Device::cpu());
    return a.nbytes() == h.nbytes() && std::memcmp(a.data(), h.data(), a.nbytes()) == 0;
  };
  if (form == 0) {  // f32 kernel: not required to match the CPU bit for bit
    check(state, worst(pg[0], pc[0], pc[0].numel(), 1e-5, 1e-7));
    return;
  }
  bool ok =
      same(pc[0], pg[0]) && same(mc[0].values, mg[0].values) && same(vc[0].values, vg[0].values);
  if (form == 2) ok = ok && same(mc[0].absmax, mg[0].absmax) && same(vc[0].absmax, vg[0].absmax);
  check(state, ok ? 0.0 : 2.0);
}

// ResNet-50's stem max pool: x [256, 112, 112, 64] bf16 NHWC, 3x3 stride 2 pad 1. `argmax:0` is
// the plain pair (cuDNN's forward; a backward from x and y that finds each window's maximum again,
// then gathers), `argmax:1` the pair nn::MaxPool2d runs (a forward that also writes the argmax
// bytes; a backward that only gathers). Bytes: the tensors each call must read and write once,
// the argmax bytes included where an op reads or writes them. Checked against the CPU on the first
// image (the NHWC kernels give the CPU's bits).
struct StemPool {
  ops::Pool2dParams p{
      .kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .layout = ops::Layout::nhwc};
  Tensor x, y, argmax, dy, dx;
  explicit StemPool(Device gpu) {
    x = random_tensor({256, 112, 112, 64}, DType::bf16, gpu, 41);
    y = Tensor::empty(ops::pool2d_output_shape(x.shape(), p), DType::bf16, gpu);
    argmax = Tensor::empty(y.shape(), DType::u8, gpu);
    dy = random_tensor(y.shape(), DType::bf16, gpu, 42);
    dx = Tensor::empty(x.shape(), DType::bf16, gpu);
  }
  static Tensor first(const Tensor& t) { return t.slice(0, 1).to(Device::cpu()); }
  static bool same(const Tensor& got, const Tensor& want) {
    const Tensor g = first(got);
    return g.nbytes() == want.nbytes() && std::memcmp(g.data(), want.data(), want.nbytes()) == 0;
  }
};

void BM_MaxPoolForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  StemPool s(Device::cuda(0));
  const bool argmax = state.range(0) == 1;
  const double bytes = double(s.x.nbytes() + s.y.nbytes() + (argmax ? s.argmax.nbytes() : 0));
  time_calls(state, bytes, [&] {
    if (argmax) {
      ops::maxpool2d_forward_argmax(s.y, s.argmax, s.x, s.p);
    } else {
      ops::maxpool2d_forward(s.y, s.x, s.p);
    }
  });
  const Tensor xc = StemPool::first(s.x);
  const Tensor want = Tensor::empty(StemPool::first(s.y).shape(), DType::bf16);
  ops::maxpool2d_forward(want, xc, s.p);
  check(state, StemPool::same(s.y, want) ? 0.0 : 2.0);
}

void BM_MaxPoolBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  StemPool s(Device::cuda(0));
  const bool argmax = state.range(0) == 1;
  ops::maxpool2d_forward_argmax(s.y, s.argmax, s.x, s.p);
  const double bytes =
      double(s.dy.nbytes() + s.dx.nbytes()) + double(argmax ? s.argmax.nbytes() : s.x.nbytes());
  time_calls(state, bytes, [&] {
    if (argmax) {
      ops::maxpool2d_backward_argmax(s.dx, s.dy, s.argmax, s.p);
    } else {
      ops::maxpool2d_backward(s.dx, s.dy, s.x, s.y, s.p);
    }
  });
  const Tensor xc = StemPool::first(s.x), yc = StemPool::first(s.y), dyc = StemPool::first(s.dy);
  const Tensor want = Tensor::empty(xc.shape(), DType::bf16);
  ops::maxpool2d_backward(want, dyc, xc, yc, s.p);
  check(state, StemPool::same(s.dx, want) ? 0.0 : 2.0);
}

// A Linear's weight and bias gradients at GPT-2 124M's MLP shapes (B*T = 16384 rows, bf16 dy and
// x, f32 dW): `fused:0` the GEMM dW = dy^T x and then ops::bias_grad's pass over dy, `fused:1` the
// GEMM writing the bias gradient too (GemmOptions::bias_grad). `out` is the layer's output width:
// 3072 (fc) or 768 (proj). FLOP/s counts the GEMM's 2 M N K; the bias gradients are checked
// against each other.
void BM_WeightGradBiasGrad(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0);
  const bool fused = state.range(0) == 1;
  const int64_t out = state.range(1), in = out == 3072 ? 768 : 3072, rows = 16384;
  const Tensor dy = random_tensor({rows, out}, DType::bf16, gpu, 51);
  const Tensor x = random_tensor({rows, in}, DType::bf16, gpu, 52);
  const Tensor dw = Tensor::empty({out, in}, DType::f32, gpu);
  const Tensor db = Tensor::zeros({out}, DType::f32, gpu);
  time_calls(state, 0.0, [&] {
    if (fused) {
      ops::gemm(dw, dy, x, {.trans_a = true, .bias_grad = &db});
    } else {
      ops::gemm(dw, dy, x, {.trans_a = true});
      ops::bias_grad(db, dy);  // accumulates: fine for timing, checked from zero below
    }
  });
  state.counters["FLOP/s"] =
      benchmark::Counter(ops::gemm_flops(out, in, rows) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  const Tensor got = Tensor::empty({out}, DType::f32, gpu);
  ops::gemm(dw, dy, x, {.trans_a = true, .bias_grad = &got});
  const Tensor want = Tensor::zeros({out}, DType::f32, gpu);
  ops::bias_grad(want, dy);
  check(state, worst(got, want, out, 1e-4, 1e-3));
}

// ResNet-50's stem convolution, x [256, 224, 224, Cin] bf16 NHWC, 64 filters 7x7 stride 2 pad 3,
// forward (pass 0) and filter gradient (pass 1), with the 3 input channels as they are (cin:3)
// or zero-padded to 4 or 8 (what a padded stem would run). The FLOP/s counter counts the
// 3-channel problem's FLOPs in every case: the useful rate.
void BM_ResNetStemConv(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0);
  const int64_t cin = state.range(0);
  const bool filter = state.range(1) == 1;
  const ops::Conv2dParams p{.stride = {2, 2}, .padding = {3, 3}, .layout = ops::Layout::nhwc};
  const Tensor x = random_tensor({256, 224, 224, cin}, DType::bf16, gpu, 43);
  const Tensor w = random_tensor({64, 7, 7, cin}, DType::bf16, gpu, 44, 0.05f);
  const Tensor y =
      Tensor::empty(ops::conv2d_output_shape(x.shape(), w.shape(), p), DType::bf16, gpu);
  const Tensor dy = random_tensor(y.shape(), DType::bf16, gpu, 45);
  const Tensor dw = Tensor::empty(w.shape(), DType::bf16, gpu);
  const double flops = 2.0 * 256 * 112 * 112 * 64 * 3 * 7 * 7;
  time_calls(state, 0.0, [&] {
    if (filter) {
      ops::conv2d_backward_filter(dw, dy, x, p);
    } else {
      ops::conv2d_forward(y, x, w, p);
    }
  });
  state.counters["FLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

// ---- Llama-3.2-1B (issue #40): 8192 rows (B 4 x T 2048) of width 2048, bf16 ----
//
// Bytes (the same counts as benchmarks/peers/torch_llama_ops.py): the bf16 activations each op
// must read once and write once; the f32 [C] weight, the f32 [N] rstd and the positions (under
// 0.5 % of the total) are not counted.
//   rmsnorm      forward: x read, y written (2 N C x 2 B);   backward: dy, x read, dx written (3)
//   add_rmsnorm  forward: x, residual read, sum, y written (4); backward: dy, dsum_in, sum read,
//                dsum written (4)
//   rope_qkv     forward and backward: the q and k heads read and written in place,
//                2 x tokens x (H + KV) D x 2 B (the value heads are not touched)
//   swiglu       forward: x [N, 2F] read, y [N, F] written (3 N F x 2 B); backward: dy [N, F],
//                x [N, 2F] read, dx [N, 2F] written (5 N F x 2 B)
// Checked on the first rows against the CPU reference: SwiGLU and the residual sum to the bit,
// the others with room for the one-ulp differences tests/ops/rmsnorm_gpu_test.cpp and
// rope_gpu_test.cpp allow.
constexpr int64_t kRowsLlama = 8192, kWidthLlama = 2048, kCheckRows = 64;
constexpr int64_t kHeadsLlama = 32, kKvHeadsLlama = 8, kHeadDimLlama = 64, kFfnLlama = 8192;
constexpr float kEpsLlama = 1e-5f;
const double kBf16Ulp = std::ldexp(1.0, -7);

Tensor first_rows(const Tensor& t, int64_t rows) { return t.slice(0, rows).to(Device::cpu()); }

struct Rms {
  Tensor x, residual, weight, sum, y, rstd;
  explicit Rms(Device gpu) {
    x = random_tensor({kRowsLlama, kWidthLlama}, DType::bf16, gpu, 61);
    residual = random_tensor(x.shape(), DType::bf16, gpu, 62);
    weight = Tensor::empty({kWidthLlama}, DType::f32, gpu);
    ops::random_normal(weight, 1.0f, 0.1f, 63, 0);  // near 1, as trained RMSNorm weights are
    sum = Tensor::empty(x.shape(), DType::bf16, gpu);
    y = Tensor::empty(x.shape(), DType::bf16, gpu);
    rstd = Tensor::empty({kRowsLlama}, DType::f32, gpu);
  }
};

void BM_RmsNormForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Rms m(Device::cuda(0));
  time_calls(state, 2.0 * m.x.nbytes(),
             [&] { ops::rmsnorm_forward(m.y, m.rstd, m.x, m.weight, kEpsLlama); });
  const Device cpu = Device::cpu();
  Tensor yc = Tensor::empty({kCheckRows, kWidthLlama}, DType::bf16, cpu);
  Tensor rc = Tensor::empty({kCheckRows}, DType::f32, cpu);
  ops::rmsnorm_forward(yc, rc, first_rows(m.x, kCheckRows), m.weight.to(cpu), kEpsLlama);
  check(state, std::max(worst(m.y, yc, kCheckRows * kWidthLlama, 2 * kBf16Ulp, 1e-3),
                        worst(m.rstd, rc, kCheckRows, 1e-5, 0.0)));
}

void BM_RmsNormBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  Rms m(gpu);
  ops::rmsnorm_forward(m.y, m.rstd, m.x, m.weight, kEpsLlama);
  const Tensor dy = random_tensor(m.x.shape(), DType::bf16, gpu, 64);
  Tensor dx = Tensor::empty(m.x.shape(), DType::bf16, gpu);
  Tensor dweight = Tensor::zeros({kWidthLlama}, DType::f32, gpu);  // accumulates while timed
  time_calls(state, 3.0 * m.x.nbytes(),
             [&] { ops::rmsnorm_backward(dx, dweight, dy, m.x, m.rstd, m.weight); });
  Tensor dxc = Tensor::empty({kCheckRows, kWidthLlama}, DType::bf16, cpu);
  Tensor dwc = Tensor::zeros({kWidthLlama}, DType::f32, cpu);
  ops::rmsnorm_backward(dxc, dwc, first_rows(dy, kCheckRows), first_rows(m.x, kCheckRows),
                        first_rows(m.rstd, kCheckRows), m.weight.to(cpu));
  check(state, worst(dx, dxc, kCheckRows * kWidthLlama, 2 * kBf16Ulp, 1e-2));
}

void BM_AddRmsNormForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Rms m(Device::cuda(0));
  time_calls(state, 4.0 * m.x.nbytes(), [&] {
    ops::add_rmsnorm_forward(m.y, m.sum, m.rstd, m.x, m.residual, m.weight, kEpsLlama);
  });
  const Device cpu = Device::cpu();
  Tensor yc = Tensor::empty({kCheckRows, kWidthLlama}, DType::bf16, cpu);
  Tensor sc = Tensor::empty({kCheckRows, kWidthLlama}, DType::bf16, cpu);
  Tensor rc = Tensor::empty({kCheckRows}, DType::f32, cpu);
  ops::add_rmsnorm_forward(yc, sc, rc, first_rows(m.x, kCheckRows),
                           first_rows(m.residual, kCheckRows), m.weight.to(cpu), kEpsLlama);
  // The sum is one fp32 add rounded once on both sides: the same bits.
  check(state, std::max(worst(m.y, yc, kCheckRows * kWidthLlama, 2 * kBf16Ulp, 1e-3),
                        worst(m.sum, sc, kCheckRows * kWidthLlama, 0.0, 1e-30)));
}

void BM_AddRmsNormBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  Rms m(gpu);
  ops::add_rmsnorm_forward(m.y, m.sum, m.rstd, m.x, m.residual, m.weight, kEpsLlama);
  const Tensor dy = random_tensor(m.x.shape(), DType::bf16, gpu, 65);
  const Tensor dsum_in = random_tensor(m.x.shape(), DType::bf16, gpu, 66);
  Tensor dsum = Tensor::empty(m.x.shape(), DType::bf16, gpu);
  Tensor dweight = Tensor::zeros({kWidthLlama}, DType::f32, gpu);  // accumulates while timed
  time_calls(state, 4.0 * m.x.nbytes(), [&] {
    ops::add_rmsnorm_backward(dsum, dweight, dy, dsum_in, m.sum, m.rstd, m.weight);
  });
  Tensor dc = Tensor::empty({kCheckRows, kWidthLlama}, DType::bf16, cpu);
  Tensor dwc = Tensor::zeros({kWidthLlama}, DType::f32, cpu);
  ops::add_rmsnorm_backward(dc, dwc, first_rows(dy, kCheckRows), first_rows(dsum_in, kCheckRows),
                            first_rows(m.sum, kCheckRows), first_rows(m.rstd, kCheckRows),
                            m.weight.to(cpu));
  check(state, worst(dsum, dc, kCheckRows * kWidthLlama, 2 * kBf16Ulp, 1e-2));
}

// qkv [8192, (32 + 2 x 8) x 64] bf16 at positions t % 2048 (4 sequences of 2048), Llama 3.2's
// frequencies (theta 500000, llama3 scaling with factor 32).
struct Rope {
  Tensor qkv0, qkv, positions, inv_freq;
  Rope(Device gpu, uint64_t seed) {
    qkv0 = random_tensor({kRowsLlama, (kHeadsLlama + 2 * kKvHeadsLlama) * kHeadDimLlama},
                         DType::bf16, gpu, seed);
    qkv = qkv0.clone();
    std::vector<int64_t> pos(kRowsLlama);
    for (int64_t t = 0; t < kRowsLlama; ++t) pos[t] = t % 2048;
    positions = Tensor::from_vector(pos, {kRowsLlama}).to(gpu);
    const std::vector<float> inv = ops::rope_inverse_frequencies(
        {.head_dim = kHeadDimLlama, .llama3_scaling = true, .factor = 32.0});
    inv_freq = Tensor::from_floats(inv, {kHeadDimLlama / 2}, DType::f32).to(gpu);
  }
  double bytes() const {
    return 2.0 * kRowsLlama * (kHeadsLlama + kKvHeadsLlama) * kHeadDimLlama * 2.0;
  }
  // Runs the pass once more from the untouched input (the timed calls rotated qkv many times
  // over) and compares the first tokens with the CPU's. Tolerance as rope_gpu_test.cpp: cos,
  // sin, two products and the sum rounded to bf16, |x| up to ~5.
  double check(bool backward) {
    const auto pass = [&](const Tensor& t, const Tensor& pos, const Tensor& inv) {
      if (backward) {
        ops::rope_qkv_backward(t, pos, inv, kHeadsLlama, kKvHeadsLlama);
      } else {
        ops::rope_qkv_forward(t, pos, inv, kHeadsLlama, kKvHeadsLlama);
      }
    };
    qkv = qkv0.clone();
    pass(qkv, positions, inv_freq);
    const Tensor want = first_rows(qkv0, kCheckRows);
    pass(want, first_rows(positions, kCheckRows), inv_freq.to(Device::cpu()));
    return worst(qkv, want, want.numel(), 2 * kBf16Ulp, 2 * kBf16Ulp * 5.0);
  }
};

void BM_RopeForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Rope r(Device::cuda(0), 67);
  time_calls(state, r.bytes(), [&] {
    ops::rope_qkv_forward(r.qkv, r.positions, r.inv_freq, kHeadsLlama, kKvHeadsLlama);
  });
  check(state, r.check(false));
}

void BM_RopeBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  Rope r(Device::cuda(0), 68);  // qkv stands for the gradient dqkv here
  time_calls(state, r.bytes(), [&] {
    ops::rope_qkv_backward(r.qkv, r.positions, r.inv_freq, kHeadsLlama, kKvHeadsLlama);
  });
  check(state, r.check(true));
}

// x [8192, 2 x 8192] (gate half, up half) -> y [8192, 8192], bf16.
void BM_SwiGluForward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  const Tensor x = random_tensor({kRowsLlama, 2 * kFfnLlama}, DType::bf16, gpu, 69, 2.0f);
  Tensor y = Tensor::empty({kRowsLlama, kFfnLlama}, DType::bf16, gpu);
  time_calls(state, 3.0 * kRowsLlama * kFfnLlama * 2.0, [&] { ops::swiglu_forward(y, x); });
  const int64_t rows = 4;
  Tensor yc = Tensor::empty({rows, kFfnLlama}, DType::bf16, cpu);
  ops::swiglu_forward(yc, first_rows(x, rows));
  check(state, worst(y, yc, rows * kFfnLlama, 0.0, 1e-30));  // bit for bit, as swiglu_gpu_test
}

void BM_SwiGluBackward(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  const Tensor x = random_tensor({kRowsLlama, 2 * kFfnLlama}, DType::bf16, gpu, 70, 2.0f);
  const Tensor dy = random_tensor({kRowsLlama, kFfnLlama}, DType::bf16, gpu, 71);
  Tensor dx = Tensor::empty(x.shape(), DType::bf16, gpu);  // not x: every call reads the same x
  time_calls(state, 5.0 * kRowsLlama * kFfnLlama * 2.0, [&] { ops::swiglu_backward(dx, dy, x); });
  const int64_t rows = 4;
  Tensor dxc = Tensor::empty({rows, 2 * kFfnLlama}, DType::bf16, cpu);
  ops::swiglu_backward(dxc, first_rows(dy, rows), first_rows(x, rows));
  check(state, worst(dx, dxc, rows * 2 * kFfnLlama, 0.0, 1e-30));
}

}  // namespace

BENCHMARK(BM_MaxPoolForward)
    ->ArgName("argmax")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaxPoolBackward)
    ->ArgName("argmax")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WeightGradBiasGrad)
    ->ArgNames({"fused", "out"})
    ->ArgsProduct({{0, 1}, {3072, 768}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ResNetStemConv)
    ->ArgNames({"cin", "pass"})
    ->ArgsProduct({{3, 4, 8}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GeluForward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GeluBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CrossEntropyForward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CrossEntropyBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LinearCrossEntropy)
    ->ArgNames({"vocab", "pad"})
    ->ArgsProduct({{50257, 50256, 50304}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LayerNormForward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LayerNormBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CastMultiRefresh)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamWStateFormat)
    ->ArgName("state")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_RmsNormForward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RmsNormBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AddRmsNormForward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AddRmsNormBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RopeForward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RopeBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SwiGluForward)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SwiGluBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::fputs(stoker::bench::add_context().c_str(), stdout);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
