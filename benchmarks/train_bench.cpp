// Training-step throughput of the MLP that benchmarks/peers/torch_train.py `mlp` measures in
// PyTorch: L x (Linear(d, d) + GELU), batch B, AdamW, loss = mean(y^2) in fp32, in fp32 (TF32
// with --tf32, as the peer sets allow_tf32), bf16 and fp16 with the dynamic loss
// scaler. Reports TFLOP/s as 6 * L * d^2 * B / step time (the peer's formula), ms/step, peak
// device memory and the host syncs made inside the timed steps (0 expected on a GPU).
//
// Timing: `--warmup` steps, a device sync, then `--iters` steps between two device syncs (the
// peer's method). The steps go through Trainer::train_step: the same code path fit() runs.
// The loss is read after timing; a non-finite or non-decreasing loss fails the run.
//
// --optimizer-state f32,bf16,int8 runs each precision once per AdamW state format
// (optim::StateFormat; int8 = block-wise 8-bit with --state-block values per scale) and adds
// the optimizer's state bytes (Optimizer::state_bytes) and the time of the optimizer step
// alone (--iters calls of step() between two device syncs, after the timed training steps).
//
//   stoker_train_bench                       # H200 defaults: 8 x 4096, batch 8192
//   stoker_train_bench --precision bf16 --layers 2 --width 256 --batch 512 --json out.json
//   stoker_train_bench --precision bf16 --optimizer-state f32,bf16,int8
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_context.h"
#include "stoker/stoker.h"

namespace {

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
using stoker::amp::parse_precision;
using stoker::amp::Precision;

struct Options {
  int layers = 8;
  int64_t width = 4096;
  int64_t batch = 8192;
  int warmup = 8;
  int iters = 20;
  std::vector<std::string> precisions{"fp32", "bf16", "fp16"};
  std::vector<std::string> states{"f32"};
  int64_t state_block = 2048;
  bool tf32 = false;
  bool cpu = false;
  std::string json;
};

struct Result {
  std::string precision, state;
  double ms_per_step = 0, tflops = 0, peak_gib = 0, first_loss = 0, last_loss = 0;
  double state_mib = 0, optimizer_ms = 0;
  uint64_t host_syncs = 0;
};

stoker::optim::StateFormat parse_state(const std::string& s, int64_t block) {
  using stoker::optim::StateDType;
  if (s == "f32") return {};
  if (s == "bf16") return {.dtype = StateDType::bf16};
  if (s == "int8") return {.dtype = StateDType::int8_blockwise, .block = block};
  STOKER_THROW("--optimizer-state: '", s, "' is not f32, bf16 or int8");
}

// mean(model(x)^2) in the run's compute dtype (a host read: outside the timed steps).
double eval_loss(nn::Module& model, const Tensor& x, const Tensor& zeros, Precision p) {
  Tensor in = x;
  if (p != Precision::fp32) {
    in = Tensor::empty(x.shape(), stoker::amp::compute_dtype(p), x.device());
    stoker::ops::cast(in, x);
  }
  nn::MSELoss loss;
  return loss.forward(model.forward(in), zeros).item();
}

Result run(const Options& o, const std::string& precision, const std::string& state,
           Device device) {
  nn::manual_seed(0);
  nn::Sequential model;
  for (int l = 0; l < o.layers; ++l) {
    model.add(nn::make<nn::Linear>(o.width, o.width));
    model.add(nn::make<nn::GELU>());
  }
  model.to(device);
  // PyTorch's defaults (lr 1e-3), the state stored as asked.
  stoker::optim::AdamW opt(model.named_parameters(), {.state = parse_state(state, o.state_block)});
  nn::MSELoss loss;
  stoker::train::Trainer trainer(
      model, loss, opt,
      {.precision = parse_precision(precision), .progress_bar = false, .quiet = true});
  Tensor x = Tensor::empty({o.batch, o.width}, DType::f32, device);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 1, 0);
  // The target in the compute dtype: the loss math is fp32 whatever the storage (as the peer's
  // y.float().pow(2).mean()), and zeros are exact in every dtype.
  const Tensor zeros = Tensor::zeros(
      {o.batch, o.width}, stoker::amp::compute_dtype(parse_precision(precision)), device);
  const std::vector<stoker::data::Batch> batch{{.input = x, .target = zeros, .size = o.batch}};

