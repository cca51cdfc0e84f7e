// Optimizer offload (optim::OffloadedOptimizer): is the CPU update as fast as the machine's
// memory allows, and what does offloading cost next to the on-GPU step?
//
//   (a) memory bandwidth with oneTBB threads over arrays of --bw-mib MiB each (default 1 GiB),
//       best of --bw-reps: "triad" a = b + s c (12 bytes counted per element: 2 reads, 1 write;
//       the write-allocate read of a is not counted, as in STREAM), "update" a = a s + b in
//       place (12 bytes: 2 reads, 1 write, no write-allocate) and "4-stream update" a, b, c =
//       (a, b, c) s + d in place (28 bytes: AdamW's access pattern without its arithmetic). The
//       reference bandwidth is the largest of the three.
//   (b) the CPU AdamW update (optim::AdamW over host parameters, the inner optimizer of an
//       offload) over --params values in tensors of --tensor-mib, f32 and bf16 state: ms per
//       step (median of --iters) and GB/s with bytes = bytes read + written per parameter
//       (f32 state: p r/w 8, g r 4, m r/w 8, v r/w 8 = 28 B; bf16 state: 8 + 4 + 4 + 4 = 20 B),
//       and that rate over (a).
//   (c) with a GPU (unless --cpu): the on-GPU AdamW step and the offloaded step (gradients down,
//       CPU update, values up, in groups of --group-mib) over the same parameters, ms per step
//       between device syncs, and the plain transfers alone: all gradients device -> pinned and
//       all values pinned -> device on the copy stream (ms, GB/s). Checked: after the timed
//       steps the offloaded parameters equal the on-GPU ones bit for bit (f32 state).
//       Then the steady state of a training step, with the forward/backward replaced by
//       --compute-ms of bf16 GEMMs on the current stream (default 45 ms: GPT-2 124M, B16, bf16
//       on the H200): "compute alone", "compute + exact offloaded step" and "compute + delayed
//       offloaded step" (OffloadOptions::delayed_update: the CPU update of step t runs during
//       step t+1's compute), ms per iteration (median of --iters after --warmup, each ended by
//       a sync of the current stream only, so the delayed mode's background copies are not
//       waited for), their overhead over compute alone, and the delayed step()'s host time.
//       Checked: after flush() the delayed parameters equal the on-GPU ones bit for bit (the
//       gradients are constant, so one step of staleness does not change them).
//
//   stoker_offload_bench                           # 124M parameters, all threads, GPU if any
//   stoker_offload_bench --params 10M --bw-mib 256 --cpu --json out.json
//   stoker_offload_bench --compute-ms 45                # (c): GPT-2 124M B16 bf16 on the H200
// Google Benchmark's --benchmark_* flags (scripts/gpu-check.sh passes them to every benchmark)
// are ignored, except --benchmark_out=FILE, which writes the JSON line there.
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_context.h"
#include "core/tensor_copy.h"
#include "stoker/stoker.h"

namespace {

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace nn = stoker::nn;
namespace optim = stoker::optim;
namespace core = stoker::core;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string params = "124M";
  double tensor_mib = 9.0;  // GPT-2 124M's MLP weights are 9 MiB each
  double group_mib = 32.0;
  int64_t bw_mib = 1024;
  int bw_reps = 5;
  int warmup = 2;
  int iters = 5;
  int threads = 0;           // 0: all
  double compute_ms = 45.0;  // (c) simulated forward/backward per step
  bool cpu = false;
  std::string json;
};

