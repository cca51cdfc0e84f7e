#include "diag/baseline.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "diag/breakdown.h"
#include "diag/gpu_info.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "util/atomic_file.h"

namespace stoker::diag {

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

}  // namespace

Environment collect_environment(Device device, std::map<std::string, std::string> run) {
  Environment e;
  e.date = utc_now();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) e.host = host;
  e.stoker_version = core::version();
  e.device = device.str();
  if (device.is_cuda()) e.gpu = core::describe_device(device);
  e.cpu = core::describe_device(Device::cpu());
  e.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  for (const auto& lib : core::library_versions()) {
    if (lib.name == "CUDA runtime") e.cuda_runtime = lib.version;
    if (lib.name.rfind("CUDA driver", 0) == 0) e.cuda_driver = lib.version;
    if (lib.name == "cuDNN") e.cudnn = lib.version;
    if (lib.name == "NCCL") e.nccl = lib.version;
  }
  if (device.is_cuda()) {
    const SystemGpuInfo info = query_gpus();
    e.driver = info.driver;
  }
  e.run = std::move(run);
  return e;
}

const MetricCard* BaselineCard::find(const std::string& name) const {
  for (const MetricCard& m : metrics)
    if (m.name == name) return &m;
  return nullptr;
}

BaselineCard make_card(const Environment& env, std::span<const StepSample> steps,
                       const std::string& verdict) {
  BaselineCard c;
  c.env = env;
  c.verdict = verdict;
  c.steps = static_cast<int64_t>(steps.size());
  const Breakdown whole = summarize(steps);
  c.timing = whole.device_timed ? "device" : "host";
  c.samples_per_s = whole.samples_per_s;
  // Each metric as a function of a step.
  std::vector<std::pair<std::string, std::function<double(const StepSample&)>>> metrics;
  metrics.push_back({"step", [](const StepSample& s) { return s.host_ms; }});
  for (int p = 0; p < kPhaseCount; ++p) {
    const bool dev = whole.device_timed;
    metrics.push_back({phase_name(static_cast<Phase>(p)),
                       [p, dev](const StepSample& s) { return dev ? s.device[p] : s.host[p]; }});
  }
  if (whole.launch_known)
    metrics.push_back({"launch", [](const StepSample& s) { return s.launch_ms; }});
  const size_t n = steps.size();
  const size_t chunks = std::min<size_t>(kChunks, n);
  for (const auto& [name, f] : metrics) {
    MetricCard m;
    m.name = name;
    std::vector<double> all(n);
    for (size_t i = 0; i < n; ++i) all[i] = f(steps[i]);
    const PhaseStat st = summarize_values(all);
    m.median_ms = st.median_ms;
    m.p90_ms = st.p90_ms;
    for (size_t k = 0; k < chunks; ++k) {
      const size_t a = k * n / chunks, b = (k + 1) * n / chunks;
      m.chunk_medians_ms.push_back(
          summarize_values(std::span<const double>(all.data() + a, b - a)).median_ms);
    }
    m.noise_ms = stddev(m.chunk_medians_ms);
    c.metrics.push_back(std::move(m));
  }
  return c;
}

std::string card_json(const BaselineCard& c) {
  using nlohmann::json;
  const Environment& e = c.env;
  json env = {{"date", e.date},
              {"host", e.host},
              {"stoker_version", e.stoker_version},
              {"device", e.device},
              {"gpu", e.gpu},
              {"driver", e.driver},
              {"cuda_runtime", e.cuda_runtime},
              {"cuda_driver", e.cuda_driver},
              {"cudnn", e.cudnn},
              {"nccl", e.nccl},
              {"cpu", e.cpu},
              {"cpu_count", e.cpu_count},
              {"run", e.run}};
  json metrics = json::array();
  for (const MetricCard& m : c.metrics)
    metrics.push_back({{"name", m.name},
                       {"median_ms", m.median_ms},
                       {"p90_ms", m.p90_ms},
                       {"chunk_medians_ms", m.chunk_medians_ms},
                       {"noise_ms", m.noise_ms}});
  json j = {{"stoker_baseline_card", c.version},
            {"environment", env},
            {"timing", c.timing},
            {"steps", c.steps},
            {"samples_per_s", c.samples_per_s},
            {"verdict", c.verdict},
            {"metrics", metrics}};
  return j.dump(2);
}

