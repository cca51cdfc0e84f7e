#include "diag/curves.h"

#include <algorithm>
#include <cstdio>
#include <span>

#include "diag/breakdown.h"
#include "diag/number_format.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

namespace {

using detail::fmt;

std::string percent(double share) { return fmt("%.0f %%", 100 * share); }

Level level_of(double value, double moderate, double high) {
  return value >= high ? Level::high : value >= moderate ? Level::moderate : Level::none;
}

double median_of(std::vector<double> v) { return summarize_values(v).median_ms; }

// A CSV field: the number, or nothing when it is unknown (negative sentinel or NaN).
std::string field(double v, const char* f = "%.3f") {
  return std::isfinite(v) && v >= 0 ? fmt(f, v) : std::string();
}

}  // namespace

SawtoothStats detect_sawtooth(const std::vector<double>& time_s, const std::vector<double>& util,
                              const Thresholds& t, std::string source) {
  SawtoothStats s;
  s.source = std::move(source);
  const size_t n = std::min(time_s.size(), util.size());
  s.samples = static_cast<int>(n);
  if (n == 0) return s;
  double sum = 0;
  int low = 0;
  // State machine with hysteresis: 0 unknown (before the first burst or gap), 1 burst, 2 gap.
  int state = 0;
  int bursts_after_gap = 0;  // bursts that followed a gap that followed a burst
  bool burst_seen = false;
  std::vector<double> gap_starts;
  for (size_t i = 0; i < n; ++i) {
    const double u = util[i];
    sum += u;
    if (u < t.sawtooth_low_util) ++low;
    if (u >= t.sawtooth_high_util) {
      if (state == 2 && burst_seen) ++bursts_after_gap;
      state = 1;
      burst_seen = true;
    } else if (u < t.sawtooth_low_util && state != 2) {
      if (state == 1) gap_starts.push_back(time_s[i]);
      state = 2;
    }
  }
  s.mean_util = sum / static_cast<double>(n);
  s.low_share = static_cast<double>(low) / static_cast<double>(n);
  s.cycles = bursts_after_gap;
  if (gap_starts.size() >= 2)
    s.period_s =
        (gap_starts.back() - gap_starts.front()) / static_cast<double>(gap_starts.size() - 1);
  return s;
}

SlowdownStats detect_slowdown(const std::vector<TimelinePoint>& points, const Thresholds& t) {
  SlowdownStats s;
  if (points.empty()) return s;
  // Epochs when the run has at least two with enough steps, else quarters of the steps.
  std::vector<std::span<const TimelinePoint>> groups;
  std::vector<int64_t> epochs;
  size_t begin = 0;
  for (size_t i = 1; i <= points.size(); ++i) {
    if (i == points.size() || points[i].epoch != points[begin].epoch) {
      if (static_cast<int64_t>(i - begin) >= t.slowdown_min_steps) {
        groups.emplace_back(points.data() + begin, i - begin);
        epochs.push_back(points[begin].epoch);
      }
      begin = i;
    }
  }
  s.by_epoch = groups.size() >= 2;
  if (!s.by_epoch) {
    groups.clear();
    epochs.clear();
    const size_t q = points.size() / 4;
    if (static_cast<int64_t>(q) < t.slowdown_min_steps) return s;
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = k * q, e = k == 3 ? points.size() : (k + 1) * q;
      groups.emplace_back(points.data() + b, e - b);
      epochs.push_back(-1);
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    TrendSegment seg;
    seg.epoch = epochs[g];
    seg.first_step = groups[g].front().step;
    seg.last_step = groups[g].back().step;
    seg.steps = static_cast<int64_t>(groups[g].size());
    std::vector<double> step, wait;
    for (const TimelinePoint& p : groups[g]) {
      step.push_back(p.step_ms);
      wait.push_back(p.data_wait_ms);
    }
    seg.step_ms = median_of(step);
    seg.step_p90_ms = summarize_values(step).p90_ms;
    seg.data_wait_ms = median_of(wait);
    seg.label = s.by_epoch ? "epoch " + std::to_string(seg.epoch + 1)
                           : "steps " + std::to_string(seg.first_step) + ".." +
                                 std::to_string(seg.last_step);
    s.segments.push_back(std::move(seg));
  }
  const TrendSegment& first = s.segments.front();
  if (first.step_ms <= 0) return s;
  auto step_rise = [&](const TrendSegment& x) { return x.step_ms / first.step_ms - 1; };
  auto data_rise = [&](const TrendSegment& x) {
    return (x.data_wait_ms - first.data_wait_ms) / first.step_ms;
  };
  s.step_rise = step_rise(s.segments.back());
  s.data_rise = data_rise(s.segments.back());
  s.jitter = std::max(0.0, first.step_p90_ms / first.step_ms - 1);
  const double bar = std::max(t.slowdown_moderate, s.jitter);
  // The first segment from which the run stays slow: every later segment is slow too (one slow
  // epoch in the middle of a run that recovered is noise, not a trend).
  for (size_t i = s.segments.size(); i-- > 1;) {
    const bool slow = std::max(step_rise(s.segments[i]), data_rise(s.segments[i])) >= bar;
    if (!slow) break;
    s.first_slow = static_cast<int>(i);
  }
  return s;
}

