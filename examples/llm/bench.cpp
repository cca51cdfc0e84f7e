// stoker_llm --synthetic: the benchmark mode (one fixed batch of random ids per rank,
// --bench-warmup untimed steps, a device sync, --steps timed steps, a device sync), and the FLOP
// model of its MFU (llm_program.h, docs/llm.md#benchmark-mode-and-flops).
#include <fmt/format.h>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "llm_program.h"
#include "stoker/diag/report.h"

namespace stoker::llm_program {

double training_flops_per_token(const llm::LlamaConfig& c, int64_t seq) {
  const double n =
      static_cast<double>(c.parameter_count() - (c.tie_embeddings ? 0 : c.vocab * c.d_model));
  return 6.0 * n + 12.0 * static_cast<double>(c.layers) * static_cast<double>(c.heads) *
                       static_cast<double>(c.head_dim) * static_cast<double>(seq);
}

namespace {

// The loss on one fixed batch, nothing saved (the check that the benchmark trained).
double eval_loss_fixed(llm::Llama& model, nn::Loss& loss, const data::Batch& batch) {
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
  const int64_t t = b.seq;
  train::TrainerOptions topts = b.topts;
  topts.progress_bar = false;
  topts.quiet = true;
  train::Trainer trainer(b.model, b.loss, b.opt, train::apply_environment(topts));
  auto random_ids = [&](const Shape& shape, uint64_t stream) {
    std::vector<int64_t> v(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = core::philox_block(o.seed + 1 + rank, stream, i).v[0] % b.config.vocab;
    return Tensor::from_vector(v, shape, b.device);
  };
  std::vector<data::Batch> micro;
  for (int m = 0; m < o.accum; ++m)
    micro.push_back({.input = random_ids({o.batch, t}, 2 * m),
                     .target = random_ids({o.batch * t}, 2 * m + 1),
                     .size = o.batch});
  const double first = eval_loss_fixed(b.model, b.loss, micro[0]);
  for (int i = 0; i < o.bench_warmup; ++i) trainer.train_step(micro);
  core::synchronize_device(b.device);
  core::reset_peak_memory(b.device);
  core::reset_graph_memory_peak(b.device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.steps; ++i) trainer.train_step(micro);
  core::synchronize_device(b.device);
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
              static_cast<double>(o.steps);
  if (world > 1) {  // the slowest rank's step time
    const Tensor x =
        Tensor::from_floats({static_cast<float>(dt)}, {1}, DType::f32, b.ctx.comm->device());
    b.ctx.comm->all_reduce(x, dist::ReduceOp::max);
    dt = x.item();
  }
  // A CUDA graph's step allocates from the graph's own memory, which the allocator's peak does
  // not see: its high-water mark is added (an upper bound of the joint peak), as stoker_gpt does.
  const double peak_gib = static_cast<double>(core::memory_stats(b.device).peak_bytes +
                                              core::graph_memory_stats(b.device).used_high_bytes) /
                          (1024.0 * 1024.0 * 1024.0);
  const double last = eval_loss_fixed(b.model, b.loss, micro[0]);
  const double tokens = static_cast<double>(o.batch * t * o.accum);
  const double per_token = training_flops_per_token(b.config, t);
  const DType dtype =
      b.precision == amp::Precision::fp32 ? DType::f32 : amp::compute_dtype(b.precision);
  const diag::DevicePeaks peaks = diag::device_peaks(b.device);
  const double peak = peaks.compute_tflops(dtype, o.tf32);
  if (rank == 0) {
    // benchmarks/peers/torch_train.py's `llama` line, so scripts parse both alike.
    const std::string name = fmt::format(
        "stoker Llama {} B={} T={}{} {}{}{}{}", o.init_from.empty() ? o.preset : o.init_from,
        o.batch, t, o.accum > 1 ? fmt::format(" accum={}", o.accum) : std::string(),
        b.precision == amp::Precision::fp32 ? (o.tf32 ? "fp32(tf32)" : "fp32") : o.precision,
        b.wrapped > 0 ? fmt::format(" +ckpt(every {})", o.run.activation_checkpoint_every) : "",
        b.topts.cuda_graph ? " +graph" : "", world > 1 ? fmt::format(" x{} ranks", world) : "");
    std::printf("%s: %s tok/s, %.1f ms/step, peak %.1f GiB, ~%.0f TFLOP/s%s\n", name.c_str(),
                fmt::format("{}", static_cast<long long>(tokens / dt)).c_str(), dt * 1e3, peak_gib,
                tokens / dt * per_token / 1e12,
                peak > 0
                    ? fmt::format(", MFU {:.1f} % of {:g} TFLOP/s ({})",
                                  100 * tokens / dt * per_token / (peak * 1e12), peak, peaks.source)
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

}  // namespace stoker::llm_program
