// A made-up but complete health-check page: an input-bound GPU run with a launch share, an op
// table, a saw-tooth utilization, logged losses, evaluations, static checks and a baseline
// comparison. Shared by html_report_test.cpp and the page the browser check loads
// (html_report_sample.cpp).
#pragma once

#include <cmath>
#include <vector>

#include "diag/baseline.h"
#include "diag/breakdown.h"
#include "diag/html_report.h"
#include "diag/op_profile.h"

namespace stoker::diag::test_fixture {

inline std::vector<StepSample> sample_steps(int steps, double slow = 1.0) {
  std::vector<StepSample> out;
  for (int i = 0; i < steps; ++i) {
    StepSample s;
    s.step = i + 5;
    s.has_device = true;
    const double jitter = 1 + 0.03 * std::sin(i * 0.7);
    s.device = {40 * jitter, 18 * slow, 30 * slow, 0, 5};  // data, fwd, bwd, comm, opt
    s.host = {44 * jitter, 15, 25, 0, 4};
    s.host_ms = 95 * jitter * slow;
    s.launch_ms = 9;
    s.samples = 256;
    s.micro_steps = 1;
    out.push_back(s);
  }
  return out;
}

inline OpTable sample_ops() {
  std::vector<OpStep> steps(2);
  for (OpStep& st : steps) {
    st.step_ms = 95;
    double t = 0;
    auto op = [&](const char* name, const char* module, double ms, double gflop, double mb) {
      st.ops.push_back({name, module, {gflop * 1e9, mb * 1e6, DType::bf16}, ms, t});
      t += ms;
    };
    op("conv2d_forward", "0.conv", 12, 3000, 300);
    op("batchnorm_forward", "0.bn", 6, 2, 8000);
    op("relu", "0.relu", 4, 0.5, 6000);
    op("conv2d_backward_data", "0.conv", 14, 3000, 350);
    op("gemm", "fc", 3, 900, 50);
    op("add", "1", 2, 0.2, 3000);
  }
  return summarize_ops(steps, peaks_for_gpu("NVIDIA H200"), false, 0.2);
}

// `steps` timeline points (loss every 10 steps) and `gpu_samples` NVML samples every 0.1 s with
// a saw-tooth utilization (7 busy, 3 idle).
inline HtmlReport sample_report(int steps, int gpu_samples) {
  HtmlReport h;
  h.title = "stoker health check: ResNet-50 (made-up run)";
  h.facts = {{"device", "cuda:0 (NVIDIA H200)"}, {"precision", "bf16"}, {"world_size", "1"}};
  const std::vector<StepSample> s = sample_steps(steps);
  LoaderView loader;
  loader.present = loader.is_loader = true;
  loader.kind = "Loader";
  loader.threads = 4;
  loader.cpu_count = 16;
  loader.worker_s_per_sample = 0.004;
  loader.decode_ms = 3.2;
  loader.read_ms = 0.1;
  loader.resize_ms = 0.7;
  loader.capacity_samples_per_s = 1000;
  loader.summary = "4 threads, prefetch 4";
  GpuHealth gpu;
  gpu.available = true;
  gpu.name = "NVIDIA H200";
  gpu.samples = gpu_samples;
  Report r = make_report(summarize(s), loader, gpu, Thresholds{}, sample_ops());
  r.title = "whole fit";
  r.device = "cuda:0";
  for (int i = 0; i < steps; ++i) {
    TimelinePoint p;
    p.step = i + 6;
    p.epoch = i * 3 / std::max(1, steps);
    p.time_s = 0.5 + 0.1 * i;
    p.step_ms = s[static_cast<size_t>(i)].host_ms;
    p.data_wait_ms = s[static_cast<size_t>(i)].host[0];
    p.device_ms = 93;
    p.samples = 256;
    if (p.step % 10 == 0) p.loss = 6.9 * std::exp(-0.01 * i);
    h.timeline.push_back(p);
  }
  for (int i = 0; i < gpu_samples; ++i) {
    GpuSample g;
    g.time_ms = 1000 + 100.0 * i;
    g.util_gpu = i % 10 < 7 ? 97 : 8;
    g.util_memory = g.util_gpu / 2;
    g.sm_clock_mhz = i % 10 < 7 ? 1980 : 1755;
    g.sm_clock_max_mhz = 1980;
    g.mem_clock_mhz = 2619;
    g.power_w = i % 10 < 7 ? 640 : 180;
    g.power_limit_w = 700;
    g.temperature_c = 55 + i % 7;
    g.memory_used_mib = 40000 + 10.0 * (i % 50);
    h.gpu.push_back(g);
  }
  h.gpu_t0_ms = 1000;
  if (steps > 100) h.evals = {{100, 11.0, 1.0}, {200, 22.0, 1.2}};
  h.curves = analyze_curves(h.timeline, h.gpu, h.evals,
                            h.timeline.empty() ? 1 : h.timeline.back().time_s, Thresholds{});
  r.curves = h.curves;
  h.report = r;
  h.checks = {{CheckStatus::ok, "driver 580.159.04 (supports CUDA up to 13.0)", ""},
              {CheckStatus::warn, "GPU 0 (NVIDIA H200): persistence mode off",
               "nvidia-smi -pm 1 (administrator)"},
              {CheckStatus::fail, "GPU 0 (NVIDIA H200): 2 uncorrected ECC errors", "drain the GPU"},
              {CheckStatus::info, "CPU: 16 hardware threads", ""}};
  Environment env;
  env.gpu = "NVIDIA H200";
  env.driver = "580.159.04";
  Environment env2 = env;
  env2.driver = "580.95.05";
  const BaselineCard before = make_card(env, sample_steps(200), "input-bound");
  const BaselineCard after = make_card(env2, sample_steps(200, 1.2), "input-bound");
  h.comparison = compare_cards(before, after);
  return h;
}

}  // namespace stoker::diag::test_fixture