CurveAnalysis analyze_curves(const std::vector<TimelinePoint>& points,
                             const std::vector<GpuSample>& gpu, const std::vector<EvalSpan>& evals,
                             double wall_s, const Thresholds& t) {
  CurveAnalysis a;
  a.wall_s = wall_s;

  // Saw-tooth: NVML's utilization when the monitor sampled, else the step timeline.
  std::vector<double> time_s, util;
  for (const GpuSample& g : gpu)
    if (g.util_gpu >= 0) {
      time_s.push_back(g.time_ms / 1e3);
      util.push_back(g.util_gpu);
    }
  if (util.size() >= 8) {
    a.sawtooth = detect_sawtooth(time_s, util, t, "GPU utilization (NVML)");
  } else {
    time_s.clear();
    util.clear();
    for (const TimelinePoint& p : points) {
      if (p.step_ms <= 0) continue;
      time_s.push_back(p.time_s);
      util.push_back(100 * std::clamp(1 - p.data_wait_ms / p.step_ms, 0.0, 1.0));
    }
    a.sawtooth = detect_sawtooth(time_s, util, t, "step timeline (100 % - data wait)");
  }
  if (a.sawtooth.cycles >= t.sawtooth_min_cycles) {
    const Level l = level_of(a.sawtooth.low_share, t.sawtooth_moderate, t.sawtooth_high);
    if (l != Level::none)
      a.findings.push_back(
          {"saw-tooth utilization", l, a.sawtooth.low_share,
           "the GPU was fed in bursts: " + std::to_string(a.sawtooth.cycles) + " busy-idle cycles" +
               (a.sawtooth.period_s > 0 ? " (one every " + fmt("%.1f", a.sawtooth.period_s) + " s)"
                                        : std::string()) +
               ", " + percent(a.sawtooth.low_share) + " of the " + a.sawtooth.source +
               " samples below " + fmt("%.0f", t.sawtooth_low_util) + " %",
           "the input pipeline delivers batches in bursts: give the loader more threads or a "
           "deeper prefetch so its queue never drains, and look for periodic work on the "
           "training thread (logging, checkpoints, evaluation) at the same period"});
  }

  // Slowing down.
  a.slowdown = detect_slowdown(points, t);
  if (a.slowdown.first_slow >= 0) {
    const double rise = std::max(a.slowdown.step_rise, a.slowdown.data_rise);
    const Level l = level_of(rise, t.slowdown_moderate, t.slowdown_high);
    const TrendSegment& f = a.slowdown.segments.front();
    const TrendSegment& last = a.slowdown.segments.back();
    const bool data = a.slowdown.data_rise >= a.slowdown.step_rise * 0.5;
    if (l != Level::none)
      a.findings.push_back(
          {"slowing down", l, rise,
           "the median step went from " + fmt("%.2f", f.step_ms) + " ms (" + f.label + ") to " +
               fmt("%.2f", last.step_ms) + " ms (" + last.label + "), " +
               fmt("%+.0f %%", 100 * a.slowdown.step_rise) + "; data wait " +
               fmt("%.2f", f.data_wait_ms) + " -> " + fmt("%.2f", last.data_wait_ms) +
               " ms; slower from " + a.slowdown.segments[a.slowdown.first_slow].label + " on",
           data ? "the input got slower: a page cache that no longer holds the dataset, a "
                  "network file system, a growing per-sample cost (augmentations, longer "
                  "sequences); check the loader's decode rate per epoch"
                : "the step itself got slower: GPU clocks falling (heat, power; see the clock "
                  "curve), memory fragmentation or a growing state (a Python-side list, a "
                  "metric kept on the device); compare the op tables of early and late steps"});
  }

  // Evaluation-heavy.
  for (const EvalSpan& e : evals) a.eval_s += e.seconds;
  a.evaluations = static_cast<int>(evals.size());
  a.eval_share = wall_s > 0 ? std::min(1.0, a.eval_s / wall_s) : 0;
  const Level el = level_of(a.eval_share, t.eval_moderate, t.eval_high);
  if (el != Level::none)
    a.findings.push_back({"evaluation-heavy", el, a.eval_share,
                          "evaluation took " + percent(a.eval_share) + " of the wall time (" +
                              std::to_string(a.evaluations) + " evaluations, " +
                              fmt("%.1f", a.eval_s) + " of " + fmt("%.1f", wall_s) + " s)",
                          "evaluate less often (EvalOptions::every_steps) or on a subset "
                          "(EvalOptions::max_samples), or with a larger batch"});

  std::stable_sort(a.findings.begin(), a.findings.end(),
                   [](const CurveFinding& x, const CurveFinding& y) { return x.level > y.level; });
  return a;
}

