// All-reduce throughput in the format of nccl-tests' all_reduce_perf, and the communication a
// data-parallel training step leaves exposed.
//
// Collective mode (default): for each size from --min-bytes to --max-bytes (x --factor), each
// dtype (f32, bf16) and placement (out-of-place, in-place): --warmup calls, then --iters calls
// timed back to back (CUDA events on a GPU, the wall clock on the CPU); the slowest rank's mean
// is reported. Columns (docs/benchmarks.md, as nccl-tests defines them):
//   size   bytes per rank;  count  elements;  time  mean microseconds per call
//   algbw  size / time (GB/s, 1e9);  busbw  algbw * 2 (n - 1) / n — the per-link bandwidth of a
//          ring all-reduce, comparable across rank counts (0 with one rank)
//   #wrong elements that differ from the exact answer after one call on fresh inputs (rank r
//          holds (r + 1) * (i % 7 + 1), exact in bf16 up to 8 ranks); any wrong element fails
//          the run (exit status 1).
//
// Training-step mode (--train-step): the MLP of train_bench (L x Linear(d, d) + GELU, AdamW,
// mean(y^2)), --steps steps timed (1) with local gradients: compute only, (2) with
// a dist::ReplicatedGradSync: compute + communication, and (3) the bucket all-reduces alone.
// exposed = (2) - (1) is the communication (and bucket machinery) the step waits for;
// hidden = 1 - exposed / (3). With --zero1, (4) the same step with ZeRO-1 (a
// dist::ShardedGradSync and a dist::ShardedOptimizer over AdamW, on a fresh copy of the model):
// its step time, and the optimizer state per rank with and without sharding
// (Optimizer::state_bytes).
//
// Runs as one process (world size 1: the NCCL path and the sync's overhead on one GPU) or
// under a launcher: `stoker launch --nproc-per-node 8 stoker_allreduce_throughput`. The
// --benchmark_* flags scripts/gpu-check.sh passes to every benchmark are accepted
// (--benchmark_out names the JSON file).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_context.h"
#include "dist/nccl_communicator.h"
#include "stoker/dist/env.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/dist/sharded_optimizer.h"
#include "stoker/stoker.h"

namespace {

using stoker::Device;
using stoker::DType;
using stoker::Tensor;
namespace dist = stoker::dist;
namespace nn = stoker::nn;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string min_bytes = "8", max_bytes = "4G";
  int factor = 2;
  int warmup = 5, iters = 20;
  std::vector<std::string> dtypes{"f32", "bf16"};
  bool check = true;
  std::string backend = "auto";
  std::string json;
  // Training-step mode.
  bool train_step = false;
  int layers = 8;
  int64_t width = 4096, batch = 1024;
  int steps = 20, train_warmup = 5;
  std::string precision = "bf16";
  double bucket_mib = 25, first_bucket_mib = 1;
  std::string compression = "none";
  bool zero1 = false;
};

int64_t parse_bytes(const std::string& s) {
  STOKER_CHECK(!s.empty(), "empty size");
  double v = std::stod(s);
  const char unit = s.back();
  if (unit == 'K' || unit == 'k') v *= 1024;
  if (unit == 'M' || unit == 'm') v *= 1024 * 1024;
  if (unit == 'G' || unit == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<int64_t>(v);
}

const char* nccl_type_name(DType d) { return d == DType::f32 ? "float" : "bfloat16"; }

// (r + 1) * (i % 7 + 1): a host tile copied in, then doubled on the device.
void fill_pattern(const Tensor& t, int rank) {
  const int64_t n = t.numel(), tile_n = std::min<int64_t>(n, 7 * 1024);
  std::vector<float> v(static_cast<size_t>(tile_n));
  for (int64_t i = 0; i < tile_n; ++i) v[i] = static_cast<float>((rank + 1) * (i % 7 + 1));
  const Tensor tile = Tensor::from_floats(v, {tile_n}, t.dtype(), t.device());
  stoker::ops::copy(t.slice(0, tile_n), tile);
  for (int64_t filled = tile_n; filled < n;) {
    const int64_t len = std::min(filled, n - filled);  // filled stays a multiple of 7
    stoker::ops::copy(t.slice(filled, filled + len), t.slice(0, len));
    filled += len;
  }
}

// Elements of `t` that are not (i % 7 + 1) * world (world + 1) / 2.
int64_t count_wrong(const Tensor& t, int world) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  const float sum = static_cast<float>(world * (world + 1) / 2);
  int64_t wrong = 0;
  const int64_t n = h.numel();
  if (h.dtype() == DType::f32) {
    const float* p = h.data<float>();
    for (int64_t i = 0; i < n; ++i) wrong += p[i] != static_cast<float>(i % 7 + 1) * sum;
  } else {
    uint16_t want[7];
    for (int j = 0; j < 7; ++j)
      want[j] = stoker::core::float_to_bf16_bits(static_cast<float>(j + 1) * sum);
    const auto* p = static_cast<const uint16_t*>(h.data());
    for (int64_t i = 0; i < n; ++i) wrong += p[i] != want[i % 7];
  }
  return wrong;
}

