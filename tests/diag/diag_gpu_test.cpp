// Diagnostics on the GPU: CUDA-event spans, the calibrated device clock and the host-paced
// (launch) time on work made compute-heavy or launch-heavy on purpose; the Trainer's reports
// with device spans, no host sync inside a step, the NVML monitor, a trace with device tracks;
// a Loader limited to one thread is input-bound on the device side too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "diag/breakdown.h"
#include "diag/diagnostics.h"
#include "diag/nvtx.h"
#include "diag/replay_source.h"
#include "diag/step_timer.h"
#include "stoker/data/loader.h"
#include "stoker/data/pack.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/nn/pool.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"
#include "test_util.h"

namespace fs = std::filesystem;
namespace diag = stoker::diag;
namespace nn = stoker::nn;
namespace data = stoker::data;
using diag::Phase;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::train::Trainer;
using stoker::train::TrainerOptions;

namespace {
const Device kGpu = Device::cuda(0);

// Steps whose forward phase is `work()`; the other phases are empty.
std::vector<diag::StepSample> timed_steps(int n, const std::function<void()>& work) {
  diag::StepTimer t(kGpu);
  stoker::core::synchronize_device(kGpu);  // idle at the first step: it calibrates the clock
  for (int i = 0; i < n; ++i) {
    t.begin_step(i);
    t.begin(Phase::forward);
    work();
    t.begin(Phase::optimizer);
    t.end_step(1);
  }
  stoker::core::synchronize_device(kGpu);
  auto steps = t.completed();
  EXPECT_EQ(t.pending(), 0u);
  return steps;
}
}  // namespace

TEST(DiagGpu, ComputeHeavyStepIsComputeBound) {
  STOKER_REQUIRE_GPU();
  const int64_t n = 8192;
  Tensor a = Tensor::empty({n, n}, DType::bf16, kGpu), b = Tensor::empty({n, n}, DType::bf16, kGpu),
         c = Tensor::empty({n, n}, DType::bf16, kGpu);
  stoker::ops::random_normal(a, 0, 1, 1, 0);
  stoker::ops::random_normal(b, 0, 1, 2, 0);
  stoker::ops::gemm(c, a, b);  // first use of the shape: GEMM autotuning syncs here, once
  // 8 GEMMs of 8192^3: ~9 TFLOP per step, about 12 ms on an H200; the host enqueues them in
  // microseconds and runs ahead.
  const auto steps = timed_steps(12, [&] {
    for (int i = 0; i < 8; ++i) stoker::ops::gemm(c, a, b);
  });
  ASSERT_EQ(steps.size(), 12u);
  for (const auto& s : steps) {
    EXPECT_TRUE(s.has_device);
    EXPECT_EQ(s.host_syncs, 0);
  }
  const diag::Breakdown b2 = diag::summarize(std::span(steps).subspan(2));
  EXPECT_TRUE(b2.device_timed);
  ASSERT_TRUE(b2.launch_known) << "no idle moment to calibrate";
  EXPECT_GT(b2.device[static_cast<int>(Phase::forward)].median_ms, 2.0);
  const diag::Report r = diag::make_report(b2, {}, {});
  EXPECT_EQ(r.verdict, diag::Verdict::compute_bound) << r.text();
  EXPECT_LT(b2.launch_share, 0.03) << r.text();
}

TEST(DiagGpu, ManyTinyKernelsAreLaunchBound) {
  STOKER_REQUIRE_GPU();
  Tensor x = Tensor::zeros({256}, DType::f32, kGpu);
  // 3,000 one-block kernels: each runs in a few microseconds, each launch costs about as much,
  // so the device finishes each interval as soon as the host has launched it.
  const auto steps = timed_steps(12, [&] {
    for (int i = 0; i < 3000; ++i) stoker::ops::scale(x, 1.0f);
  });
  const diag::Breakdown b = diag::summarize(std::span(steps).subspan(2));
  ASSERT_TRUE(b.launch_known);
  const diag::Report r = diag::make_report(b, {}, {});
  EXPECT_EQ(r.verdict, diag::Verdict::launch_bound) << r.text();
  EXPECT_GT(b.launch_share, 0.5) << r.text();
}

