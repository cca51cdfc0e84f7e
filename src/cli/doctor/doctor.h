// `stoker doctor`: static checks of the machine and ablations that tell why training is slow
// (docs/diagnostics.md, "stoker doctor"). Private to the CLI (and benchmarks/diag_overhead.cpp);
// its parts: parts.h.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::cli {

struct DoctorOptions {
  std::string device;      // "" = best device
  bool no_static = false;  // skip the static checks
  bool no_ablations = false;
  // Bundled model: an MLP over the flattened image, or a small CNN.
  std::string model = "mlp";
  int64_t width = 0;      // MLP width (0: 4096 on a GPU, 256 on the CPU)
  int layers = 3;         // MLP hidden layers
  std::string precision;  // fp32 | bf16 | fp16 ("": bf16 on a GPU, fp32 on the CPU)
  // Real data: an LMDB packed by `stoker pack`; empty = a synthetic set packed in a temp folder.
  std::string data;
  std::string on_corrupt = "fail";  // a bad sample in `data`: "fail" or "skip" (LoaderOptions)
  int64_t synth_images = 2048;
  int synth_image_size = 256;
  int threads = 0;   // loader threads (0: autotuned)
  int prefetch = 0;  // loader depth (0: autotuned)
  int size = 64;     // image side the model sees
  int64_t batch = 256;
  std::vector<int64_t> sweep;  // batch sizes (default batch/4 .. batch*2)
  int64_t steps = 50;
  int64_t warmup = 10;
  int gpus = 0;  // ranks for the 1-vs-N ablation (0: every visible GPU when several)
  bool overhead = false;
  int repeats = 5;
  int64_t overhead_steps = 0;  // timed steps per overhead run (0: --steps)
  std::string json, trace, save_baseline, compare_baseline;
  std::string html;  // the health-check page (diag::write_html)
  std::string nvml = "libnvidia-ml.so.1";
  std::vector<std::string> program;  // the user's program (after --)
  std::string worker_json;           // internal: a rank of the 1-vs-N ablation
};

// `stoker doctor [options] -- PROGRAM ARGS...`: takes PROGRAM ARGS out of the command line so
// that CLI11 never parses the program's own options. On a list of words (without the program
// name): when the first word that is not an option is `doctor`, everything from the first `--`
// after it is removed from `args` and what followed the `--` returned; otherwise nothing.
std::vector<std::string> split_program_args(std::vector<std::string>& args);
// The same on main's argv (argc shrinks to the `--`).
std::vector<std::string> split_program(int& argc, char** argv);

// Registers the subcommand on `app`; run it with run_doctor when parsed.
CLI::App* add_doctor_command(CLI::App& app, DoctorOptions& options);
int run_doctor(DoctorOptions options);

}  // namespace stoker::cli