// Mean seconds per call of fn over `iters` calls after `warmup`, the slowest rank's.
double time_calls(dist::Communicator& comm, Device device, int warmup, int iters,
                  const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  double seconds = 0;
  if (device.is_cuda()) {
    const stoker::Stream s = stoker::core::current_stream(device);
    stoker::Event start = stoker::Event::create(device, true),
                  end = stoker::Event::create(device, true);
    start.record(s);
    for (int i = 0; i < iters; ++i) fn();
    end.record(s);
    end.synchronize();
    seconds = stoker::Event::elapsed_ms(start, end) / 1e3;
  } else {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const Tensor t =
      Tensor::from_floats({static_cast<float>(seconds / iters)}, {1}, DType::f32, device);
  comm.all_reduce(t, dist::ReduceOp::max);
  return t.item();
}

struct Row {
  int64_t bytes = 0, count = 0;
  std::string type;
  double time_us[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0};
  int64_t wrong[2] = {0, 0};
};

int run_collectives(const Options& o, dist::DistContext& ctx, nlohmann::json& out) {
  dist::Communicator& comm = *ctx.comm;
  const int world = comm.world_size();
  const bool root = comm.rank() == 0;
  const int64_t lo = parse_bytes(o.min_bytes), hi = parse_bytes(o.max_bytes);
  STOKER_CHECK(lo >= 1 && hi >= lo && o.factor >= 2,
               "sizes: need 1 <= --min-bytes <= --max-bytes "
               "and --factor >= 2");
  if (root) {
    std::printf("#%63s out-of-place%27s in-place\n", "", "");
    std::printf("# %12s %12s %8s %6s %10s %8s %8s %7s %10s %8s %8s %7s\n", "size", "count", "type",
                "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %12s %12s %8s %6s %10s %8s %8s %7s %10s %8s %8s %7s\n", "(B)", "(elements)", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  int64_t total_wrong = 0;
  double bus_sum = 0;
  int bus_n = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& dname : o.dtypes) {
    const DType dtype = stoker::core::parse_dtype(dname);
    STOKER_CHECK(dtype == DType::f32 || dtype == DType::bf16, "--dtypes: f32 and bf16 only");
    const int64_t es = static_cast<int64_t>(stoker::core::dtype_size(dtype));
    for (int64_t bytes = lo; bytes <= hi; bytes *= o.factor) {
      const int64_t count = bytes / es;
      if (count < 1) continue;
      Row row{count * es, count, nccl_type_name(dtype)};
      {
        const Tensor in = Tensor::empty({count}, dtype, ctx.device);
        const Tensor res = Tensor::empty({count}, dtype, ctx.device);
        fill_pattern(in, comm.rank());
        const double s = time_calls(comm, ctx.device, o.warmup, o.iters,
                                    [&] { comm.all_reduce(in, res, dist::ReduceOp::sum); });
        row.time_us[0] = s * 1e6;
        row.wrong[0] = o.check ? count_wrong(res, world) : -1;
      }
      {
        const Tensor buf = Tensor::empty({count}, dtype, ctx.device);
        fill_pattern(buf, comm.rank());
        const double s = time_calls(comm, ctx.device, o.warmup, o.iters,
                                    [&] { comm.all_reduce(buf, dist::ReduceOp::sum); });
        row.time_us[1] = s * 1e6;
        if (o.check) {
          fill_pattern(buf, comm.rank());
          comm.all_reduce(buf, dist::ReduceOp::sum);
          row.wrong[1] = count_wrong(buf, world);
        } else {
          row.wrong[1] = -1;
        }
      }
      for (int p = 0; p < 2; ++p) {
        row.algbw[p] = static_cast<double>(row.bytes) / (row.time_us[p] * 1e-6) / 1e9;
        row.busbw[p] = row.algbw[p] * 2.0 * (world - 1) / world;
        total_wrong += std::max<int64_t>(row.wrong[p], 0);
      }
      // The ranks' counts of wrong elements, summed (each rank checked its own result).
      const Tensor w = Tensor::from_vector<int64_t>({row.wrong[0], row.wrong[1]}, {2}, ctx.device);
      comm.all_reduce(w, dist::ReduceOp::sum);
      const std::vector<int64_t> wv = w.to_vector<int64_t>();
      row.wrong[0] = o.check ? wv[0] : -1;
      row.wrong[1] = o.check ? wv[1] : -1;
      if (bytes >= (int64_t{1} << 20)) {
        bus_sum += row.busbw[0];
        ++bus_n;
      }
      if (root) {
        std::printf("  %12lld %12lld %8s %6s %10.2f %8.2f %8.2f %7lld %10.2f %8.2f %8.2f %7lld\n",
                    static_cast<long long>(row.bytes), static_cast<long long>(row.count),
                    row.type.c_str(), "sum", row.time_us[0], row.algbw[0], row.busbw[0],
                    static_cast<long long>(row.wrong[0]), row.time_us[1], row.algbw[1],
                    row.busbw[1], static_cast<long long>(row.wrong[1]));
        std::fflush(stdout);
      }
      rows.push_back({{"bytes", row.bytes},
                      {"count", row.count},
                      {"type", row.type},
                      {"out_of_place",
                       {{"time_us", row.time_us[0]},
                        {"algbw", row.algbw[0]},
                        {"busbw", row.busbw[0]},
                        {"wrong", row.wrong[0]}}},
                      {"in_place",
                       {{"time_us", row.time_us[1]},
                        {"algbw", row.algbw[1]},
                        {"busbw", row.busbw[1]},
                        {"wrong", row.wrong[1]}}}});
      if (bytes > hi / o.factor) break;  // the next size would pass --max-bytes (or overflow)
    }
  }
  const Tensor tw = Tensor::from_vector<int64_t>({total_wrong}, {1}, ctx.device);
  comm.all_reduce(tw, dist::ReduceOp::sum);
  total_wrong = tw.to_vector<int64_t>()[0];
  if (root) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong == 0 ? "OK" : "FAILED");
    if (bus_n > 0)
      std::printf("# Avg bus bandwidth    : %.3f GB/s (out-of-place, sizes >= 1 MiB)\n",
                  bus_sum / bus_n);
    if (world == 1) std::printf("# (one rank: busbw = algbw * 2 (n - 1) / n = 0)\n");
  }
  out["collectives"] = rows;
  out["wrong"] = total_wrong;
  return total_wrong == 0 ? 0 : 1;
}

