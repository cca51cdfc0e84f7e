// 1 vs N ranks in `stoker doctor`: this program re-run as the ranks of `stoker launch`
// (`doctor --worker-json FILE ...`), each training the bundled model on a fixed batch; rank 0
// writes the measurement, in the layout of --json's measurements, for run_ranks to read.
#include <fstream>

#include "parts.h"
#include "stoker/core/tensor.h"
#include "stoker/dist/env.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/dist/launcher.h"

namespace stoker::cli::doctor {

namespace {

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("stoker") : p.string();
}

std::vector<std::string> worker_args(const DoctorOptions& o, const Setup& s, int64_t batch,
                                     const std::string& out) {
  return {"doctor",
          "--worker-json",
          out,
          "--model",
          o.model,
          "--width",
          std::to_string(s.width),
          "--layers",
          std::to_string(o.layers),
          "--precision",
          std::string(amp::precision_name(s.precision)),
          "--size",
          std::to_string(o.size),
          "--batch",
          std::to_string(batch),
          "--steps",
          std::to_string(o.steps),
          "--warmup",
          std::to_string(o.warmup),
          "--nvml",
          o.nvml,
          "--device",
          s.device.is_cuda() ? "cuda" : "cpu"};
}

}  // namespace

Measurement run_ranks(const DoctorOptions& o, const Setup& s, int ranks, const fs::path& dir) {
  const fs::path out = dir / ("ranks_" + std::to_string(ranks) + ".json");
  dist::LaunchOptions l;
  l.nproc_per_node = ranks;
  l.master_port = 0;
  l.program = self_exe();
  l.args = worker_args(o, s, o.batch, out.string());
  l.quiet = true;
  l.kill_grace_s = 5;
  const dist::LaunchResult r = dist::launch(l);
  if (r.exit_code != 0 || !fs::exists(out)) {
    std::string error = r.failure.empty() ? "no result" : r.failure;
    for (const auto& line : r.failed_stderr_tail) error += "\n    " + line;
    return failed_measurement(ranks_name(ranks, s.device), "ranks", o.batch, ranks, error);
  }
  std::ifstream f(out);
  return measurement_from_json(json::parse(f));
}

int run_worker(const DoctorOptions& o) {
  // worker_args passes --device cpu for a run on the CPU: TCP ranks then, even where GPUs are.
  dist::DistContext ctx = dist::init_from_env(
      {.backend = o.device == "cpu" ? dist::Backend::tcp : dist::Backend::automatic});
  const Setup s{ctx.device, amp::parse_precision(o.precision), o.width};
  auto model = make_model(o, s);
  dist::ReplicatedGradSync sync(*ctx.comm, *model);
  FixedBatches source(random_batch(o, s, o.batch), o.warmup + o.steps + 1);
  const diag::Report r = train(o, s, source, {}, &sync, model.get());
  const Tensor rate = Tensor::from_floats({static_cast<float>(r.breakdown.samples_per_s)}, {1},
                                          DType::f32, ctx.comm->device());
  ctx.comm->all_reduce(rate, dist::ReduceOp::sum);
  if (ctx.env.rank == 0) {
    const int world = ctx.env.world_size;
    Measurement m = to_measurement(ranks_name(world, s.device), "ranks", o.batch, r);
    m.ranks = world;
    m.samples_per_s = rate.item();  // every rank's together
    std::ofstream(o.worker_json) << measurement_json(m).dump(2) << "\n";
  }
  return 0;
}

}  // namespace stoker::cli::doctor
