// A Measurement of `stoker doctor`: from a diagnostics report, its one JSON layout (written by
// --json and by the ranks of the 1-vs-N ablation, read back by run_ranks), its terminal line.
#include <cstdio>

#include "parts.h"

namespace stoker::cli::doctor {

Measurement to_measurement(const std::string& name, const std::string& kind, int64_t batch,
                           const diag::Report& r) {
  Measurement m;
  m.name = name;
  m.kind = kind;
  m.batch = batch;
  m.ranks = 1;
  m.samples_per_s = r.breakdown.samples_per_s;
  m.step_ms = r.breakdown.step.median_ms;
  m.verdict = diag::verdict_name(r.verdict);
  m.input_share = r.breakdown.input_share;
  m.launch_share = r.breakdown.launch_share;
  m.comm_share = r.breakdown.comm_share;
  m.headline = r.headline;
  return m;
}

Measurement failed_measurement(const std::string& name, const std::string& kind, int64_t batch,
                               int ranks, std::string error) {
  Measurement m;
  m.name = name;
  m.kind = kind;
  m.batch = batch;
  m.ranks = ranks;
  m.failed = true;
  m.error = std::move(error);
  return m;
}

std::string ranks_name(int ranks, Device device) {
  return std::to_string(ranks) + (device.is_cuda() ? " GPU" : " rank") + (ranks > 1 ? "s" : "");
}

json measurement_json(const Measurement& m) {
  return {{"name", m.name},
          {"kind", m.kind},
          {"batch", m.batch},
          {"ranks", m.ranks},
          {"samples_per_s", m.samples_per_s},
          {"step_ms", m.step_ms},
          {"verdict", m.verdict},
          {"input_share", m.input_share},
          {"launch_share", m.launch_share},
          {"comm_share", m.comm_share},
          {"headline", m.headline},
          {"failed", m.failed},
          {"error", m.error}};
}

Measurement measurement_from_json(const json& j) {
  Measurement m;
  m.name = j.at("name").get<std::string>();
  m.kind = j.at("kind").get<std::string>();
  m.batch = j.at("batch").get<int64_t>();
  m.ranks = j.at("ranks").get<int>();
  m.samples_per_s = j.at("samples_per_s").get<double>();
  m.step_ms = j.at("step_ms").get<double>();
  m.verdict = j.at("verdict").get<std::string>();
  m.input_share = j.at("input_share").get<double>();
  m.launch_share = j.at("launch_share").get<double>();
  m.comm_share = j.at("comm_share").get<double>();
  m.headline = j.at("headline").get<std::string>();
  m.failed = j.at("failed").get<bool>();
  m.error = j.at("error").get<std::string>();
  return m;
}

void print_measurement(const Measurement& m) {
  if (m.failed)
    std::printf("  %-20s failed: %s\n", m.name.c_str(), m.error.c_str());
  else
    std::printf("  %-20s %12s samples/s  %9.3f ms/step  %s\n", m.name.c_str(),
                diag::format_count(m.samples_per_s).c_str(), m.step_ms, m.headline.c_str());
  std::fflush(stdout);
}

std::vector<int64_t> sweep_sizes(const DoctorOptions& o) {
  if (!o.sweep.empty()) return o.sweep;
  std::vector<int64_t> v;
  for (int64_t b : {o.batch / 4, o.batch / 2, o.batch, o.batch * 2})
    if (b >= 1 && (v.empty() || v.back() != b)) v.push_back(b);
  return v;
}

}  // namespace stoker::cli::doctor
