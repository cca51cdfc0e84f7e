// stoker_gpt --synthetic: the benchmark mode, timed like benchmarks/peers/torch_train.py's
// `gpt` (--bench-warmup untimed steps, a device sync, --steps timed steps, a device sync) and
// reported in its line format (scripts/gpu-measure.sh parses it).
#include <fmt/format.h>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "gpt_flops.h"
#include "gpt_program.h"
#include "stoker/diag/report.h"

namespace stoker::gpt_program {

namespace {

// The loss on one fixed batch, in evaluation mode, nothing saved (the benchmark's check that
// it trained).
double eval_loss_fixed(gpt::Gpt& model, nn::Loss& loss, const data::Batch& batch) {
  const bool was_training = model.training();
  model.set_training(false);
  nn::NoSaveScope no_save;
  const double l = loss.forward(model.forward(batch.input), batch.target).item();
  model.set_training(was_training);
  return l;
}

}  // namespace

int run_bench(const Options& o, const BenchSetup& b) {
  const int rank = b.ctx.env.rank, world = b.ctx.env.world_size;
  const bool root = rank == 0;
  const Device device = b.device;
  const int64_t t = b.config.context;
  // The peer's benchmark: one fixed batch of random ids (its randint(0, 50257)), per rank.
  train::TrainerOptions topts = b.topts;
  topts.progress_bar = false;
  topts.quiet = true;
  train::Trainer trainer(b.model, b.loss, b.opt, train::apply_environment(topts));
  const int64_t hi = std::min<int64_t>(b.config.vocab, 50257);
  auto random_ids = [&](const Shape& shape, uint64_t stream) {
    std::vector<int64_t> v(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = core::philox_block(o.seed + 1 + rank, stream, i).v[0] % hi;
    return Tensor::from_vector(v, shape, device);
  };
  std::vector<data::Batch> micro;
  for (int m = 0; m < o.accum; ++m)
    micro.push_back({.input = random_ids({o.batch, t}, 2 * m),
                     .target = random_ids({o.batch * t}, 2 * m + 1),
                     .size = o.batch});
  const double first = eval_loss_fixed(b.model, b.loss, micro[0]);
  for (int i = 0; i < o.bench_warmup; ++i) trainer.train_step(micro);
  core::synchronize_device(device);
  core::reset_peak_memory(device);
  core::reset_graph_memory_peak(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.steps; ++i) trainer.train_step(micro);
  core::synchronize_device(device);
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
              static_cast<double>(o.steps);
  // A CUDA graph's step allocates from the graph's own memory, which the allocator's peak does
  // not see: its high-water mark is added (an upper bound of the joint peak).
  const double peak_gib = static_cast<double>(core::memory_stats(device).peak_bytes +
                                              core::graph_memory_stats(device).used_high_bytes) /
                          (1024.0 * 1024.0 * 1024.0);
  if (world > 1) {  // the slowest rank's step time
    const Tensor x =
        Tensor::from_floats({static_cast<float>(dt)}, {1}, DType::f32, b.ctx.comm->device());
    b.ctx.comm->all_reduce(x, dist::ReduceOp::max);
    dt = x.item();
  }
  const double last = eval_loss_fixed(b.model, b.loss, micro[0]);
  const double tokens = static_cast<double>(o.batch * t * o.accum);
  const double flops = gpt::training_flops_per_token(b.config, b.params, t) * tokens;
  const DType dtype =
      b.precision == amp::Precision::fp32 ? DType::f32 : amp::compute_dtype(b.precision);
  const diag::DevicePeaks peaks = diag::device_peaks(device);
  const double util = gpt::mfu(tokens / dt, flops / tokens, peaks.compute_tflops(dtype, o.tf32));
  if (root) {
    const std::string name = fmt::format(
        "stoker GPT {} B={} T={}{} {}{}{}{}{}", o.preset, o.batch, t,
        o.accum > 1 ? fmt::format(" accum={}", o.accum) : std::string(),
        b.precision == amp::Precision::fp32 ? (o.tf32 ? "fp32(tf32)" : "fp32") : o.precision,
        b.wrapped > 0 ? fmt::format(" +ckpt(every {})", o.run.activation_checkpoint_every) : "",
        o.selective ? " +selective" : "", b.topts.cuda_graph ? " +graph" : "",
        world > 1 ? fmt::format(" x{} ranks", world) : "");
    std::printf(
        "%s: %s tok/s, %.1f ms/step, peak %.1f GiB%s, ~%.0f TFLOP/s%s\n", name.c_str(),
        fmt::format("{}", static_cast<long long>(tokens / dt)).c_str(), dt * 1e3, peak_gib,
        b.topts.cuda_graph ? " (with the graph's own memory)" : "", flops / dt / 1e12,
        util > 0 ? fmt::format(", MFU {:g} % of {:g} TFLOP/s ({})", std::lround(1000 * util) / 10.0,
                               peaks.compute_tflops(dtype, o.tf32), peaks.source)
                       .c_str()
                 : "");
    if (world > 1)
      std::printf("job: %.0f tok/s over %d ranks (slowest rank's step time)\n", tokens * world / dt,
                  world);
    std::printf("loss on the fixed batch: %.4f before, %.4f after %d + %lld steps\n", first, last,
                o.bench_warmup, static_cast<long long>(o.steps));
  }
  return std::isfinite(last) && last < first ? 0 : 1;
}

}  // namespace stoker::gpt_program
