// Activation memory vs step time: a stack of transformer MLP blocks
//   x + Linear(h -> d)(GELU(Linear(d -> h)(LayerNorm(x))))
// trained with the Trainer (AdamW, loss mean(y^2) in fp32) without checkpointing, with every
// block checkpointed, with selective recomputation, and with the two combined on every k-th
// block (nn/checkpoint.h, TrainerOptions::activation_checkpoint_every / selective_recompute).
// Defaults are the H200 case: 12 blocks, d 768, h 3072, batch 16 x 1024 tokens, bf16.
//
// The mode meant to meet the goal is every3+selective (every4+selective and every2+selective
// bracket it). Why, from the model (T = 16384 tokens, bf16; MiB of saved activations at the
// highest point of the backward, "model est."): none 2881.5; block 504.1; selective 1441.5 (a
// block keeps x and GELU's input, d + h per token, instead of 2d + 2h); every4+selective
// 1153.1; every3+selective 1057.0; every2+selective 960.8. With ~1070 MiB of resident state
// (weights, gradients, AdamW, bf16 copies) a mode needs <= ~1370 MiB of activations and
// temporaries for -40 %: every3 leaves ~300 MiB for temporaries, every4 ~200. Time: a
// checkpointed block re-runs LayerNorm, its first GEMM and GELU (its second GEMM and the
// residual add are skipped; no selective passes inside it), a selective block two elementwise
// passes (LayerNorm, GELU); every3 checkpoints 4 of 12 blocks, every2 6. Which of them also
// stays <= +20 % is for the H200 measurement to say (docs/benchmarks.md).
// Columns (docs/benchmarks.md):
//   peak MiB      core::memory_stats(device).peak_bytes over the timed steps: every tensor
//                 stoker allocated (weights, gradients, optimizer state, half copies, inputs,
//                 activations, temporaries), not the pool's reserved memory
//   act. MiB      peak minus the bytes in use before the timed steps: what the steps add on top
//                 of the resident state (activations and temporaries)
//   vs none       peak relative to the `none` mode (-45% = 45% lower)
//   ms/step       wall time of the timed steps between two device syncs, per step
//   vs none       step time relative to `none` (+15% = 15% slower)
//   model est.    bytes of saved activations the model predicts for the mode (see
//                 predicted_saved_bytes) — a check that the measured drop has the right size
//   goal          "yes" when the mode is >= 40% below none's peak at <= 20% more step time
// Correctness: every mode trains from the same seed on the same batch, and gradients with and
// without recomputation are bit-identical, so the weights after the run must be identical
// bit for bit to the `none` mode's; the program fails otherwise (and on a non-finite loss).
//
// Google Benchmark's --benchmark_* flags (scripts/gpu-check.sh passes them to every benchmark)
// are ignored, except --benchmark_out=FILE, which writes the JSON results there.
//
//   stoker_checkpoint_bench                                   # H200 defaults
//   stoker_checkpoint_bench --cpu --blocks 3 --width 64 --hidden 256 --batch 2 --tokens 32
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_context.h"
#include "stoker/nn/containers.h"
#include "stoker/stoker.h"