BaselineCard parse_card(const std::string& text) {
  using nlohmann::json;
  BaselineCard c;
  try {
    const json j = json::parse(text);
    STOKER_CHECK(j.contains("stoker_baseline_card"),
                 "not a stoker baseline card (no \"stoker_baseline_card\" key)");
    c.version = j.at("stoker_baseline_card").get<int>();
    STOKER_CHECK(c.version == 1, "baseline card version ", c.version,
                 " is not supported (this stoker reads version 1)");
    const json& e = j.at("environment");
    auto str = [&](const char* k) { return e.contains(k) ? e.at(k).get<std::string>() : ""; };
    c.env.date = str("date");
    c.env.host = str("host");
    c.env.stoker_version = str("stoker_version");
    c.env.device = str("device");
    c.env.gpu = str("gpu");
    c.env.driver = str("driver");
    c.env.cuda_runtime = str("cuda_runtime");
    c.env.cuda_driver = str("cuda_driver");
    c.env.cudnn = str("cudnn");
    c.env.nccl = str("nccl");
    c.env.cpu = str("cpu");
    c.env.cpu_count = e.value("cpu_count", 0);
    if (e.contains("run")) c.env.run = e.at("run").get<std::map<std::string, std::string>>();
    c.timing = j.at("timing").get<std::string>();
    c.steps = j.value("steps", int64_t{0});
    c.samples_per_s = j.value("samples_per_s", 0.0);
    c.verdict = j.value("verdict", std::string());
    for (const json& m : j.at("metrics")) {
      MetricCard mc;
      mc.name = m.at("name").get<std::string>();
      mc.median_ms = m.at("median_ms").get<double>();
      mc.p90_ms = m.value("p90_ms", 0.0);
      mc.chunk_medians_ms = m.value("chunk_medians_ms", std::vector<double>{});
      mc.noise_ms = m.value("noise_ms", 0.0);
      c.metrics.push_back(std::move(mc));
    }
  } catch (const nlohmann::json::exception& ex) {
    STOKER_THROW("baseline card is not valid: ", ex.what());
  }
  return c;
}

void save_card(const std::filesystem::path& path, const BaselineCard& card) {
  const std::string text = card_json(card) + "\n";
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  util::write_file_atomically(path,
                              [&](int fd) { util::write_all(fd, text.data(), text.size(), path); });
}

BaselineCard load_card(const std::filesystem::path& path) {
  std::ifstream f(path);
  STOKER_CHECK_HINT(f.good(),
                    "save one first with DiagnosticsOptions::baseline_save "
                    "(stoker doctor --save-baseline)",
                    "baseline card ", path.string(), " cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return parse_card(ss.str());
  } catch (const Error& e) {
    STOKER_THROW(path.string(), ": ", e.message());
  }
}

int Comparison::slower() const {
  int n = 0;
  for (const MetricChange& m : metrics) n += m.significant && m.change > 0 ? 1 : 0;
  return n;
}

int Comparison::faster() const {
  int n = 0;
  for (const MetricChange& m : metrics) n += m.significant && m.change < 0 ? 1 : 0;
  return n;
}

Comparison compare_cards(const BaselineCard& before, const BaselineCard& after,
                         double min_relative) {
  Comparison c;
  c.comparable = before.timing == after.timing;
  auto diff = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) c.environment_changes.push_back(std::string(what) + ": " + a + " -> " + b);
  };
  const Environment &a = before.env, &b = after.env;
  diff("device", a.device, b.device);
  diff("gpu", a.gpu, b.gpu);
  diff("driver", a.driver, b.driver);
  diff("CUDA runtime", a.cuda_runtime, b.cuda_runtime);
  diff("cuDNN", a.cudnn, b.cudnn);
  diff("NCCL", a.nccl, b.nccl);
  diff("CPU", a.cpu, b.cpu);
  diff("CPU count", std::to_string(a.cpu_count), std::to_string(b.cpu_count));
  diff("stoker", a.stoker_version, b.stoker_version);
  diff("timing", before.timing, after.timing);
  for (const auto& [k, v] : a.run) {
    const auto it = b.run.find(k);
    diff(("run." + k).c_str(), v, it == b.run.end() ? "(unset)" : it->second);
  }
  for (const auto& [k, v] : b.run)
    if (!a.run.count(k)) diff(("run." + k).c_str(), "(unset)", v);
  for (const MetricCard& m : before.metrics) {
    const MetricCard* n = after.find(m.name);
    if (!n) continue;
    MetricChange ch;
    ch.name = m.name;
    ch.before_ms = m.median_ms;
    ch.after_ms = n->median_ms;
    const double delta = n->median_ms - m.median_ms;
    ch.change = m.median_ms > 0 ? delta / m.median_ms : 0;
    ch.noise_ms = std::sqrt(m.noise_ms * m.noise_ms + n->noise_ms * n->noise_ms);
    ch.significant = c.comparable && std::abs(delta) > kNoiseFactor * ch.noise_ms &&
                     std::abs(delta) > min_relative * m.median_ms && std::abs(delta) > 1e-3;
    c.metrics.push_back(ch);
  }
  return c;
}

std::string Comparison::text() const {
  std::string s;
  char buf[256];
  for (const std::string& e : environment_changes)
    s += "diag  baseline: environment changed: " + e + "\n";
  if (!comparable) s += "diag  baseline: timings are not comparable (host vs device spans)\n";
  for (const MetricChange& m : metrics) {
    std::snprintf(buf, sizeof buf,
                  "diag  baseline: %-10s %9.3f -> %9.3f ms (%+6.1f %%, noise %.3f ms)%s\n",
                  m.name.c_str(), m.before_ms, m.after_ms, 100 * m.change, m.noise_ms,
                  m.significant ? (m.change > 0 ? "  SLOWER" : "  FASTER") : "");
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "diag  baseline: %d metrics slower, %d faster beyond the noise\n",
                slower(), faster());
  s += buf;
  return s;
}

}  // namespace stoker::diag