// Seconds per step of `steps` train_step calls after `warmup`, the slowest rank's.
double time_steps(dist::Communicator& comm, Device device, stoker::train::Trainer& t,
                  const stoker::data::Batch& batch, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) t.train_step({&batch, 1});
  stoker::core::synchronize_device(device);
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) t.train_step({&batch, 1});
  stoker::core::synchronize_device(device);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
  const Tensor x = Tensor::from_floats({static_cast<float>(s)}, {1}, DType::f32, comm.device());
  comm.all_reduce(x, dist::ReduceOp::max);
  return x.item();
}

int run_train_step(const Options& o, dist::DistContext& ctx, nlohmann::json& out) {
  dist::Communicator& comm = *ctx.comm;
  const Device device = ctx.device;
  const auto precision = stoker::amp::parse_precision(o.precision);
  nn::manual_seed(0);
  nn::Sequential model;
  for (int l = 0; l < o.layers; ++l) {
    model.add(nn::make<nn::Linear>(o.width, o.width));
    model.add(nn::make<nn::GELU>());
  }
  model.to(device);
  stoker::optim::AdamW opt(model.named_parameters());
  nn::MSELoss loss;
  Tensor x = Tensor::empty({o.batch, o.width}, DType::f32, device);
  stoker::ops::random_normal(x, 0.0f, 1.0f, 1 + comm.rank(), 0);
  const stoker::data::Batch batch{x, Tensor::zeros({o.batch, o.width}, DType::f32, device),
                                  o.batch};
  const int64_t grad_bytes = model.parameter_count() * 4;

  // (1) Compute only.
  double local_s = 0;
  {
    stoker::train::Trainer t(model, loss, opt,
                             {.precision = precision, .progress_bar = false, .quiet = true});
    local_s = time_steps(comm, device, t, batch, o.train_warmup, o.steps);
  }
  // (2) With the gradient sync.
  const dist::GradSyncOptions so{
      .bucket_bytes = static_cast<int64_t>(o.bucket_mib * (1 << 20)),
      .first_bucket_bytes = static_cast<int64_t>(o.first_bucket_mib * (1 << 20)),
      .compression = dist::parse_compression(o.compression)};
  dist::ReplicatedGradSync sync(comm, model, so);
  double dp_s = 0;
  {
    stoker::train::Trainer t(
        model, loss, opt,
        {.precision = precision, .progress_bar = false, .quiet = true, .grad_sync = &sync});
    dp_s = time_steps(comm, device, t, batch, o.train_warmup, o.steps);
  }
  // (3) The same bucket all-reduces alone, back to back on the comm stream.
  std::vector<Tensor> buckets;
  for (int b = 0; b < sync.num_buckets(); ++b)
    buckets.push_back(
        Tensor::zeros({sync.bucket(b).elements}, so.compression->wire_dtype(), device));
  double comm_s = 0;
  {
    const stoker::Stream cs =
        device.is_cuda() ? stoker::core::comm_stream(device) : stoker::Stream();
    stoker::core::StreamGuard guard(cs);
    comm_s = time_calls(comm, device, o.train_warmup, o.steps, [&] {
      for (const Tensor& t : buckets) comm.all_reduce(t, dist::ReduceOp::avg);
    });
  }
  // (4) ZeRO-1 on a fresh model (the first sync's hooks stay on the first one).
  double zero_s = 0;
  const size_t plain_state = opt.state_bytes();
  size_t zero_state = 0;
  if (o.zero1) {
    nn::manual_seed(0);
    nn::Sequential zmodel;
    for (int l = 0; l < o.layers; ++l) {
      zmodel.add(nn::make<nn::Linear>(o.width, o.width));
      zmodel.add(nn::make<nn::GELU>());
    }
    zmodel.to(device);
    dist::ShardedGradSync zsync(comm, zmodel, so);
    dist::ShardedOptimizer zopt(zsync, [](stoker::optim::NamedParameters p) {
      return std::make_unique<stoker::optim::AdamW>(std::move(p));
    });
    stoker::train::Trainer t(
        zmodel, loss, zopt,
        {.precision = precision, .progress_bar = false, .quiet = true, .grad_sync = &zsync});
    zero_s = time_steps(comm, device, t, batch, o.train_warmup, o.steps);
    zero_state = zopt.state_bytes();
  }
  const double exposed_s = std::max(0.0, dp_s - local_s);
  const double hidden = comm_s > 0 ? std::clamp(1.0 - exposed_s / comm_s, 0.0, 1.0) : 0.0;
  if (comm.rank() == 0) {
    std::printf(
        "# training step: %d x Linear(%lld, %lld) + GELU, batch %lld per rank, %s, "
        "%d buckets (%.1f MiB of f32 gradients, %s on the wire), %d ranks\n",
        o.layers, static_cast<long long>(o.width), static_cast<long long>(o.width),
        static_cast<long long>(o.batch), o.precision.c_str(), sync.num_buckets(),
        static_cast<double>(grad_bytes) / (1 << 20), o.compression.c_str(), comm.world_size());
    std::printf("  %-34s %10.3f ms\n", "step without communication", local_s * 1e3);
    std::printf("  %-34s %10.3f ms\n", "step with gradient sync", dp_s * 1e3);
    std::printf("  %-34s %10.3f ms\n", "exposed communication per step", exposed_s * 1e3);
    std::printf("  %-34s %10.3f ms\n", "bucket all-reduces alone", comm_s * 1e3);
    std::printf("  %-34s %10.1f %%\n", "communication hidden", hidden * 100.0);
    std::printf("  %-34s %10.0f samples/s\n", "throughput (all ranks)",
                static_cast<double>(o.batch) * comm.world_size() / dp_s);
    std::printf("  %-34s %10.1f MiB\n", "optimizer state per rank",
                static_cast<double>(plain_state) / (1 << 20));
    if (o.zero1) {
      std::printf("  %-34s %10.3f ms\n", "step with ZeRO-1", zero_s * 1e3);
      std::printf("  %-34s %10.1f MiB\n", "ZeRO-1 optimizer state per rank",
                  static_cast<double>(zero_state) / (1 << 20));
    }
  }
  out["train_step"] = {{"layers", o.layers},
                       {"width", o.width},
                       {"batch_per_rank", o.batch},
                       {"precision", o.precision},
                       {"buckets", sync.num_buckets()},
                       {"gradient_bytes", grad_bytes},
                       {"compression", o.compression},
                       {"world_size", comm.world_size()},
                       {"local_ms", local_s * 1e3},
                       {"dp_ms", dp_s * 1e3},
                       {"exposed_ms", exposed_s * 1e3},
                       {"comm_alone_ms", comm_s * 1e3},
                       {"hidden_fraction", hidden},
                       {"optimizer_state_bytes", plain_state}};
  if (o.zero1) {
    out["train_step"]["zero1_ms"] = zero_s * 1e3;
    out["train_step"]["zero1_optimizer_state_bytes"] = zero_state;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "stoker_allreduce_throughput: nccl-tests-style all-reduce table, or the exposed "
      "communication of a data-parallel training step (--train-step)"};
  Options o;
  app.add_option("-b,--min-bytes", o.min_bytes, "smallest size per rank (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--max-bytes", o.max_bytes, "largest size per rank")->capture_default_str();
  app.add_option("-f,--factor", o.factor, "size multiplier between rows")->capture_default_str();
  app.add_option("-w,--warmup", o.warmup, "untimed calls per size")->capture_default_str();
  app.add_option("-n,--iters", o.iters, "timed calls per size")->capture_default_str();
  app.add_option("--dtypes", o.dtypes, "f32 and/or bf16")->delimiter(',')->capture_default_str();
  app.add_option("-c,--check", o.check, "check every size's result (1) or not (0)")
      ->capture_default_str();
  app.add_option("--backend", o.backend, "auto, nccl or tcp")->capture_default_str();
  app.add_option("--json", o.json, "also write the results to this JSON file (rank 0)");
  app.add_flag("--train-step", o.train_step, "measure a training step's exposed communication");
  app.add_option("--layers", o.layers, "train-step model: layers")->capture_default_str();
  app.add_option("--width", o.width, "train-step model: width")->capture_default_str();
  app.add_option("--batch", o.batch, "train-step: samples per rank")->capture_default_str();
  app.add_option("--steps", o.steps, "train-step: timed steps")->capture_default_str();
  app.add_option("--train-warmup", o.train_warmup, "train-step: untimed steps")
      ->capture_default_str();
  app.add_option("--precision", o.precision, "train-step: fp32, bf16 or fp16")
      ->capture_default_str();
  app.add_option("--bucket-mib", o.bucket_mib, "train-step: bucket size")->capture_default_str();
  app.add_option("--first-bucket-mib", o.first_bucket_mib, "train-step: first bucket size")
      ->capture_default_str();
  app.add_flag("--zero1", o.zero1,
               "train-step: also time the step with ZeRO-1 (optimizer state sharded over ranks)");
  app.add_option("--compression", o.compression, "train-step: none, bf16 or fp16")
      ->capture_default_str();
  std::string bm_out, bm_ignored;
  app.add_option("--benchmark_out", bm_out, "(scripts/gpu-check.sh) same as --json");
  for (const char* f : {"--benchmark_format", "--benchmark_out_format", "--benchmark_filter"})
    app.add_option(f, bm_ignored, "(accepted and ignored: scripts/gpu-check.sh passes it)");
  CLI11_PARSE(app, argc, argv);
  if (o.json.empty()) o.json = bm_out;
  try {
    dist::InitOptions init;
    if (o.backend == "nccl")
      init.backend = dist::Backend::nccl;
    else if (o.backend == "tcp")
      init.backend = dist::Backend::tcp;
    else
      STOKER_CHECK(o.backend == "auto", "--backend: '", o.backend, "' is not auto, nccl or tcp");
    dist::DistContext ctx = dist::init_from_env(init);
    const bool root = ctx.comm->rank() == 0;
    if (root) {
      std::printf("# stoker_allreduce_throughput: %s (%s), NCCL %s\n", ctx.comm->describe().c_str(),
                  ctx.env.source.c_str(), dist::NcclCommunicator::version().c_str());
      std::string context = stoker::bench::add_context();
      size_t pos = 0;
      while ((pos = context.find('\n', pos)) != std::string::npos && pos + 1 < context.size())
        context.replace(pos, 1, "\n#   "), pos += 5;
      std::printf("#   %s", context.c_str());
    }
    nlohmann::json out = {{"world_size", ctx.comm->world_size()},
                          {"communicator", ctx.comm->describe()}};
    const int rc = o.train_step ? run_train_step(o, ctx, out) : run_collectives(o, ctx, out);
    if (root && !o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
    ctx.comm->barrier();
    return rc;
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "stoker_allreduce_throughput: error: %s\n", e.what());
    return 1;
  }
}