TEST(DiagGpu, TrainerReportsDeviceSpansMonitorAndTrace) {
  STOKER_REQUIRE_GPU();
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_diag_gpu_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Tensor x = Tensor::empty({8192, 1024}, DType::f32);
  stoker::ops::random_normal(x, 0, 1, 3, 0);
  std::vector<int64_t> labels(8192);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  data::TensorBatches batches(x, Tensor::from_vector(labels, {8192}),
                              {.batch_size = 512, .seed = 1, .device = kGpu});
  nn::manual_seed(1);
  nn::Sequential model;
  model.add(nn::make<nn::Linear>(1024, 4096));
  model.add(nn::make<nn::ReLU>());
  model.add(nn::make<nn::Linear>(4096, 4096));
  model.add(nn::make<nn::ReLU>());
  model.add(nn::make<nn::Linear>(4096, 10));
  model.to(kGpu);
  stoker::optim::AdamW opt(model.named_parameters());
  nn::CrossEntropyLoss loss;
  TrainerOptions o{.precision = stoker::amp::Precision::bf16, .progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 3;
  o.diagnostics.monitor_interval_s = 0.02;
  o.diagnostics.trace_path = dir / "trace.json";
  Trainer trainer(model, loss, opt, o);
  const auto result = trainer.fit(batches, 3);  // 16 steps per epoch
  const diag::Report& r = result.diagnosis;
  EXPECT_EQ(r.breakdown.steps, 45);
  EXPECT_TRUE(r.breakdown.device_timed) << r.text();
  EXPECT_TRUE(r.breakdown.launch_known) << r.text();
  EXPECT_GT(r.breakdown.device[static_cast<int>(Phase::backward)].median_ms, 0.0);
  EXPECT_LE(r.breakdown.max_host_syncs, 1) << r.text();  // TensorBatches' pageable H2D copy
  // On the H200 machine NVML is there: the monitor's clocks and power are in the report.
  if (r.gpu.available) {
    EXPECT_GT(r.gpu.samples, 0);
    EXPECT_GT(r.gpu.sm_clock_max_mhz, 0);
    EXPECT_GT(r.gpu.power_limit_w, 0);
  } else {
    std::printf("NVML unavailable: %s\n", r.gpu.status.c_str());
  }
  std::printf("%s", r.text().c_str());
  std::ifstream f(dir / "trace.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string trace = ss.str();
  EXPECT_NE(trace.find("\"compute stream\""), std::string::npos);
  EXPECT_NE(trace.find("\"lag_ms\""), std::string::npos);  // device spans are there
  EXPECT_TRUE(diag::nvtx_enabled());
  fs::remove_all(dir);
}

TEST(DiagGpu, OneLoaderThreadIsInputBoundOnTheDevice) {
  STOKER_REQUIRE_GPU();
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_diag_gpu_in_" + std::to_string(::getpid()));
  data::pack_synth({.samples = 64, .classes = 4, .size = 512, .seed = 5}, dir,
                   {.threads = 4, .progress = false});
  {
    data::LmdbImageDataset ds(dir);
    data::Loader loader(ds, {.batch_size = 16,
                             .threads = 1,
                             .prefetch = 2,
                             .transform = {.output_size = 224},
                             .seed = 1,
                             .device = kGpu});
    nn::manual_seed(3);
    nn::Sequential model;
    model.add(nn::make<nn::GlobalAvgPool>());
    model.add(nn::make<nn::Flatten>());
    model.add(nn::make<nn::Linear>(3, 4));
    model.to(kGpu);
    stoker::optim::SGD opt(model.named_parameters(), {.lr = 0.01f});
    nn::CrossEntropyLoss loss;
    TrainerOptions o{.progress_bar = false, .quiet = true};
    o.diagnostics.enabled = true;
    o.diagnostics.warmup_steps = 2;
    Trainer trainer(model, loss, opt, o);
    const auto real = trainer.fit(loader, 3);
    EXPECT_EQ(real.diagnosis.verdict, diag::Verdict::input_bound) << real.diagnosis.text();
    EXPECT_GT(real.diagnosis.breakdown.input_share, 0.5) << real.diagnosis.text();
    EXPECT_TRUE(real.diagnosis.breakdown.h2d_known) << real.diagnosis.text();
    // The same model on a replayed batch: no longer input-bound.
    diag::ReplaySource replay(loader);
    Trainer again(model, loss, opt, o);
    const auto synth = again.fit(replay, 3);
    EXPECT_NE(synth.diagnosis.verdict, diag::Verdict::input_bound) << synth.diagnosis.text();
  }
  fs::remove_all(dir);
}
