// The user's own program in `stoker doctor -- PROGRAM ARGS...`: the same ablations, each run
// under `stoker launch` and steered through the STOKER_DIAG* variables
// (train/environment.h, which its Trainer applies); `{batch}` in its arguments is replaced by each
// size of the sweep. Its Trainer writes the diagnostics report (Report::json) that a measurement is
// read from.
#include <cstdio>
#include <fstream>

#include "parts.h"
#include "stoker/dist/launcher.h"

namespace stoker::cli::doctor {

namespace {

Measurement run_program(const DoctorOptions& o, const std::string& name, const std::string& kind,
                        int64_t batch, int ranks, bool synthetic, const fs::path& dir) {
  static int counter = 0;
  const fs::path out = dir / ("program_" + std::to_string(counter++) + ".json");
  dist::LaunchOptions l;
  l.nproc_per_node = ranks;
  l.master_port = 0;
  l.quiet = true;
  l.program = o.program.front();
  for (size_t i = 1; i < o.program.size(); ++i) {
    std::string a = o.program[i];
    for (size_t p; (p = a.find("{batch}")) != std::string::npos;)
      a.replace(p, 7, std::to_string(batch));
    l.args.push_back(a);
  }
  l.extra_env = {{"STOKER_DIAG", "1"},
                 {"STOKER_DIAG_REPORT_JSON", out.string()},
                 {"STOKER_DIAG_MAX_STEPS", std::to_string(o.warmup + o.steps)},
                 {"STOKER_DIAG_WARMUP", std::to_string(o.warmup)},
                 {"STOKER_DIAG_SYNTHETIC", synthetic ? "1" : "0"}};
  const dist::LaunchResult r = dist::launch(l);
  if (r.exit_code != 0 || !fs::exists(out))
    return failed_measurement(
        name, kind, batch, ranks,
        r.exit_code != 0 ? r.failure
                         : "the program wrote no report (does it train with the Trainer?)");
  std::ifstream f(out);
  const json j = json::parse(f);
  Measurement m;
  m.name = name;
  m.kind = kind;
  m.batch = batch;
  m.ranks = ranks;
  // Each rank writes its own report (the main rank's file stays): its samples/s times ranks.
  m.samples_per_s = j.at("samples_per_s").get<double>() * ranks;
  m.step_ms = j.at("step").at("median_ms").get<double>();
  m.verdict = j.at("verdict").get<std::string>();
  m.input_share = j.at("shares").at("input").get<double>();
  m.launch_share = j.at("shares").at("launch").get<double>();
  m.comm_share = j.at("shares").at("comm").get<double>();
  m.headline = j.at("headline").get<std::string>();
  return m;
}

}  // namespace

std::vector<Measurement> run_program_ablations(const DoctorOptions& o, int ranks,
                                               const fs::path& tmp) {
  std::vector<Measurement> ms;
  auto measure = [&](const std::string& name, const std::string& kind, int64_t batch, int n,
                     bool synthetic) {
    ms.push_back(run_program(o, name, kind, batch, n, synthetic, tmp));
    print_measurement(ms.back());
  };
  std::printf("\n== ablations on %s (%lld + %lld steps each) ==\n", o.program.front().c_str(),
              static_cast<long long>(o.warmup), static_cast<long long>(o.steps));
  measure("real data", "real", o.batch, 1, false);
  measure("synthetic data", "synthetic", o.batch, 1, true);
  bool placeholder = false;
  for (const auto& a : o.program)
    placeholder = placeholder || a.find("{batch}") != std::string::npos;
  if (placeholder) {
    for (int64_t b : sweep_sizes(o)) measure("batch " + std::to_string(b), "sweep", b, 1, true);
  } else {
    std::printf("  (no batch-size sweep: put {batch} where your program takes its batch size)\n");
  }
  if (ranks > 1)
    for (int n : {1, ranks}) measure(std::to_string(n) + " ranks", "ranks", o.batch, n, true);
  return ms;
}

}  // namespace stoker::cli::doctor