std::string CurveAnalysis::text() const {
  std::string out;
  if (sawtooth.samples > 0)
    out += "diag  curves  utilization: mean " + fmt("%.0f %%", sawtooth.mean_util) + ", " +
           percent(sawtooth.low_share) + " of samples in gaps, " + std::to_string(sawtooth.cycles) +
           " busy-idle cycles (" + sawtooth.source + ")\n";
  if (!slowdown.segments.empty())
    out += "diag  curves  trend: median step " + fmt("%.2f", slowdown.segments.front().step_ms) +
           " ms (" + slowdown.segments.front().label + ") -> " +
           fmt("%.2f", slowdown.segments.back().step_ms) + " ms (" +
           slowdown.segments.back().label + "), " + fmt("%+.0f %%", 100 * slowdown.step_rise) +
           "; data wait " + fmt("%+.0f %%", 100 * slowdown.data_rise) + " of the step\n";
  if (evaluations > 0)
    out += "diag  curves  evaluation: " + percent(eval_share) + " of the wall time (" +
           std::to_string(evaluations) + " evaluations, " + fmt("%.1f", eval_s) + " s)\n";
  for (const CurveFinding& f : findings)
    out += std::string("diag  finding: ") + f.what + " (" + level_name(f.level) + ") — " +
           f.evidence + "\ndiag    -> " + f.advice + "\n";
  return out;
}

std::string timeline_csv(const std::vector<TimelinePoint>& points) {
  std::string out = "step,epoch,time_s,step_ms,data_wait_ms,device_ms,samples,loss\n";
  for (const TimelinePoint& p : points) {
    out += std::to_string(p.step) + "," + std::to_string(p.epoch) + "," + fmt("%.4f", p.time_s) +
           "," + field(p.step_ms) + "," + field(p.data_wait_ms) + "," + field(p.device_ms) + "," +
           std::to_string(p.samples) + "," +
           (std::isfinite(p.loss) ? fmt("%.6g", p.loss) : std::string()) + "\n";
  }
  return out;
}

std::string gpu_samples_csv(const std::vector<GpuSample>& samples, double t0_ms) {
  std::string out =
      "time_s,util_gpu,util_memory,sm_clock_mhz,sm_clock_max_mhz,mem_clock_mhz,power_w,"
      "power_limit_w,temperature_c,memory_used_mib,pcie_tx_mb_s,pcie_rx_mb_s,clock_events,"
      "slowdown_reasons\n";
  for (const GpuSample& s : samples) {
    const std::string reasons =
        s.clock_events >= 0
            ? describe_clock_events(static_cast<uint64_t>(s.clock_events) & clock_event::kSlowdown)
            : std::string();
    out += fmt("%.3f", (s.time_ms - t0_ms) / 1e3) + "," + field(s.util_gpu, "%.0f") + "," +
           field(s.util_memory, "%.0f") + "," + field(s.sm_clock_mhz, "%.0f") + "," +
           field(s.sm_clock_max_mhz, "%.0f") + "," + field(s.mem_clock_mhz, "%.0f") + "," +
           field(s.power_w, "%.1f") + "," + field(s.power_limit_w, "%.1f") + "," +
           field(s.temperature_c, "%.0f") + "," + field(s.memory_used_mib, "%.0f") + "," +
           field(s.pcie_tx_mb_s, "%.1f") + "," + field(s.pcie_rx_mb_s, "%.1f") + "," +
           (s.clock_events >= 0 ? std::to_string(s.clock_events) : std::string()) + "," +
           (reasons.find(',') != std::string::npos ? "\"" + reasons + "\"" : reasons) + "\n";
  }
  return out;
}

}  // namespace stoker::diag