int64_t parse_count(const std::string& s) {
  double v = std::stod(s);
  const char u = s.empty() ? '\0' : s.back();
  if (u == 'K' || u == 'k') v *= 1e3;
  if (u == 'M' || u == 'm') v *= 1e6;
  if (u == 'G' || u == 'g') v *= 1e9;
  STOKER_CHECK(v >= 1, "--params: '", s, "' is not a positive count (e.g. 124M)");
  return static_cast<int64_t>(v);
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Bandwidth {
  double triad_gbs = 0, update_gbs = 0, update4_gbs = 0;
  double best() const { return std::max({triad_gbs, update_gbs, update4_gbs}); }
};

// (a): arrays first touched by the same threads that use them (one oneTBB task per chunk).
Bandwidth measure_bandwidth(int64_t mib, int reps) {
  const int64_t n = mib * (int64_t{1} << 20) / 4;
  std::unique_ptr<float[]> a(new float[n]), b(new float[n]), c(new float[n]), d(new float[n]);
  const int64_t grain = int64_t{1} << 16;
  auto each = [&](auto f) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                      [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
  };
  each([&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f, d[i] = 0.25f;
  });
  Bandwidth bw;
  const double bytes = 12.0 * static_cast<double>(n);
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    each([&](int64_t s, int64_t e) {
      float* __restrict pa = a.get();
      const float* __restrict pb = b.get();
      const float* __restrict pc = c.get();
      for (int64_t i = s; i < e; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
    bw.triad_gbs = std::max(bw.triad_gbs, bytes / ms_since(t0) / 1e6);
    t0 = Clock::now();
    each([&](int64_t s, int64_t e) {
      float* __restrict pa = a.get();
      const float* __restrict pb = b.get();
      for (int64_t i = s; i < e; ++i) pa[i] = pa[i] * 0.5f + pb[i];
    });
    bw.update_gbs = std::max(bw.update_gbs, bytes / ms_since(t0) / 1e6);
    t0 = Clock::now();
    each([&](int64_t s, int64_t e) {
      float* __restrict pa = a.get();
      float* __restrict pb = b.get();
      float* __restrict pc = c.get();
      const float* __restrict pd = d.get();
      for (int64_t i = s; i < e; ++i) {
        pa[i] = pa[i] * 0.5f + pd[i];
        pb[i] = pb[i] * 0.5f + pd[i];
        pc[i] = pc[i] * 0.5f + pd[i];
      }
    });
    bw.update4_gbs = std::max(bw.update4_gbs, 28.0 * static_cast<double>(n) / ms_since(t0) / 1e6);
  }
  // Use the results so the loops are not removed: a[0] is finite by construction.
  STOKER_CHECK(std::isfinite(a[0]) && std::isfinite(a[n - 1]), "bandwidth arrays not finite");
  return bw;
}

// Parameters of `total` values split into tensors of `per` values, random values and gradients.
struct Model {
  std::vector<std::unique_ptr<nn::Parameter>> ps;
  Model(int64_t total, int64_t per, Device device, uint64_t seed) {
    for (int64_t off = 0, i = 0; off < total; off += per, ++i) {
      const int64_t n = std::min(per, total - off);
      Tensor v = Tensor::empty({n}, DType::f32, device);
      stoker::ops::random_normal(v, 0.0f, 0.02f, seed, static_cast<uint64_t>(off));
      auto p = std::make_unique<nn::Parameter>(v);
      stoker::ops::random_normal(p->grad(), 0.0f, 1e-3f, seed + 1, static_cast<uint64_t>(off));
      ps.push_back(std::move(p));
    }
  }
  optim::NamedParameters named() {
    optim::NamedParameters out;
    for (size_t i = 0; i < ps.size(); ++i) out.emplace_back("p" + std::to_string(i), ps[i].get());
    return out;
  }
};

// Median ms of `iters` calls of step() after `warmup`, each between device syncs.
double time_steps(optim::Optimizer& opt, Device device, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) opt.step();
  core::synchronize_device(device);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    opt.step();
    core::synchronize_device(device);
    ms.push_back(ms_since(t0));
  }
  return median(ms);
}

// (c) steady state: GPU work of about `ms` on the current stream (bf16 GEMMs of 4096^3,
// calibrated once), standing in for a step's forward and backward.
struct SimulatedCompute {
  Tensor a, b, c;
  int gemms = 0;
  SimulatedCompute(Device dev, double ms) {
    a = Tensor::empty({4096, 4096}, DType::bf16, dev);
    b = Tensor::empty({4096, 4096}, DType::bf16, dev);
    c = Tensor::empty({4096, 4096}, DType::bf16, dev);
    stoker::ops::random_normal(a, 0.0f, 1.0f, 5, 0);
    stoker::ops::random_normal(b, 0.0f, 1.0f, 6, 0);
    const core::Stream current = core::current_stream(dev);
    for (int i = 0; i < 3; ++i) stoker::ops::gemm(c, a, b);  // warm-up (library plans)
    current.synchronize();
    const int probe = 20;
    const auto t0 = Clock::now();
    for (int i = 0; i < probe; ++i) stoker::ops::gemm(c, a, b);
    current.synchronize();
    const double per = ms_since(t0) / probe;
    gemms = std::max(0, static_cast<int>(std::lround(ms / per)));
  }
  void run() const {
    for (int i = 0; i < gemms; ++i) stoker::ops::gemm(c, a, b);
  }
};

// Median ms per iteration of: simulated compute, then opt->step() (none: compute alone), then
// a sync of the current stream only. `steps` counts the step() calls.
struct IterationTiming {
  double iteration_ms = 0, step_host_ms = 0;
};
IterationTiming time_iterations(const SimulatedCompute& compute, optim::Optimizer* opt, Device dev,
                                int warmup, int iters) {
  const core::Stream current = core::current_stream(dev);
  std::vector<double> it_ms, step_ms;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    compute.run();
    const auto t1 = Clock::now();
    if (opt) opt->step();
    const double step_host = ms_since(t1);
    current.synchronize();
    if (i >= warmup) {
      it_ms.push_back(ms_since(t0));
      step_ms.push_back(step_host);
    }
  }
  return {median(it_ms), median(step_ms)};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"stoker optimizer offload: memory bandwidth, CPU AdamW update, offloaded step"};
  app.add_option("--params", o.params, "parameters (e.g. 124M, 1.5G)")->capture_default_str();
  app.add_option("--tensor-mib", o.tensor_mib, "f32 MiB per parameter tensor")
      ->capture_default_str();
  app.add_option("--group-mib", o.group_mib, "offload group size (OffloadOptions::group_bytes)")
      ->capture_default_str();
  app.add_option("--bw-mib", o.bw_mib, "bandwidth: MiB per array (4 arrays)")
      ->capture_default_str();
  app.add_option("--bw-reps", o.bw_reps, "bandwidth: repetitions (best taken)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps")->capture_default_str();
  app.add_option("--iters", o.iters, "timed steps (median)")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "oneTBB threads (0: all)")->capture_default_str();
  app.add_option("--compute-ms", o.compute_ms,
                 "(c) simulated forward/backward per step (GPU GEMMs), for the steady state")
      ->capture_default_str();
  app.add_flag("--cpu", o.cpu, "skip the GPU comparison even when a GPU is present");
  app.add_option("--json", o.json, "also write the results to this JSON file");
  // --benchmark_out=FILE (scripts/gpu-check.sh) writes the JSON there unless --json is given.
  app.name("stoker_offload_bench");
  std::string benchmark_out;
  try {
    benchmark_out = stoker::bench::parse_skipping_benchmark_flags(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.json.empty()) o.json = benchmark_out;

  try {
    const int threads =
        o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    const int64_t total = parse_count(o.params);
    const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(o.tensor_mib * (1 << 20) / 4));
    std::printf("%s", stoker::bench::add_context().c_str());
    std::printf("oneTBB threads: %d (hardware threads %u)\n", threads,
                std::thread::hardware_concurrency());
    nlohmann::json out = {{"threads", threads}, {"params", total}};

    // (a)
    const Bandwidth bw = measure_bandwidth(o.bw_mib, o.bw_reps);
    std::printf(
        "(a) memory bandwidth, arrays of %lld MiB, best of %d: triad %.1f GB/s, in-place "
        "update %.1f GB/s, 4-stream in-place update %.1f GB/s (reference: %.1f GB/s)\n",
        static_cast<long long>(o.bw_mib), o.bw_reps, bw.triad_gbs, bw.update_gbs, bw.update4_gbs,
        bw.best());
    out["bandwidth"] = {{"array_mib", o.bw_mib},
                        {"triad_gbs", bw.triad_gbs},
                        {"update_gbs", bw.update_gbs},
                        {"update4_gbs", bw.update4_gbs},
                        {"reference_gbs", bw.best()}};

    // (b)
    struct StateCase {
      const char* name;
      optim::StateFormat format;
      double bytes_per_param;
    };
    const StateCase cases[] = {{"f32", {}, 28.0},
                               {"bf16", {.dtype = optim::StateDType::bf16}, 20.0}};
    for (const StateCase& sc : cases) {
      Model m(total, per, Device::cpu(), 1);
      optim::AdamW opt(m.named(), {.lr = 1e-4f, .state = sc.format});
      const double ms = time_steps(opt, Device::cpu(), o.warmup, o.iters);
      const double gbs = sc.bytes_per_param * static_cast<double>(total) / ms / 1e6;
      std::printf(
          "(b) CPU AdamW, %s state, %lld parameters in %zu tensors: %.2f ms/step, %.1f GB/s "
          "(%.0f B/parameter), %.0f %% of the reference bandwidth\n",
          sc.name, static_cast<long long>(total), m.ps.size(), ms, gbs, sc.bytes_per_param,
          100.0 * gbs / bw.best());
      const float v0 = m.ps[0]->value().to_vector<float>()[0];
      STOKER_CHECK(std::isfinite(v0), "CPU AdamW produced a non-finite value");
      out[std::string("cpu_adamw_") + sc.name] = {{"ms", ms},
                                                  {"gbs", gbs},
                                                  {"bytes_per_param", sc.bytes_per_param},
                                                  {"fraction_of_bandwidth", gbs / bw.best()}};
    }

    // (c)
    const bool gpu = !o.cpu && core::cuda_device_count() > 0;
    if (gpu) {
      const Device dev = Device::cuda(0);
      Model on_gpu(total, per, dev, 1), offl(total, per, dev, 1);
      optim::AdamW plain(on_gpu.named(), {.lr = 1e-4f});
      const optim::AdamWOptions inner{.lr = 1e-4f};
      optim::OffloadedOptimizer off(offl.named(),
                                    [&](optim::NamedParameters p) {
                                      return std::make_unique<optim::AdamW>(std::move(p), inner);
                                    },
                                    {.group_bytes = static_cast<int64_t>(o.group_mib * (1 << 20))});
      const double gpu_ms = time_steps(plain, dev, o.warmup, o.iters);
      const double off_ms = time_steps(off, dev, o.warmup, o.iters);
      const optim::OffloadedOptimizer::StepTiming timing = off.last_step_timing();
      // Same gradients, same number of steps: the offloaded values must equal the on-GPU ones.
      bool identical = true;
      for (size_t i = 0; i < on_gpu.ps.size() && identical; ++i) {
        const auto a = on_gpu.ps[i]->value().to_vector<float>();
        const auto b = offl.ps[i]->value().to_vector<float>();
        identical = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
      }
      // The transfers alone: every gradient down, and up again (the bytes of the values, into the
      // gradients they came from: on_gpu's values stay the reference of the delayed check
      // below), on the copy stream, as the optimizer makes them (no keep-alive callbacks; the
      // buffers outlive the synchronize).
      std::vector<Tensor> host;
      for (auto& p : on_gpu.ps) host.push_back(Tensor::empty_pinned(p->shape(), DType::f32));
      const core::Stream copy = core::copy_stream(dev);
      auto transfer = [&](bool down) {
        std::vector<double> ms;
        for (int r = 0; r < o.iters + 1; ++r) {
          core::synchronize_device(dev);
          const auto t0 = Clock::now();
          {
            core::StreamGuard g(copy);
            for (size_t i = 0; i < host.size(); ++i)
              down ? core::detail::copy_bytes_unowned(host[i], on_gpu.ps[i]->grad())
                   : core::detail::copy_bytes_unowned(on_gpu.ps[i]->grad(), host[i]);
          }
          copy.synchronize();
          if (r > 0) ms.push_back(ms_since(t0));  // the first is a warm-up
        }
        return median(ms);
      };
      const double d2h_ms = transfer(true), h2d_ms = transfer(false);
      const double gb = 4.0 * static_cast<double>(total) / 1e9;
      std::printf(
          "(c) %s: AdamW f32 on the GPU %.2f ms/step; offloaded (%zu groups) %.2f ms/step "
          "(%.2fx; last step's host: %.2f ms waiting for gradients, %.2f ms updating); "
          "gradients D2H %.2f ms (%.1f GB/s), values H2D %.2f ms (%.1f GB/s); "
          "offloaded == on-GPU bit for bit: %s\n",
          dev.str().c_str(), gpu_ms, off.groups(), off_ms, off_ms / gpu_ms, timing.download_wait_ms,
          timing.update_ms, d2h_ms, gb / d2h_ms * 1e3, h2d_ms, gb / h2d_ms * 1e3,
          identical ? "yes" : "NO");
      out["gpu"] = {{"host_wait_ms", timing.download_wait_ms},
                    {"host_update_ms", timing.update_ms},
                    {"adamw_ms", gpu_ms},
                    {"offloaded_ms", off_ms},
                    {"groups", off.groups()},
                    {"d2h_ms", d2h_ms},
                    {"h2d_ms", h2d_ms},
                    {"d2h_gbs", gb / d2h_ms * 1e3},
                    {"h2d_gbs", gb / h2d_ms * 1e3},
                    {"bit_identical", identical}};
      if (!identical) {
        std::fprintf(stderr, "error: the offloaded parameters differ from the on-GPU ones\n");
        if (!o.json.empty()) std::ofstream(o.json) << out.dump() << "\n";
        return 1;
      }

      // Steady state with a simulated forward/backward: exact vs delayed offload.
      const SimulatedCompute compute(dev, o.compute_ms);
      const IterationTiming alone = time_iterations(compute, nullptr, dev, o.warmup, o.iters);
      const IterationTiming exact = time_iterations(compute, &off, dev, o.warmup, o.iters);
      Model dl(total, per, dev, 1);
      optim::OffloadedOptimizer delayed(
          dl.named(),
          [&](optim::NamedParameters p) {
            return std::make_unique<optim::AdamW>(std::move(p), inner);
          },
          {.group_bytes = static_cast<int64_t>(o.group_mib * (1 << 20)), .delayed_update = true});
      // As many steps as `plain` made (time_steps: warmup + iters), so the values must agree.
      const IterationTiming late = time_iterations(compute, &delayed, dev, o.warmup, o.iters);
      const optim::OffloadedOptimizer::StepTiming dtiming = delayed.last_step_timing();
      delayed.flush();
      bool delayed_identical = true;
      for (size_t i = 0; i < on_gpu.ps.size() && delayed_identical; ++i) {
        const auto a = on_gpu.ps[i]->value().to_vector<float>();
        const auto b = dl.ps[i]->value().to_vector<float>();
        delayed_identical = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
        if (!delayed_identical) {  // where, and how far: the first differing element
          const Model init(total, per, dev, 1);
          const auto v0 = init.ps[i]->value().to_vector<float>();
          const auto g0 = init.ps[i]->grad().to_vector<float>();
          size_t j = 0;
          while (j < a.size() && std::memcmp(&a[j], &b[j], 4) == 0) ++j;
          std::fprintf(stderr,
                       "delayed mismatch: tensor %zu of %zu, element %zu of %zu: on-GPU %.9g, "
                       "delayed %.9g, initial value %.9g, gradient %.9g\n",
                       i, on_gpu.ps.size(), j, a.size(), a[j], b[j], v0[j], g0[j]);
        }
      }
      std::printf(
          "(c) steady state with %.1f ms of simulated compute (%d GEMMs): compute alone %.2f "
          "ms/iteration; + exact offloaded step %.2f ms (+%.2f ms, %.2fx); + delayed offloaded "
          "step %.2f ms (+%.2f ms, %.2fx; its step() %.2f ms on the host, of which %.2f ms "
          "waiting for the previous update; background: %.2f ms waiting for gradients, %.2f ms "
          "updating); delayed == on-GPU after flush, bit for bit: %s\n",
          o.compute_ms, compute.gemms, alone.iteration_ms, exact.iteration_ms,
          exact.iteration_ms - alone.iteration_ms, exact.iteration_ms / alone.iteration_ms,
          late.iteration_ms, late.iteration_ms - alone.iteration_ms,
          late.iteration_ms / alone.iteration_ms, late.step_host_ms, dtiming.background_wait_ms,
          dtiming.download_wait_ms, dtiming.update_ms, delayed_identical ? "yes" : "NO");
      out["gpu_steady_state"] = {{"compute_ms_requested", o.compute_ms},
                                 {"compute_ms", alone.iteration_ms},
                                 {"exact_iteration_ms", exact.iteration_ms},
                                 {"delayed_iteration_ms", late.iteration_ms},
                                 {"delayed_step_host_ms", late.step_host_ms},
                                 {"delayed_background_wait_ms", dtiming.background_wait_ms},
                                 {"delayed_bit_identical", delayed_identical}};
      if (!delayed_identical) {
        std::fprintf(stderr,
                     "error: the delayed offloaded parameters differ from the on-GPU ones\n");
        if (!o.json.empty()) std::ofstream(o.json) << out.dump() << "\n";
        return 1;
      }
    } else {
      std::printf("(c) skipped: %s\n", o.cpu ? "--cpu" : "no GPU");
    }
    if (!o.json.empty()) std::ofstream(o.json) << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
