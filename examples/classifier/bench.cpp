// stoker_classifier --synthetic: the benchmark mode, timed the way benchmarks/peers/torch_e2e.py
// does (main.cpp's header gives its line formats; scripts/gpu-measure.sh parses them).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "classifier_program.h"

namespace stoker::classifier_program {

namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// One optimizer step per call on `batch`, `n` times, between device syncs: seconds.
double time_steps(train::Trainer& t, const data::Batch& batch, int n, Device device) {
  stoker::core::synchronize_device(device);
  const auto t0 = Clock::now();
  const std::vector<data::Batch> micro{batch};
  for (int i = 0; i < n; ++i) t.train_step(micro);
  stoker::core::synchronize_device(device);
  return since(t0);
}

// The bench's Trainer: quiet, no gradient norm, the run's checkpointing and graph flags (and
// STOKER_DIAG*: `stoker doctor` steers it, train/environment.h).
train::TrainerOptions bench_trainer_options(const Args& a, Precision p, dist::GradSync* sync,
                                            bool graph) {
  return train::apply_environment({.precision = p,
                                   .log_grad_norm = false,
                                   .progress_bar = false,
                                   .quiet = true,
                                   .activation_checkpoint_every = a.run.activation_checkpoint_every,
                                   .grad_sync = sync,
                                   .cuda_graph = graph});
}

}  // namespace