  Result r;
  r.precision = precision;
  r.state = state;
  r.state_mib = static_cast<double>(opt.state_bytes()) / (1 << 20);
  r.first_loss = eval_loss(model, x, zeros, parse_precision(precision));
  for (int i = 0; i < o.warmup; ++i) trainer.train_step(batch);
  stoker::core::synchronize_device(device);
  stoker::core::reset_peak_memory(device);
  const uint64_t syncs = stoker::core::host_sync_count();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) trainer.train_step(batch);
  r.host_syncs = stoker::core::host_sync_count() - syncs;
  stoker::core::synchronize_device(device);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.ms_per_step = s * 1e3 / o.iters;
  r.tflops =
      6.0 * o.layers * static_cast<double>(o.width) * o.width * o.batch / (s / o.iters) / 1e12;
  r.peak_gib = static_cast<double>(stoker::core::memory_stats(device).peak_bytes) / (1 << 30);
  r.last_loss = eval_loss(model, x, zeros, parse_precision(precision));
  // The optimizer step alone (the last step's gradients again; the weights are not used after).
  stoker::core::synchronize_device(device);
  const auto o0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) opt.step();
  stoker::core::synchronize_device(device);
  r.optimizer_ms =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - o0).count() * 1e3 / o.iters;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"stoker training-step throughput: the MLP of benchmarks/peers/torch_train.py mlp"};
  app.add_option("--layers", o.layers, "Linear+GELU blocks")->check(CLI::PositiveNumber);
  app.add_option("--width", o.width, "features d")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "batch size B")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps")->check(CLI::PositiveNumber);
  app.add_option("--iters", o.iters, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--precision", o.precisions, "fp32, bf16, fp16 (several allowed)")->delimiter(',');
  app.add_option("--optimizer-state", o.states, "AdamW state: f32, bf16, int8 (several allowed)")
      ->delimiter(',');
  app.add_option("--state-block", o.state_block, "values per scale of int8 state (256, 2048)");
  app.add_flag("--tf32", o.tf32, "fp32 GEMMs on TF32 tensor cores (PyTorch's allow_tf32)");
  app.add_flag("--cpu", o.cpu, "run on the CPU even when a GPU is present");
  app.add_option("--json", o.json, "also write the results to this JSON file");
  CLI11_PARSE(app, argc, argv);

  try {
    stoker::ops::set_allow_tf32(o.tf32);
    const bool gpu = !o.cpu && stoker::core::cuda_device_count() > 0;
    const Device device = gpu ? Device::cuda(0) : Device::cpu();
    std::printf("%s", stoker::bench::add_context().c_str());
    std::printf(
        "model: %d x (Linear(%lld, %lld) + GELU(tanh)), batch %lld, AdamW, loss mean(y^2) "
        "in fp32, on %s; %d warm-up + %d timed steps; fp32 GEMMs %s\n",
        o.layers, static_cast<long long>(o.width), static_cast<long long>(o.width),
        static_cast<long long>(o.batch), device.str().c_str(), o.warmup, o.iters,
        o.tf32 ? "TF32" : "exact fp32");
    nlohmann::json out = nlohmann::json::array();
    bool ok = true;
    for (const std::string& p : o.precisions)
      for (const std::string& st : o.states) {
        const Result r = run(o, p, st, device);
        std::printf(
            "%-5s %8.1f TFLOP/s  %8.2f ms/step  peak %6.2f GiB  host syncs in timed steps "
            "%llu  loss %.4g -> %.4g  state %-4s %10.3f MiB  optimizer %7.3f ms\n",
            p.c_str(), r.tflops, r.ms_per_step, r.peak_gib,
            static_cast<unsigned long long>(r.host_syncs), r.first_loss, r.last_loss, st.c_str(),
            r.state_mib, r.optimizer_ms);
        std::fflush(stdout);
        out.push_back({{"precision", p},
                       {"optimizer_state", st},
                       {"tflops", r.tflops},
                       {"ms_per_step", r.ms_per_step},
                       {"peak_gib", r.peak_gib},
                       {"host_syncs", r.host_syncs},
                       {"first_loss", r.first_loss},
                       {"last_loss", r.last_loss},
                       {"optimizer_state_mib", r.state_mib},
                       {"optimizer_ms", r.optimizer_ms}});
        ok = ok && std::isfinite(r.last_loss) && r.last_loss < r.first_loss;
      }
    if (!o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
    if (!ok) {
      std::fprintf(stderr, "error: a run's loss did not decrease or was not finite\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
