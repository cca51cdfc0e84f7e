// `stoker doctor`: the static checks (checks.cpp), then ablations that separate the
// causes of a slow step, on the bundled model (ablations.cpp, with the ranks of
// worker.cpp) or, after `--`, on the user's own Trainer-based program
// (program.cpp), and with --overhead the cost of diagnostics (overhead.cpp).
// This file: the options, the `--` split and the order of the parts (parts.h lists
// them all).
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "parts.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"

namespace stoker::cli {

using namespace doctor;  // the parts (parts.h)

namespace {

// --device, checked against the GPUs this process sees before any work.
Device parse_device_flag(const std::string& name) {
  if (name.empty()) return core::best_device();
  Device d;
  try {
    d = core::parse_device(name);
  } catch (const Error&) {
    STOKER_THROW("--device ", name, ": unknown device; use cpu, cuda or cuda:N");
  }
  const int visible = core::cuda_device_count();
  STOKER_CHECK_HINT(d.is_cpu() || d.index < visible,
                    "use --device cpu (or leave --device out: the best device is chosen)",
                    "--device ", name, ": ",
                    visible == 0 ? std::string("no CUDA device is visible")
                                 : fmt::format("only {} CUDA device{} visible", visible,
                                               visible == 1 ? " is" : "s are"));
  return d;
}

// Path flags: an empty value ("--json ''", often an unset shell variable) is refused, never
// taken as "off" (leaving the flag out is).
const CLI::Validator kNonEmptyPath(
    [](std::string& word) -> std::string {
      return word.empty() ? "an empty path does not turn it off: give a path, or leave the flag out"
                          : std::string();
    },
    "");

}  // namespace

std::vector<std::string> split_program_args(std::vector<std::string>& args) {
  // The first word that is not an option names the subcommand: only `doctor` takes a program.
  const auto word = std::find_if(args.begin(), args.end(),
                                 [](const std::string& a) { return a.empty() || a[0] != '-'; });
  if (word == args.end() || *word != "doctor") return {};
  const auto dash = std::find(word, args.end(), "--");
  if (dash == args.end()) return {};
  std::vector<std::string> program(dash + 1, args.end());
  args.erase(dash, args.end());
  return program;
}

std::vector<std::string> split_program(int& argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> program = split_program_args(args);
  argc = static_cast<int>(args.size()) + 1;  // args is argv's words up to the `--`
  return program;
}

CLI::App* add_doctor_command(CLI::App& app, DoctorOptions& o) {
  CLI::App* c = app.add_subcommand(
      "doctor",
      "check the machine (driver, clocks, ECC, PCIe, other processes) and find why training is "
      "slow: real vs synthetic data, a batch-size sweep, 1 vs N GPUs (docs/diagnostics.md)");
  c->add_option("--device", o.device, "cpu, cuda or cuda:N (default: the best device)");
  c->add_flag("--no-static", o.no_static, "skip the static checks");
  c->add_flag("--no-ablations", o.no_ablations, "only the static checks");
  // Every value is checked here, before any work (packing the synthetic set takes seconds).
  constexpr int64_t kMaxBatch = int64_t{1} << 24;
  constexpr int64_t kMaxSteps = int64_t{1} << 30;
  c->add_option("--model", o.model, "bundled model: mlp or cnn")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  c->add_option("--width", o.width, "MLP width (default 4096 on a GPU, 256 on the CPU)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  c->add_option("--layers", o.layers, "MLP hidden layers")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  c->add_option("--precision", o.precision, "fp32, bf16, fp16 or fp8 (default bf16 on a GPU)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
  c->add_option("--data", o.data,
                "real data: an LMDB from `stoker pack` (default: a synthetic set packed in a "
                "temporary folder)")
      ->check(kNonEmptyPath);
  c->add_option("--on-corrupt", o.on_corrupt,
                "a bad sample in --data: fail (stop, naming its key) or skip (replace it, "
                "count it)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  c->add_option("--synth-images", o.synth_images, "images of the synthetic set")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  c->add_option("--synth-image-size", o.synth_image_size, "side of the synthetic images")
      ->check(CLI::Range(8, 4096))
      ->capture_default_str();
  c->add_option("--threads", o.threads, "loader decode threads (0: autotuned)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  c->add_option("--prefetch", o.prefetch, "loader depth (0: autotuned)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  c->add_option("--size", o.size, "image side the model sees")
      ->check(CLI::Range(8, 4096))
      ->capture_default_str();
  c->add_option("--batch", o.batch, "batch size (per GPU)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch))
      ->capture_default_str();
  c->add_option("--sweep", o.sweep, "batch sizes of the sweep (default batch/4 .. batch*2)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch))
      ->delimiter(',');
  c->add_option("--steps", o.steps, "timed steps per run")
      ->check(CLI::Range(int64_t{1}, kMaxSteps))
      ->capture_default_str();
  c->add_option("--warmup", o.warmup, "untimed steps before them")
      ->check(CLI::Range(int64_t{0}, kMaxSteps))
      ->capture_default_str();
  c->add_option("--gpus", o.gpus,
                "ranks for the 1-vs-N ablation (default: every visible GPU when there are "
                "several; with --device cpu, N processes over TCP)")
      ->check(CLI::Range(1, 1024));
  c->add_flag("--overhead", o.overhead, "measure the cost of diagnostics (off vs on)");
  c->add_option("--repeats", o.repeats, "repetitions of the overhead measurement")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  c->add_option("--overhead-steps", o.overhead_steps,
                "timed steps per overhead run (default: --steps)")
      ->check(CLI::Range(int64_t{1}, kMaxSteps));
  // The output paths are checked (and their folders created) by run_doctor before any work.
  c->add_option("--json", o.json, "write everything measured to this JSON file")
      ->check(kNonEmptyPath);
  c->add_option("--trace", o.trace, "Chrome trace of the real-data run")->check(kNonEmptyPath);
  c->add_option("--save-baseline", o.save_baseline, "baseline card of the real-data run")
      ->check(kNonEmptyPath);
  c->add_option("--html", o.html,
                "write the health check as one HTML page: the static checks, the ablations and "
                "(bundled model) the real-data run's verdict, op table and curves")
      ->check(kNonEmptyPath);
  c->add_option("--compare", o.compare_baseline, "compare the real-data run with this card")
      ->check(CLI::ExistingFile);
  c->add_option("--nvml", o.nvml, "NVML library to load")->capture_default_str();
  c->add_option("--worker-json", o.worker_json, "internal: one rank of the 1-vs-N ablation")
      ->group("");
  c->footer(
      "After `--`: your Trainer-based program and its arguments ({batch} is replaced by each "
      "size of the sweep); it is run with STOKER_DIAG=1 and friends (docs/diagnostics.md).\n"
      "Examples:\n"
      "  stoker doctor                                  # the machine + the bundled MLP\n"
      "  stoker doctor --data /data/imagenet-train --model cnn --threads 4\n"
      "  stoker doctor --sweep 64,128,256 -- ./train --batch {batch} --epochs 1");
  return c;
}

int run_doctor(DoctorOptions o) {
  const Device device = parse_device_flag(o.device);
  Setup s{device,
          amp::parse_precision(o.precision.empty() ? (device.is_cuda() ? "bf16" : "fp32")
                                                   : o.precision),
          o.width > 0 ? o.width : (device.is_cuda() ? 4096 : 256)};
  o.precision = std::string(amp::precision_name(s.precision));
  o.width = s.width;
  STOKER_CHECK(o.steps >= 1 && o.warmup >= 0 && o.batch >= 1 && o.size >= 8,
               "stoker doctor: --steps, --batch must be >= 1, --size >= 8");
  if (!o.worker_json.empty()) return run_worker(o);
  // The inputs are read only when regular files (a FIFO could block forever), and no output
  // lands on one; where the results go is checked now, not after the ablations.
  if (!o.data.empty()) core::check_input_folder(o.data, "--data", {"data.mdb"});
  if (!o.compare_baseline.empty()) core::check_input_file(o.compare_baseline, "--compare");
  {
    core::PathGuard guard;
    guard.input("--data", o.data);
    guard.input("--compare", o.compare_baseline);
    for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--json", o.json},
                                     {"--trace", o.trace},
                                     {"--save-baseline", o.save_baseline},
                                     {"--html", o.html}})
      guard.output(flag, path, core::PathGuard::Kind::file);
  }
  if (!o.json.empty()) core::check_output_path(o.json, "--json");
  if (!o.trace.empty()) core::check_output_path(o.trace, "--trace");
  if (!o.save_baseline.empty()) core::check_output_path(o.save_baseline, "--save-baseline");
  if (!o.html.empty()) core::check_output_path(o.html, "--html");

  json out = {{"device", device.str()}};
  std::printf("stoker doctor %s on %s\n", core::version(), core::describe_device(device).c_str());
  diag::HtmlReport page;
  page.title = "stoker doctor: " + core::describe_device(device);
  page.facts = {{"stoker", core::version()},
                {"model", o.program.empty() ? "bundled " + o.model : o.program.front()},
                {"precision", o.precision},
                {"batch", std::to_string(o.batch)}};
  auto write_page = [&] {
    if (o.html.empty()) return;
    diag::write_html(o.html, page);
    std::printf("\nhtml report: %s\n", o.html.c_str());
  };
  if (!o.no_static) out["static"] = run_static(o, &page.checks);
  if (o.no_ablations && !o.overhead) {
    if (!o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
    write_page();
    return 0;
  }

  const fs::path tmp = fs::temp_directory_path() / ("stoker_doctor_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{tmp};

  std::vector<Measurement> ms;
  const int visible = core::cuda_device_count();
  const int ranks = o.gpus > 0 ? o.gpus : (device.is_cuda() ? visible : 1);
  if (!o.no_ablations) {
    diag::HtmlReport run;  // the real-data run's page: verdict, op table, curves
    ms = o.program.empty() ? run_bundled_ablations(o, s, ranks, tmp, &run)
                           : run_program_ablations(o, ranks, tmp);
    if (run.report) {
      run.title = page.title;
      run.facts = page.facts;
      run.checks = page.checks;
      page = std::move(run);
    }
  }
  if (!ms.empty()) {
    std::printf("\n== measurements ==\n%s", diag::measurement_table(ms).c_str());
    std::printf("\n== conclusions ==\n");
    for (const std::string& c : diag::conclude(ms)) std::printf("  - %s\n", c.c_str());
    json a = json::array();
    for (const Measurement& m : ms) a.push_back(measurement_json(m));
    out["measurements"] = a;
    out["conclusions"] = diag::conclude(ms);
    page.ablations = ms;
    page.conclusions = diag::conclude(ms);
  }
  if (o.overhead) out["overhead"] = run_overhead(o, s);
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << out.dump(2) << "\n";
    STOKER_CHECK(f.good(), "stoker doctor: cannot write ", o.json);
  }
  write_page();
  std::fflush(stdout);
  // Runs that failed are reported with the others; when none measured anything, the doctor
  // found nothing and says so in its status.
  const auto failed =
      std::count_if(ms.begin(), ms.end(), [](const Measurement& m) { return m.failed; });
  if (failed > 0)
    std::printf("\n%lld of %zu runs failed%s\n", static_cast<long long>(failed), ms.size(),
                failed == static_cast<long long>(ms.size()) ? ": nothing was measured" : "");
  STOKER_CHECK_HINT(ms.empty() || failed < static_cast<long long>(ms.size()),
                    o.program.empty()
                        ? "see each run's error above"
                        : "see each run's error above; run the program alone first (does it "
                          "start, and does it train with the Trainer?)",
                    "stoker doctor: every run failed (", failed, " of ", ms.size(), ")");
  return 0;
}

}  // namespace stoker::cli