int run_bench(const Args& a, Device device, dist::DistContext* ctx) {
  // Under a launcher (stoker launch / torchrun) the synthetic bench is data parallel: each rank
  // its own random batch on cuda:LOCAL_RANK, gradients averaged by a ReplicatedGradSync.
  const int world = ctx ? ctx->comm->world_size() : 1;
  const bool root = !ctx || ctx->comm->rank() == 0;
  const Precision p = parse_precision(a.precision);
  const Layout layout = parse_layout(a.layout);
  const DType dtype = stoker::amp::compute_dtype(p);
  std::unique_ptr<data::LmdbImageDataset> ds;
  if (!a.data.empty()) ds = std::make_unique<data::LmdbImageDataset>(a.data);
  const int64_t classes = ds ? checked_classes(a, *ds, 1000) : (a.classes > 0 ? a.classes : 1000);
  const std::string tag = a.arch + " " + a.precision + " " + std::string(layout_name(layout)) +
                          " B=" + std::to_string(a.batch) + (a.fuse_bn_relu ? " +fused" : "") +
                          (use_cuda_graph(a, device, world) ? " +graph" : "") +
                          (a.conv_autotune ? " +conv-autotune" : "");
  if (root)
    std::printf(
        "%s on %s (%s), image %dx%d, %lld classes, %s(momentum 0.9)%s\n", tag.c_str(),
        device.str().c_str(), stoker::core::describe_device(device).c_str(), a.image_size,
        a.image_size, static_cast<long long>(classes), a.optimizer == "lars" ? "LARS" : "SGD",
        world > 1 ? (", data parallel on " + std::to_string(world) + " ranks").c_str() : "");
  const float lr = a.lr > 0 ? a.lr : 0.1f;
  // The peer's SGD has no weight decay; LARS keeps its own (its update's work).
  const float bench_decay = a.optimizer == "lars" ? a.weight_decay : 0.0f;

  // Synthetic: one random batch on the device, in the compute dtype and layout.
  double syn = 0;
  {
    auto model = build_model(a, classes, layout, device);
    std::unique_ptr<dist::ReplicatedGradSync> grad_sync;
    if (world > 1) grad_sync = std::make_unique<dist::ReplicatedGradSync>(*ctx->comm, *model);
    const auto opt = make_optimizer(a, *model, lr, bench_decay);
    nn::CrossEntropyLoss loss({.label_smoothing = a.label_smoothing});
    train::Trainer t(
        *model, loss, *opt,
        bench_trainer_options(a, p, grad_sync.get(), use_cuda_graph(a, device, world)));
    data::Batch b;
    const stoker::ops::Dims4 d{a.batch, 3, a.image_size, a.image_size};
    b.input = Tensor::empty(stoker::ops::shape4(d, layout), dtype, device);
    stoker::ops::random_normal(b.input, 0.0f, 1.0f, a.seed + 1 + (ctx ? ctx->comm->rank() : 0), 0);
    std::vector<int64_t> labels(static_cast<size_t>(a.batch));
    for (int64_t i = 0; i < a.batch; ++i) labels[static_cast<size_t>(i)] = (i * 7919) % classes;
    b.target = Tensor::from_vector(labels, {a.batch}, device);
    b.size = a.batch;
    time_steps(t, b, a.warmup, device);
    stoker::core::reset_peak_memory(device);
    const double s = time_steps(t, b, a.steps, device);
    syn = static_cast<double>(a.steps) * a.batch / s;
    if (world > 1) {
      // The job's rate is set by its slowest rank.
      const Tensor slowest =
          Tensor::from_floats({static_cast<float>(s)}, {1}, DType::f32, ctx->comm->device());
      ctx->comm->all_reduce(slowest, dist::ReduceOp::max);
      const double job_s = slowest.item();
      if (root)
        std::printf(
            "%s x%d ranks: synthetic %.0f img/s per rank, %.0f img/s on %d ranks, peak "
            "%.2f GiB (%d steps, %.2f ms/step)\n",
            tag.c_str(), world, syn, static_cast<double>(a.steps) * a.batch * world / job_s, world,
            gib(stoker::core::memory_stats(device).peak_bytes), a.steps, job_s * 1e3 / a.steps);
    } else {
      std::printf("%s: synthetic %.0f img/s, peak %.2f GiB (%d steps, %.2f ms/step)\n", tag.c_str(),
                  syn, gib(stoker::core::memory_stats(device).peak_bytes), a.steps,
                  s * 1e3 / a.steps);
    }
    std::fflush(stdout);
  }
  if (!ds) return 0;
  STOKER_CHECK(world == 1,
               "--synthetic --data: the loader-fed bench runs on one GPU; start it "
               "without a launcher");

  // Fed by the Loader: `bench_epochs` epochs, the first `warmup` steps untimed.
  auto model = build_model(a, classes, layout, device);
  const auto opt = make_optimizer(a, *model, lr, bench_decay);
  nn::CrossEntropyLoss loss({.label_smoothing = a.label_smoothing});
  train::Trainer t(*model, loss, *opt,
                   bench_trainer_options(a, p, nullptr, use_cuda_graph(a, device, 1)));
  Args la = a;
  if (la.crop_scale < 0) la.crop_scale = 0.08;
  if (la.eval_resize <= 0) la.eval_resize = la.image_size * 8 / 7;
  data::Loader loader(*ds, loader_options(la, device, layout, dtype, 0, 1, true));
  int64_t timed = 0, steps = 0;
  Clock::time_point t0;
  data::LoaderCounters c0;
  std::vector<data::Batch> micro(1);
  for (int64_t e = 0; e < a.bench_epochs; ++e) {
    loader.start_epoch(e);
    while (loader.next(micro[0])) {
      t.train_step(micro);
      if (++steps == a.warmup) {
        stoker::core::synchronize_device(device);
        stoker::core::reset_peak_memory(device);
        t0 = Clock::now();
        c0 = loader.counters();
      } else if (steps > a.warmup) {
        timed += micro[0].size;
      }
    }
  }
  micro.clear();
  stoker::core::synchronize_device(device);
  STOKER_CHECK(steps > a.warmup, "--synthetic --data: ", a.data, " gives only ", steps,
               " batches in --bench-epochs ", a.bench_epochs, "; need more than --warmup ",
               a.warmup);
  const double s = since(t0);
  const double fed = static_cast<double>(timed) / s;
  const data::LoaderCounters c = loader.counters();
  std::printf(
      "%s: fed by the stoker loader (%d threads) %.0f img/s (%.0f %% of synthetic), peak %.2f "
      "GiB (%lld timed steps; loader wait %.1f %% of the time)\n",
      tag.c_str(), loader.threads(), fed, 100.0 * fed / syn,
      gib(stoker::core::memory_stats(device).peak_bytes), static_cast<long long>(steps - a.warmup),
      100.0 * (c.consumer_wait_s - c0.consumer_wait_s) / s);
  std::printf("loader: %s\n", loader.summary().c_str());
  return 0;
}

}  // namespace stoker::classifier_program
