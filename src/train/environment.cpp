#include "stoker/train/trainer.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "stoker/core/error.h"

namespace stoker::train {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool env_flag(const char* name, bool fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  const std::string s = v;
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  STOKER_THROW("environment variable ", name, "='", s, "' is not a flag (use 1 or 0)");
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const long long n = std::stoll(v, &used);
    if (used == std::string(v).size()) return n;
  } catch (const std::exception&) {
  }
  STOKER_THROW("environment variable ", name, "='", v, "' is not an integer");
}

}  // namespace

TrainerOptions apply_environment(TrainerOptions options) {
  diag::DiagnosticsOptions& o = options.diagnostics;
  o.enabled = env_flag("STOKER_DIAG", o.enabled);
  if (const char* v = env("STOKER_DIAG_REPORT_JSON")) o.report_json = v;
  if (const char* v = env("STOKER_DIAG_TRACE")) o.trace_path = v;
  if (const char* v = env("STOKER_DIAG_BASELINE_SAVE")) o.baseline_save = v;
  if (const char* v = env("STOKER_DIAG_BASELINE_COMPARE")) o.baseline_compare = v;
  if (const char* v = env("STOKER_DIAG_HTML")) o.html_report = v;
  if (const char* v = env("STOKER_DIAG_TIMELINE_CSV")) o.timeline_csv = v;
  if (const char* v = env("STOKER_DIAG_GPU_CSV")) o.gpu_csv = v;
  o.report_interval = env_int("STOKER_DIAG_INTERVAL", o.report_interval);
  o.warmup_steps = env_int("STOKER_DIAG_WARMUP", o.warmup_steps);
  o.op_timing_interval = env_int("STOKER_DIAG_OPS", o.op_timing_interval);
  o.monitor = env_flag("STOKER_DIAG_MONITOR", o.monitor);
  o.monitor_pcie = env_flag("STOKER_DIAG_MONITOR_PCIE", o.monitor_pcie);
  o.device_timing = env_flag("STOKER_DIAG_DEVICE_TIMING", o.device_timing);
  STOKER_CHECK(o.report_interval >= 0,
               "STOKER_DIAG_INTERVAL / DiagnosticsOptions::report_interval ", o.report_interval,
               " must be >= 0");
  STOKER_CHECK(o.op_timing_interval >= 0,
               "STOKER_DIAG_OPS / DiagnosticsOptions::op_timing_interval ", o.op_timing_interval,
               " must be >= 0 (0: no op-timed steps)");
  STOKER_CHECK(o.warmup_steps >= 0, "STOKER_DIAG_WARMUP / DiagnosticsOptions::warmup_steps ",
               o.warmup_steps, " must be >= 0");
  const int64_t max_steps = env_int("STOKER_DIAG_MAX_STEPS", -1);
  STOKER_CHECK(max_steps >= -1, "environment variable STOKER_DIAG_MAX_STEPS=", max_steps,
               " must be >= 0");
  if (max_steps >= 0)
    options.max_steps = options.max_steps < 0 ? max_steps : std::min(options.max_steps, max_steps);
  options.replay_first_batch = env_flag("STOKER_DIAG_SYNTHETIC", options.replay_first_batch);
  return options;
}

}  // namespace stoker::train
