// Writes the health-check pages the browser check loads (tests/diag/html_browser_check.py),
// each with the chart points the page must show:
//   OUTDIR/synthetic.html  a made-up GPU run (html_report_fixture.h): every section and chart,
//                          GPU series long enough to be reduced
//   OUTDIR/fit.html        a real CPU Trainer fit with diagnostics and an evaluation, written by
//                          fit() itself (DiagnosticsOptions::html_report)
// and OUTDIR/<page>.expect.json beside each.
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "diag/diagnostics.h"
#include "html_report_fixture.h"
#include "stoker/data/tensor_batches.h"
#include "stoker/nn/activation.h"
#include "stoker/nn/containers.h"
#include "stoker/nn/linear.h"
#include "stoker/nn/loss.h"
#include "stoker/ops/elementwise.h"
#include "stoker/optim/optimizer.h"
#include "stoker/train/trainer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace stoker;

namespace {

void write_expect(const fs::path& path, const json& charts, int min_charts) {
  std::ofstream(path) << json{{"charts", charts}, {"min_charts", min_charts}}.dump(2) << "\n";
}

data::TensorBatches blobs(int64_t n, int64_t batch, uint64_t seed) {
  Tensor x = Tensor::empty({n, 16}, DType::f32);
  ops::random_normal(x, 0.0f, 1.0f, seed, 0);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % 3;
  return data::TensorBatches(x, Tensor::from_vector(labels, {n}),
                             {.batch_size = batch, .seed = seed});
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out);

  // The made-up run.
  const int steps = 240, gpu_samples = 2500;
  diag::write_html(out / "synthetic.html", diag::test_fixture::sample_report(steps, gpu_samples));
  const int reduced = static_cast<int>(diag::chart_point_count(gpu_samples));
  write_expect(out / "synthetic.expect.json",
               {{"step_time", {{"step_ms", steps}, {"device_ms", steps}}},
                {"data_wait", {{"data_wait_ms", steps}}},
                {"loss", {{"loss", steps / 10}}},
                {"gpu_util", {{"util_gpu", reduced}, {"util_memory", reduced}}},
                {"power", {{"power_w", reduced}, {"power_limit_w", reduced}}},
                {"clocks", {{"sm_clock_mhz", reduced}, {"mem_clock_mhz", reduced}}},
                {"gpu_memory", {{"memory_used_mib", reduced}}},
                {"temperature", {{"temperature_c", reduced}}}},
               /*min_charts=*/9);

  // A real fit on the CPU: 3 epochs of 8 steps, an evaluation after each, a log line every 4.
  nn::manual_seed(7);
  nn::Sequential model;
  model.add(nn::make<nn::Linear>(16, 32));
  model.add(nn::make<nn::ReLU>());
  model.add(nn::make<nn::Linear>(32, 3));
  optim::SGD opt(model.named_parameters(), {.lr = 0.05f});
  nn::CrossEntropyLoss loss;
  train::TrainerOptions o{.log_interval = 4, .progress_bar = false, .quiet = true};
  o.diagnostics.enabled = true;
  o.diagnostics.warmup_steps = 2;
  o.diagnostics.html_report = out / "fit.html";
  train::Trainer trainer(model, loss, opt, o);
  data::TensorBatches train = blobs(256, 32, 1), validation = blobs(64, 32, 2);
  trainer.fit(train, 3, &validation);
  const diag::Diagnostics* d = trainer.diagnostics();
  int losses = 0;
  for (const diag::TimelinePoint& p : d->timeline()) losses += std::isfinite(p.loss) ? 1 : 0;
  const int points = static_cast<int>(d->timeline().size());
  write_expect(out / "fit.expect.json",
               {{"step_time", {{"step_ms", points}}},
                {"data_wait", {{"data_wait_ms", points}}},
                {"loss", {{"loss", losses}}}},
               /*min_charts=*/4);
  std::printf("html_report_sample: wrote %s (synthetic.html, fit.html: %d steps, %d losses)\n",
              out.string().c_str(), points, losses);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "html_report_sample: %s\n", e.what());
  return 1;
}