namespace {

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
using stoker::amp::parse_precision;
using stoker::amp::Precision;

struct Options {
  int blocks = 12;
  int64_t width = 768;
  int64_t hidden = 3072;
  int64_t batch = 16;
  int64_t tokens = 1024;  // per sequence
  int warmup = 3;
  int steps = 10;
  std::string precision = "bf16";
  std::vector<std::string> modes{
      "none", "block", "selective", "every4+selective", "every3+selective", "every2+selective"};
  bool cpu = false;
  std::string json;
};

// "none" | "selective" | "block" (= every1) | "every<k>" | "every<k>+selective".
struct Mode {
  std::string name;
  int every = 0;
  bool selective = false;
};

Mode parse_mode(const std::string& s) {
  Mode m{s};
  std::string rest = s;
  const auto plus = rest.find("+selective");
  if (plus != std::string::npos && plus + 10 == rest.size()) {
    m.selective = true;
    rest = rest.substr(0, plus);
  }
  if (rest == "none" && !m.selective) return m;
  if (rest == "selective" && !m.selective) {
    m.selective = true;
    return m;
  }
  if (rest == "block") {
    m.every = 1;
    return m;
  }
  if (rest.rfind("every", 0) == 0 && rest.size() > 5) {
    try {
      m.every = std::stoi(rest.substr(5));
    } catch (const std::exception&) {
      m.every = 0;
    }
    if (m.every >= 1) return m;
  }
  STOKER_THROW("--modes: '", s,
               "' is not none, selective, block, every<k> or every<k>+selective (k >= 1)");
}

// Saved activations of the whole stack at the end of the forward, from the sizes (T tokens,
// e bytes per element of the compute dtype). Per plain block: the block input (kept by
// LayerNorm; it is the previous block's output, the same tensor the residual add read, kept
// once by reference) T*d*e, LayerNorm's mean and 1/std 2*T*4, Linear1's input (the LayerNorm
// output) T*d*e, GELU's input T*h*e, Linear2's input (the GELU output) T*h*e. Selective
// recomputation drops the last two: Linear1 gives up the LayerNorm output (rebuilt from the
// input LayerNorm keeps) and Linear2 the GELU output (rebuilt from the input GELU keeps).
// A checkpointed block keeps its input only, and during its backward holds a plain block's
// activations again (a Checkpoint's recomputation skips selective recomputation, and its last
// Linear's GEMM). The estimate is the most held at the start of any block's backward.
double predicted_saved_bytes(const Options& o, const Mode& m, size_t e) {
  const double t = static_cast<double>(o.batch * o.tokens);
  const double d = static_cast<double>(o.width), h = static_cast<double>(o.hidden);
  const double plain = t * (2 * d * e + 2 * h * e + 8);
  const double selective = plain - t * (d + h) * e;
  const double per_block = m.selective ? selective : plain;
  const double input = t * d * e;
  double below = 0, most = 0;  // kept by the blocks before b; the highest point so far
  for (int b = 0; b < o.blocks; ++b) {
    const bool ckpt = m.every > 0 && b % m.every == 0;
    most = std::max(most, below + (ckpt ? plain : per_block));  // block b's backward starts
    below += ckpt ? input : per_block;
  }
  return most;
}

struct Result {
  Mode mode;
  double peak_mib = 0, act_mib = 0, ms_per_step = 0, predicted_mib = 0, last_loss = 0;
  uint64_t weights_hash = 0;
};

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

Result run(const Options& o, const Mode& mode, Device device) {
  const Precision precision = parse_precision(o.precision);
  const DType compute = stoker::amp::compute_dtype(precision);
  nn::manual_seed(0);
  nn::Sequential model;
  for (int b = 0; b < o.blocks; ++b) {
    model.add(nn::make<nn::Residual>(nn::make<nn::Sequential>(
        nn::make<nn::LayerNorm>(o.width), nn::make<nn::Linear>(o.width, o.hidden),
        nn::make<nn::GELU>(), nn::make<nn::Linear>(o.hidden, o.width))));
  }
  model.to(device);
  stoker::optim::AdamW opt(model.named_parameters(), {.lr = 1e-4f});
  nn::MSELoss loss;
  stoker::train::Trainer trainer(model, loss, opt,
                                 {.precision = precision,
                                  .progress_bar = false,
                                  .quiet = true,
                                  .activation_checkpoint_every = mode.every,
                                  .selective_recompute = mode.selective});
  Tensor x = Tensor::empty({o.batch, o.tokens, o.width}, DType::f32, device);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 1, 0);
  const Tensor zeros = Tensor::zeros({o.batch, o.tokens, o.width}, compute, device);
  const std::vector<stoker::data::Batch> batch{{.input = x, .target = zeros, .size = o.batch}};

