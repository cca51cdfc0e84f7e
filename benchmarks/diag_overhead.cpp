// stoker_diag_overhead: the measurements issue #8 asks of the GPU machine, in one run that
// scripts/gpu-check.sh makes with every benchmark (docs/diagnostics.md, docs/benchmarks.md):
//
//   1. the static checks and the monitor's sampled clocks and power (NVML);
//   2. a run made input-bound on purpose — the bundled MLP fed by the Loader with ONE decode
//      thread — and the same model on a replayed batch, which must be compute-bound;
//   3. the batch-size sweep of the model alone;
//   4. the overhead of diagnostics on step time: the same model with diagnostics off and on,
//      interleaved repetitions, median ms/step each (target <= 1 %), plus the host cost of the
//      diagnostics calls measured alone.
//
// It is `stoker doctor` with these presets (a GPU-sized model: an MLP of width 8192 at batch
// 512 in bf16, about 0.7 TFLOP per step, so the replayed run is compute-bound on an H200); any
// doctor option can override them. Google Benchmark's --benchmark_* flags (gpu-check.sh passes
// them to every benchmark) are accepted; --benchmark_out=FILE writes the JSON there.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "doctor.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"

int main(int argc, char** argv) {
  stoker::cli::DoctorOptions o;
  const bool gpu = stoker::core::cuda_device_count() > 0;
  o.batch = gpu ? 512 : 32;
  o.width = gpu ? 8192 : 128;
  o.layers = 3;
  o.size = gpu ? 64 : 32;
  o.threads = 1;  // input-bound on purpose
  o.prefetch = 4;
  o.synth_images = gpu ? 2048 : 256;
  o.synth_image_size = gpu ? 256 : 128;
  o.steps = gpu ? 20 : 5;
  o.warmup = gpu ? 3 : 2;
  o.sweep = gpu ? std::vector<int64_t>{128, 256, 512, 1024} : std::vector<int64_t>{16, 32};
  o.overhead = true;
  o.overhead_steps = gpu ? 200 : 20;
  o.repeats = gpu ? 7 : 3;

  CLI::App app{
      "stoker_diag_overhead: static checks, input-bound vs compute-bound verdicts, batch sweep "
      "and the overhead of diagnostics (stoker doctor with GPU presets)"};
  // The doctor's own options, with the presets above as defaults; `doctor` also accepts the
  // internal worker invocation of the 1-vs-N ablation (this program re-runs itself).
  CLI::App* doctor = stoker::cli::add_doctor_command(app, o);
  std::string bm_out, ignored;
  app.add_option("--benchmark_out", bm_out, "(scripts/gpu-check.sh) same as --json");
  for (const char* f : {"--benchmark_format", "--benchmark_out_format", "--benchmark_filter"})
    app.add_option(f, ignored, "(accepted and ignored: scripts/gpu-check.sh passes it)");
  // Without the `doctor` word, the doctor's options are given directly: re-parse as doctor.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args.front() != "doctor") {
    std::vector<std::string> bm;
    std::vector<std::string> rest;
    for (const std::string& a : args) (a.rfind("--benchmark_", 0) == 0 ? bm : rest).push_back(a);
    args = bm;
    args.push_back("doctor");
    args.insert(args.end(), rest.begin(), rest.end());
  }
  o.program = stoker::cli::split_program_args(args);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  (void)doctor;
  if (o.json.empty()) o.json = bm_out;
  try {
    return stoker::cli::run_doctor(o);
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "stoker_diag_overhead: error: %s\n", e.message().c_str());
    if (!e.hint().empty()) std::fprintf(stderr, "  hint: %s\n", e.hint().c_str());
    return 1;
  }
}