  Result r;
  r.mode = mode;
  for (int i = 0; i < o.warmup; ++i) trainer.train_step(batch);
  stoker::core::synchronize_device(device);
  stoker::core::reset_peak_memory(device);
  const size_t resident = stoker::core::memory_stats(device).current_bytes;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) trainer.train_step(batch);
  stoker::core::synchronize_device(device);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t peak = stoker::core::memory_stats(device).peak_bytes;
  r.ms_per_step = s * 1e3 / o.steps;
  r.peak_mib = static_cast<double>(peak) / (1 << 20);
  r.act_mib = static_cast<double>(peak - resident) / (1 << 20);
  r.predicted_mib = predicted_saved_bytes(o, mode, stoker::core::dtype_size(compute)) / (1 << 20);
  {
    Tensor in = Tensor::empty(x.shape(), compute, device);
    stoker::ops::cast(in, x);
    nn::NoSaveScope no_save;
    r.last_loss = loss.forward(model.forward(in), zeros).item();
  }
  uint64_t h = 1469598103934665603ull;
  for (nn::Parameter* p : model.parameters()) {
    const Tensor host = p->value().to(Device::cpu());
    h = fnv1a(h, host.data(), host.nbytes());
  }
  r.weights_hash = h;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "stoker activation checkpointing: peak memory and step time of a stack of transformer "
      "MLP blocks with no checkpointing, per-block checkpointing and selective recomputation"};
  app.add_option("--blocks", o.blocks, "MLP blocks in the stack")->check(CLI::PositiveNumber);
  app.add_option("--width", o.width, "model width d")->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.hidden, "hidden width h of each block")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--tokens", o.tokens, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--precision", o.precision, "fp32, bf16 or fp16");
  app.add_option("--modes", o.modes,
                 "none, selective, block, every<k>, every<k>+selective (comma-separated)")
      ->delimiter(',');
  app.add_flag("--cpu", o.cpu, "run on the CPU even when a GPU is present");
  app.add_option("--json", o.json, "also write the results to this JSON file");
  // --benchmark_out=FILE (scripts/gpu-check.sh) writes the JSON there unless --json is given.
  app.name("stoker_checkpoint_bench");
  std::string benchmark_out;
  try {
    benchmark_out = stoker::bench::parse_skipping_benchmark_flags(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.json.empty()) o.json = benchmark_out;

  try {
    std::vector<Mode> modes;
    for (const std::string& s : o.modes) modes.push_back(parse_mode(s));
    STOKER_CHECK(!modes.empty() && modes.front().name == "none",
                 "--modes must start with none (the baseline the others are compared with)");
    const bool gpu = !o.cpu && stoker::core::cuda_device_count() > 0;
    const Device device = gpu ? Device::cuda(0) : Device::cpu();
    std::printf("%s", stoker::bench::add_context().c_str());
    std::printf(
        "model: %d x [x + Linear(%lld->%lld)(GELU(Linear(%lld->%lld)(LayerNorm(x))))], "
        "batch %lld x %lld tokens, %s on %s (%s), AdamW, loss mean(y^2) in fp32; "
        "%d warm-up + %d timed steps\n",
        o.blocks, static_cast<long long>(o.hidden), static_cast<long long>(o.width),
        static_cast<long long>(o.width), static_cast<long long>(o.hidden),
        static_cast<long long>(o.batch), static_cast<long long>(o.tokens), o.precision.c_str(),
        device.str().c_str(), stoker::core::describe_device(device).c_str(), o.warmup, o.steps);
    std::printf("%-18s %9s %9s %8s %10s %8s %10s %5s\n", "mode", "peak MiB", "act. MiB", "vs none",
                "ms/step", "vs none", "model est.", "goal");
    std::fflush(stdout);
    nlohmann::json out = nlohmann::json::array();
    std::vector<Result> results;
    bool ok = true;
    for (const Mode& m : modes) {
      const Result r = run(o, m, device);
      results.push_back(r);
      const Result& base = results.front();
      const double dpeak = (r.peak_mib / base.peak_mib - 1.0) * 100.0;
      const double dtime = (r.ms_per_step / base.ms_per_step - 1.0) * 100.0;
      const bool goal = dpeak <= -40.0 && dtime <= 20.0;
      const bool same = r.weights_hash == base.weights_hash && r.last_loss == base.last_loss;
      std::printf("%-18s %9.1f %9.1f %+7.1f%% %10.2f %+7.1f%% %10.1f %5s%s\n", m.name.c_str(),
                  r.peak_mib, r.act_mib, dpeak, r.ms_per_step, dtime, r.predicted_mib,
                  results.size() == 1 ? "-" : (goal ? "yes" : "no"),
                  same ? "" : "  WEIGHTS DIFFER FROM none");
      std::fflush(stdout);
      out.push_back({{"mode", m.name},
                     {"peak_mib", r.peak_mib},
                     {"activation_mib", r.act_mib},
                     {"ms_per_step", r.ms_per_step},
                     {"peak_vs_none_pct", dpeak},
                     {"time_vs_none_pct", dtime},
                     {"predicted_saved_mib", r.predicted_mib},
                     {"meets_goal", goal},
                     {"weights_identical_to_none", same},
                     {"loss", r.last_loss}});
      ok = ok && same && std::isfinite(r.last_loss);
    }
    if (!o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
    if (!ok) {
      std::fprintf(stderr,
                   "error: a mode's weights differ from the none mode's, or its loss is not "
                   "finite\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
