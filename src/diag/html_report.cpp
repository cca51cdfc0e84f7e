#include "diag/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "diag/number_format.h"
#include "stoker/core/device.h"
#include "util/atomic_file.h"

namespace stoker::diag {

namespace {

using detail::fmt;

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string pct(double share, const char* f = "%.1f") { return fmt(f, 100 * share) + "&nbsp;%"; }

// Colors (one palette for the page: verdicts, phases, series).
const char* verdict_color(Verdict v) {
  switch (v) {
    case Verdict::compute_bound:
      return "#2e7d32";
    case Verdict::input_bound:
      return "#e65100";
    case Verdict::launch_bound:
      return "#6a1b9a";
    case Verdict::communication_bound:
      return "#1565c0";
    case Verdict::throttled:
      return "#c62828";
    case Verdict::bandwidth_bound:
      return "#00838f";
    case Verdict::misaligned_gemms:
      return "#ad1457";
  }
  return "#455a64";
}
const char* kPhaseColors[] = {"#ef6c00", "#42a5f5", "#1e88e5", "#8e24aa", "#43a047", "#9e9e9e"};

// ---- charts -------------------------------------------------------------------------------

struct Series {
  std::string name, label, color;
  std::vector<double> x, y;
};
struct Band {  // a shaded time span (an evaluation)
  double x0 = 0, x1 = 0;
};

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks over `range`.
double nice_step(double range, int n) {
  if (!(range > 0)) return 1;
  const double raw = range / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 10000) return fmt("%.0fk", v / 1000);
  if (a >= 100) return fmt("%.0f", v);
  if (a >= 10) return fmt("%.0f", v);
  if (a >= 1) return fmt("%.1f", v);
  return fmt("%.2g", v);
}

// Time axis in seconds, labelled in s, min or h by the span.
std::pair<double, const char*> time_unit(double span_s) {
  if (span_s >= 3 * 3600) return {3600, "h"};
  if (span_s >= 180) return {60, "min"};
  return {1, "s"};
}

// A line chart over time. `span`: the x range in seconds shared by every chart of the page, so
// that moments line up from one chart to the next.
std::string chart(const std::string& id, const std::string& title, const std::string& unit,
                  std::vector<Series> series, std::pair<double, double> span,
                  const std::vector<Band>& bands = {}, double y_max_fixed = -1) {
  constexpr double W = 880, H = 210, L = 58, R = 14, T = 14, B = 34;
  double x0 = span.first, x1 = span.second, y1 = 0;
  size_t total = 0;
  for (const Series& s : series) {
    total += s.x.size();
    for (size_t i = 0; i < s.x.size(); ++i) y1 = std::max(y1, s.y[i]);
  }
  std::string o = "<figure class=\"chart-box\"><figcaption>" + esc(title) +
                  (unit.empty() ? "" : " <span class=\"unit\">(" + esc(unit) + ")</span>") +
                  "</figcaption>";
  o += "<svg class=\"chart\" data-chart=\"" + esc(id) + "\" viewBox=\"0 0 " + fmt("%.0f", W) + " " +
       fmt("%.0f", H) + "\" role=\"img\" aria-label=\"" + esc(title) + "\">";
  if (total == 0) {
    o += "<text x=\"" + fmt("%.0f", W / 2) + "\" y=\"" + fmt("%.0f", H / 2) +
         "\" class=\"empty\" text-anchor=\"middle\">no samples</text></svg></figure>";
    return o;
  }
  if (y_max_fixed > 0) y1 = std::max(y1, y_max_fixed);
  if (!(y1 > 0)) y1 = 1;
  const double ystep = nice_step(y1, 4);
  y1 = std::ceil(y1 / ystep - 1e-9) * ystep;
  if (!(x1 > x0)) x1 = x0 + 1;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - std::clamp(y / y1, 0.0, 1.0) * (H - T - B); };
  // Grid and axes.
  for (double y = 0; y <= y1 + ystep * 1e-6; y += ystep) {
    o += "<line class=\"grid\" x1=\"" + fmt("%.1f", L) + "\" x2=\"" + fmt("%.1f", W - R) +
         "\" y1=\"" + fmt("%.1f", py(y)) + "\" y2=\"" + fmt("%.1f", py(y)) + "\"/>";
    o += "<text class=\"tick\" x=\"" + fmt("%.1f", L - 6) + "\" y=\"" + fmt("%.1f", py(y) + 4) +
         "\" text-anchor=\"end\">" + tick_label(y) + "</text>";
  }
  const auto [scale, tu] = time_unit(x1 - x0);
  const double xstep = nice_step((x1 - x0) / scale, 6) * scale;
  for (double x = std::ceil(x0 / xstep) * xstep; x <= x1 + xstep * 1e-6; x += xstep) {
    o += "<line class=\"axis\" x1=\"" + fmt("%.1f", px(x)) + "\" x2=\"" + fmt("%.1f", px(x)) +
         "\" y1=\"" + fmt("%.1f", H - B) + "\" y2=\"" + fmt("%.1f", H - B + 4) + "\"/>";
    o += "<text class=\"tick\" x=\"" + fmt("%.1f", px(x)) + "\" y=\"" + fmt("%.1f", H - B + 16) +
         "\" text-anchor=\"middle\">" + tick_label(x / scale) + "</text>";
  }
  o += "<text class=\"tick\" x=\"" + fmt("%.1f", W - R) + "\" y=\"" + fmt("%.1f", H - 4) +
       "\" text-anchor=\"end\">time (" + tu + ")</text>";
  o += "<line class=\"axis\" x1=\"" + fmt("%.1f", L) + "\" x2=\"" + fmt("%.1f", W - R) +
       "\" y1=\"" + fmt("%.1f", H - B) + "\" y2=\"" + fmt("%.1f", H - B) + "\"/>";
  for (const Band& b : bands)
    o += "<rect class=\"band\" x=\"" + fmt("%.1f", px(b.x0)) + "\" y=\"" + fmt("%.1f", T) +
         "\" width=\"" + fmt("%.1f", std::max(1.0, px(b.x1) - px(b.x0))) + "\" height=\"" +
         fmt("%.1f", H - T - B) + "\"><title>evaluation</title></rect>";
  // Series.
  for (const Series& s : series) {
    const std::vector<size_t> keep = chart_indices(s.y);
    std::string pts;
    pts.reserve(keep.size() * 14);
    for (size_t i : keep) {
      if (!pts.empty()) pts += ' ';
      pts += fmt("%.1f", px(s.x[i])) + "," + fmt("%.1f", py(s.y[i]));
    }
    o += "<polyline class=\"series\" data-series=\"" + esc(s.name) + "\" data-points=\"" +
         std::to_string(keep.size()) + "\" fill=\"none\" stroke=\"" + s.color + "\" points=\"" +
         pts + "\"><title>" + esc(s.label) + "</title></polyline>";
  }
  o += "</svg><div class=\"legend\">";
  for (const Series& s : series)
    o += "<span><i style=\"background:" + s.color + "\"></i>" + esc(s.label) + "</span>";
  if (!bands.empty()) o += "<span><i class=\"band-key\"></i>evaluation</span>";
  o += "</div></figure>";
  return o;
}

// ---- sections ------------------------------------------------------------------------------

std::string level_badge(Level l) {
  return std::string("<span class=\"lvl lvl-") + level_name(l) + "\">" + level_name(l) + "</span>";
}

std::string finding_label(const std::string& what) {
  if (what == "input") return "input (data wait on the device)";
  if (what == "launch") return "launch (host-paced device time)";
  if (what == "communication") return "exposed communication";
  if (what == "bandwidth") return "bandwidth-bound ops";
  return what;
}

std::string verdict_section(const Report& r, const CurveAnalysis& curves) {
  std::string o =
      "<section class=\"verdict\" style=\"border-color:" + std::string(verdict_color(r.verdict)) +
      "\"><h2>Verdict</h2>";
  o += "<p class=\"verdict-name\" style=\"color:" + std::string(verdict_color(r.verdict)) + "\">" +
       verdict_name(r.verdict) +
       (r.level != Level::none ? " <small>(" + std::string(level_name(r.level)) + ")</small>"
                               : std::string()) +
       "</p>";
  o += "<p class=\"headline\">" + esc(r.headline) + "</p>";
  // Findings in the order of the rules (input, launch, communication, bandwidth): the most
  // certain first.
  o +=
      "<table class=\"findings\"><tr><th>finding</th><th>share of the step</th><th>level</th></tr>";
  for (const Finding& f : r.findings)
    o += "<tr><td>" + esc(finding_label(f.what)) + "</td><td class=\"num\">" + pct(f.share) +
         "</td><td>" + level_badge(f.level) + "</td></tr>";
  o += "</table>";
  if (!r.advice.empty()) {
    o += "<h3>Advice</h3><ol class=\"advice\">";
    for (const std::string& a : r.advice) o += "<li>" + esc(a) + "</li>";
    o += "</ol>";
  }
  if (!curves.findings.empty()) {
    o += "<h3>Over the run</h3><ul class=\"run-findings\">";
    for (const CurveFinding& f : curves.findings)
      o += "<li>" + level_badge(f.level) + " <b>" + esc(f.what) + "</b>: " + esc(f.evidence) +
           "<br><span class=\"fix\">&rarr; " + esc(f.advice) + "</span></li>";
    o += "</ul>";
  }
  o += "</section>";
  return o;
}

std::string phases_section(const Report& r) {
  const Breakdown& b = r.breakdown;
  if (b.steps == 0) return "";
  const bool dev = b.device_timed;
  const auto& ph = dev ? b.device : b.host;
  std::string o = "<section><h2>Where a step's time goes</h2>";
  o += "<p>" + std::to_string(b.steps) + " timed steps (" + std::to_string(b.first_step) + ".." +
       std::to_string(b.last_step) + "): median step " + fmt("%.2f", b.step.median_ms) +
       " ms, p90 " + fmt("%.2f", b.step.p90_ms) + " ms; " + esc(format_count(b.samples_per_s)) +
       " samples/s; phases measured on the " + (dev ? "device (compute stream)" : "host") + ".</p>";
  // Stacked bar of the phases' median times.
  double total = 0;
  for (int p = 0; p < kPhaseCount; ++p) total += ph[p].median_ms;
  if (!dev) total += b.other.median_ms;
  constexpr double W = 880, H = 46;
  o += "<svg class=\"chart phases\" data-chart=\"phases\" viewBox=\"0 0 880 46\" role=\"img\" "
       "aria-label=\"phases\">";
  double x = 0;
  std::string legend = "<div class=\"legend\">";
  for (int p = 0; p <= kPhaseCount; ++p) {
    if (p == kPhaseCount && dev) break;
    const double v = p < kPhaseCount ? ph[p].median_ms : b.other.median_ms;
    const std::string name = p < kPhaseCount ? phase_name(static_cast<Phase>(p)) : "other";
    const double w = total > 0 ? v / total * W : 0;
    if (w > 0)
      o += "<rect x=\"" + fmt("%.1f", x) + "\" y=\"4\" width=\"" + fmt("%.1f", w) + "\" height=\"" +
           fmt("%.0f", H - 8) + "\" fill=\"" + kPhaseColors[p] + "\"><title>" + name + " " +
           fmt("%.3f", v) + " ms</title></rect>";
    if (w > 60)
      o += "<text x=\"" + fmt("%.1f", x + w / 2) +
           "\" y=\"28\" text-anchor=\"middle\" "
           "class=\"bar-label\">" +
           name + "</text>";
    legend += "<span><i style=\"background:" + std::string(kPhaseColors[p]) + "\"></i>" + name +
              " " + fmt("%.2f", v) + " ms</span>";
    x += w;
  }
  o += "</svg>" + legend + "</div>";
  o += "<table><tr><th>phase</th><th>host median</th><th>host p90</th>";
  if (dev) o += "<th>device median</th><th>device p90</th>";
  o += "</tr>";
  for (int p = 0; p < kPhaseCount; ++p) {
    o += "<tr><td>" + std::string(phase_name(static_cast<Phase>(p))) + "</td><td class=\"num\">" +
         fmt("%.3f", b.host[p].median_ms) + "</td><td class=\"num\">" +
         fmt("%.3f", b.host[p].p90_ms) + "</td>";
    if (dev)
      o += "<td class=\"num\">" + fmt("%.3f", b.device[p].median_ms) + "</td><td class=\"num\">" +
           fmt("%.3f", b.device[p].p90_ms) + "</td>";
    o += "</tr>";
  }
  o += "<tr><td>other (host)</td><td class=\"num\">" + fmt("%.3f", b.other.median_ms) +
       "</td><td class=\"num\">" + fmt("%.3f", b.other.p90_ms) + "</td>" +
       (dev ? "<td></td><td></td>" : "") + "</tr>";
  if (b.launch_known)
    o += "<tr><td>launch (host-paced)</td><td></td><td></td><td class=\"num\">" +
         fmt("%.3f", b.launch.median_ms) + "</td><td class=\"num\">" +
         fmt("%.3f", b.launch.p90_ms) + "</td></tr>";
  o += "</table><p class=\"shares\">Shares of the step: input " + pct(b.input_share) + ", launch " +
       pct(b.launch_share) + ", exposed communication " + pct(b.comm_share) + ", compute " +
       pct(b.compute_share) + "; host data wait " + pct(b.host_data_share) +
       " (times in ms per step).</p>";
  if (r.loader.present)
    o += "<p class=\"loader\">Data: " +
         esc(r.loader.is_loader ? r.loader.summary + "; per sample (thread time) read " +
                                      fmt("%.3f", r.loader.read_ms) + ", decode " +
                                      fmt("%.3f", r.loader.decode_ms) + ", resize " +
                                      fmt("%.3f", r.loader.resize_ms) + " ms; capacity " +
                                      format_count(r.loader.capacity_samples_per_s) + " samples/s"
                                : r.loader.kind) +
         "</p>";
  if (r.gpu.available) o += "<p class=\"gpu\">GPU: " + esc(r.gpu.line()) + "</p>";
  o += "</section>";
  return o;
}

std::string op_rows(const std::vector<OpRow>& rows, size_t top, bool family_col) {
  std::string o = "<tr><th>" + std::string(family_col ? "name" : "family") + "</th>" +
                  (family_col ? "<th>family</th>" : "") +
                  "<th>calls</th><th>ms/step</th><th>share</th><th>TFLOP/s</th><th>GB/s</th>"
                  "<th>% compute roof</th><th>% bandwidth roof</th><th>bound by</th></tr>";
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const OpRow& r = rows[i];
    o += "<tr><td>" + esc(r.key) + "</td>" + (family_col ? "<td>" + esc(r.family) + "</td>" : "") +
         "<td class=\"num\">" + fmt("%.0f", r.calls) + "</td><td class=\"num\">" +
         fmt("%.3f", r.ms) +
         "</td><td class=\"num\"><span class=\"share\" style=\"--w:" + fmt("%.1f", 100 * r.share) +
         "%\"></span>" + pct(r.share) + "</td><td class=\"num\">" + fmt("%.1f", r.tflops) +
         "</td><td class=\"num\">" + fmt("%.0f", r.gb_s) + "</td><td class=\"num\">" +
         (r.compute_pct >= 0 ? fmt("%.1f", r.compute_pct) : std::string("–")) +
         "</td><td class=\"num\">" +
         (r.bandwidth_pct >= 0 ? fmt("%.1f", r.bandwidth_pct) : std::string("–")) + "</td><td>" +
         (r.compute_pct < 0 ? ""
          : r.memory_bound  ? "memory"
                            : "compute") +
         "</td></tr>";
  }
  return o;
}

std::string ops_section(const OpTable& t) {
  if (t.empty()) return "";
  std::string o = "<section><h2>Where the GPU time goes, op by op</h2>";
  o += "<p>" + std::to_string(t.steps) + " op-timed steps: step " + fmt("%.2f", t.step_ms) +
       " ms, ops " + fmt("%.2f", t.op_ms) + " ms, <b>idle " + fmt("%.2f", t.idle_ms) + " ms (" +
       pct(t.idle_share) + ")</b>, " + fmt("%.1f", t.tflops) + " TFLOP/s over the step" +
       (t.peaks.known()
            ? "; roofs " + fmt("%.0f", t.peaks.tensor_tflops) + " TFLOP/s, " +
                  fmt("%.0f", t.peaks.bandwidth_gb_s) + " GB/s (" + esc(t.peaks.source) + ")"
            : "; roofs unknown (" + esc(t.peaks.source) + ")") +
       (t.device_timed ? "" : "; host clock (CPU)") + ".</p>";
  if (t.comm_calls > 0)
    o += "<p>Gradient sync: " + fmt("%.0f", t.comm_calls) + " buckets, " + fmt("%.2f", t.comm_ms) +
         " ms per step on the communication stream" +
         (t.hidden_comm_share >= 0 ? ", " + pct(t.hidden_comm_share) + " hidden behind backward, " +
                                         fmt("%.2f", t.exposed_comm_ms) + " ms exposed"
                                   : std::string()) +
         ".</p>";
  if (t.bandwidth_bound_share > 0)
    o += "<p>Bandwidth-bound: " + pct(t.bandwidth_bound_share) +
         " of the step in memory-bound ops at " + fmt("%.0f", t.bandwidth_bound_roof_pct) +
         " % of the bandwidth roof" +
         (t.fuse_candidates.empty() ? std::string() : "; fuse first: " + esc([&] {
                                                        std::string s;
                                                        for (const std::string& c :
                                                             t.fuse_candidates)
                                                          s += (s.empty() ? "" : ", ") + c;
                                                        return s;
                                                      }())) +
         ".</p>";
  o += "<h3>By op family</h3><table class=\"ops\">" + op_rows(t.families, 32, false) + "</table>";
  o += "<h3>By module (top 12)</h3><table class=\"ops\">" + op_rows(t.modules, 12, true) +
       "</table>";
  o += "<h3>By op (top 12)</h3><table class=\"ops\">" + op_rows(t.ops, 12, true) + "</table>";
  o += "</section>";
  return o;
}

std::string curves_section(const HtmlReport& h) {
  std::string o = "<section><h2>Curves</h2>";
  if (!h.curves.findings.empty() || h.curves.sawtooth.samples > 0) {
    o += "<p class=\"curve-summary\">";
    const CurveAnalysis& c = h.curves;
    if (c.sawtooth.samples > 0)
      o += "Utilization: mean " + fmt("%.0f", c.sawtooth.mean_util) + "&nbsp;%, " +
           pct(c.sawtooth.low_share, "%.0f") + " of samples in gaps, " +
           std::to_string(c.sawtooth.cycles) + " busy-idle cycles (" + esc(c.sawtooth.source) +
           "). ";
    if (!c.slowdown.segments.empty())
      o += "Median step " + fmt("%.2f", c.slowdown.segments.front().step_ms) + " ms (" +
           esc(c.slowdown.segments.front().label) + ") &rarr; " +
           fmt("%.2f", c.slowdown.segments.back().step_ms) + " ms (" +
           esc(c.slowdown.segments.back().label) + "). ";
    if (c.evaluations > 0)
      o += "Evaluation: " + pct(c.eval_share, "%.0f") + " of the wall time (" +
           std::to_string(c.evaluations) + " runs). ";
    o += "</p>";
  }
  std::vector<Band> bands;
  for (const EvalSpan& e : h.evals) bands.push_back({e.end_s - e.seconds, e.end_s});
  Series step{"step_ms", "step time (host)", "#1e88e5", {}, {}};
  Series device{"device_ms", "step time (device)", "#43a047", {}, {}};
  Series wait{"data_wait_ms", "data wait (host)", "#ef6c00", {}, {}};
  Series loss{"loss", "loss (log window mean)", "#6a1b9a", {}, {}};
  for (const TimelinePoint& p : h.timeline) {
    step.x.push_back(p.time_s);
    step.y.push_back(p.step_ms);
    if (p.device_ms >= 0) {
      device.x.push_back(p.time_s);
      device.y.push_back(p.device_ms);
    }
    wait.x.push_back(p.time_s);
    wait.y.push_back(std::max(0.0, p.data_wait_ms));
    if (std::isfinite(p.loss)) {
      loss.x.push_back(p.time_s);
      loss.y.push_back(p.loss);
    }
  }
  std::vector<Series> step_series{step};
  if (!device.x.empty()) step_series.push_back(device);
  // One time axis for every chart: from the fit's start to its last step or sample.
  std::pair<double, double> span{0, 0};
  for (const TimelinePoint& p : h.timeline) span.second = std::max(span.second, p.time_s);
  for (const GpuSample& g : h.gpu)
    span.second = std::max(span.second, (g.time_ms - h.gpu_t0_ms) / 1e3);
  for (const EvalSpan& e : h.evals) span.second = std::max(span.second, e.end_s);
  o += "<div class=\"charts\">";
  o += chart("step_time", "Step time", "ms", step_series, span, bands);
  o += chart("data_wait", "Data wait", "ms per step", {wait}, span, bands);
  if (!loss.x.empty()) o += chart("loss", "Loss", "", {loss}, span, bands);
  if (!h.gpu.empty()) {
    auto gpu_series = [&](const char* name, const char* label, const char* color,
                          double GpuSample::*field_d, int GpuSample::*field_i) {
      Series s{name, label, color, {}, {}};
      for (const GpuSample& g : h.gpu) {
        const double v = field_d ? g.*field_d : static_cast<double>(g.*field_i);
        if (v < 0 || !std::isfinite(v)) continue;
        s.x.push_back((g.time_ms - h.gpu_t0_ms) / 1e3);
        s.y.push_back(v);
      }
      return s;
    };
    o += chart("gpu_util", "GPU utilization (NVML)", "%",
               {gpu_series("util_gpu", "kernel running", "#1e88e5", nullptr, &GpuSample::util_gpu),
                gpu_series("util_memory", "memory controller busy", "#90caf9", nullptr,
                           &GpuSample::util_memory)},
               span, bands, 100);
    o +=
        chart("power", "Power", "W",
              {gpu_series("power_w", "draw", "#c62828", &GpuSample::power_w, nullptr),
               gpu_series("power_limit_w", "limit", "#9e9e9e", &GpuSample::power_limit_w, nullptr)},
              span, bands);
    o += chart(
        "clocks", "Clocks", "MHz",
        {gpu_series("sm_clock_mhz", "SM", "#2e7d32", nullptr, &GpuSample::sm_clock_mhz),
         gpu_series("sm_clock_max_mhz", "SM max", "#a5d6a7", nullptr, &GpuSample::sm_clock_max_mhz),
         gpu_series("mem_clock_mhz", "memory", "#6d4c41", nullptr, &GpuSample::mem_clock_mhz)},
        span, bands);
    o += chart("gpu_memory", "GPU memory in use", "MiB",
               {gpu_series("memory_used_mib", "used (all processes)", "#00838f",
                           &GpuSample::memory_used_mib, nullptr)},
               span, bands);
    o += chart("temperature", "Temperature", "°C",
               {gpu_series("temperature_c", "GPU", "#ff7043", nullptr, &GpuSample::temperature_c)},
               span, bands);
  }
  o += "</div>";
  if (h.gpu.empty())
    o += "<p class=\"note\">No GPU samples (a CPU run, or NVML unavailable): the GPU curves are "
         "absent.</p>";
  o += "</section>";
  return o;
}

std::string checks_section(const std::vector<Check>& checks) {
  if (checks.empty()) return "";
  std::string o = "<section><h2>Static checks</h2><table class=\"checks\">";
  for (const Check& c : checks) {
    const std::string s = check_status_name(c.status);
    o +=
        "<tr><td><span class=\"st st-" + std::string(s == "FAIL" ? "fail" : s) + "\">" + s +
        "</span></td><td>" + esc(c.what) +
        (c.fix.empty() ? std::string() : "<br><span class=\"fix\">fix: " + esc(c.fix) + "</span>") +
        "</td></tr>";
  }
  o += "</table></section>";
  return o;
}

std::string comparison_section(const Comparison& c) {
  std::string o = "<section><h2>Against the baseline card</h2>";
  o += "<p>" + std::to_string(c.slower()) + " metrics slower, " + std::to_string(c.faster()) +
       " faster beyond the measured noise" +
       (c.comparable ? std::string() : " (timed on another domain: not comparable)") + ".</p>";
  o += "<table><tr><th>metric</th><th>before ms</th><th>after ms</th><th>change</th>"
       "<th>noise ms</th><th></th></tr>";
  for (const MetricChange& m : c.metrics)
    o += "<tr><td>" + esc(m.name) + "</td><td class=\"num\">" + fmt("%.3f", m.before_ms) +
         "</td><td class=\"num\">" + fmt("%.3f", m.after_ms) + "</td><td class=\"num\">" +
         fmt("%+.1f", 100 * m.change) + "&nbsp;%</td><td class=\"num\">" + fmt("%.3f", m.noise_ms) +
         "</td><td>" +
         (m.significant
              ? (m.change > 0 ? "<b class=\"worse\">slower</b>" : "<b class=\"better\">faster</b>")
              : std::string("within noise")) +
         "</td></tr>";
  o += "</table>";
  if (!c.environment_changes.empty()) {
    o += "<p>Environment changes:</p><ul>";
    for (const std::string& e : c.environment_changes) o += "<li>" + esc(e) + "</li>";
    o += "</ul>";
  }
  o += "</section>";
  return o;
}

std::string ablations_section(const std::vector<Measurement>& m,
                              const std::vector<std::string>& conclusions) {
  if (m.empty() && conclusions.empty()) return "";
  std::string o =
      "<section><h2>Ablations</h2><table><tr><th>run</th><th>batch</th><th>ranks</th>"
      "<th>samples/s</th><th>median step ms</th><th>verdict</th><th>input</th>"
      "<th>launch</th><th>comm</th></tr>";
  for (const Measurement& x : m) {
    if (x.failed) {
      o += "<tr><td>" + esc(x.name) +
           "</td><td colspan=\"8\" class=\"worse\">failed: " + esc(x.error) + "</td></tr>";
      continue;
    }
    o += "<tr><td>" + esc(x.name) + "</td><td class=\"num\">" + std::to_string(x.batch) +
         "</td><td class=\"num\">" + std::to_string(x.ranks) + "</td><td class=\"num\">" +
         esc(format_count(x.samples_per_s)) + "</td><td class=\"num\">" + fmt("%.2f", x.step_ms) +
         "</td><td>" + esc(x.verdict) + "</td><td class=\"num\">" + pct(x.input_share) +
         "</td><td class=\"num\">" + pct(x.launch_share) + "</td><td class=\"num\">" +
         pct(x.comm_share) + "</td></tr>";
  }
  o += "</table>";
  if (!conclusions.empty()) {
    o += "<ul class=\"conclusions\">";
    for (const std::string& c : conclusions) o += "<li>" + esc(c) + "</li>";
    o += "</ul>";
  }
  o += "</section>";
  return o;
}

const char* kStyle = R"(
:root{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#212121}
body{margin:0;background:#f5f6f8}
main{max-width:960px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:4px 0}
h2{font-size:17px;margin:0 0 10px}
h3{font-size:14px;margin:14px 0 6px;color:#455a64}
section{background:#fff;border-radius:8px;padding:14px 18px;margin:14px 0;box-shadow:0 1px 3px #0002}
.facts{color:#546e7a;font-size:13px;margin:2px 0 8px}
.facts span{margin-right:14px}
.verdict{border-left:6px solid}
.verdict-name{font-size:26px;font-weight:700;margin:2px 0}
.headline{font-size:15px;margin:4px 0 10px}
table{border-collapse:collapse;font-size:13px;width:100%}
th{text-align:left;color:#546e7a;font-weight:600;border-bottom:1px solid #cfd8dc;padding:4px 6px}
td{border-bottom:1px solid #eceff1;padding:4px 6px;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.share{display:inline-block;height:8px;width:calc(var(--w) * 0.6);max-width:60px;background:#90caf9;margin-right:4px}
.lvl,.st{display:inline-block;border-radius:3px;padding:0 6px;font-size:12px;font-weight:600;color:#fff}
.lvl-high,.st-fail{background:#c62828}.lvl-moderate,.st-warn{background:#ef6c00}
.lvl-none,.st-ok{background:#2e7d32}.st-info{background:#607d8b}
.fix{color:#546e7a;font-size:12px}
.advice li,.run-findings li{margin:4px 0}
.run-findings{list-style:none;padding-left:0}
.charts{display:grid;grid-template-columns:1fr;gap:10px}
figure.chart-box{margin:0}
figcaption{font-size:13px;font-weight:600;color:#37474f}
.unit{font-weight:400;color:#78909c}
svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:#eceff1}svg .axis{stroke:#90a4ae}
svg .tick{font-size:11px;fill:#607d8b}svg .empty{font-size:13px;fill:#90a4ae}
svg polyline{stroke-width:1.4;stroke-linejoin:round}
svg .band{fill:#ffe08255}
svg .bar-label{font-size:12px;fill:#fff;font-weight:600}
.legend{font-size:12px;color:#546e7a;margin:2px 0 6px}
.legend span{margin-right:14px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:-1px;border-radius:2px}
.legend i.band-key{background:#ffe082}
.worse{color:#c62828}.better{color:#2e7d32}
.note,.shares,.loader,.gpu,.curve-summary{font-size:13px;color:#455a64}
footer{font-size:12px;color:#78909c;margin-top:18px}
)";

}  // namespace

std::vector<size_t> chart_indices(const std::vector<double>& values) {
  const size_t n = values.size();
  std::vector<size_t> keep;
  if (n <= kMaxChartPoints) {
    keep.resize(n);
    for (size_t i = 0; i < n; ++i) keep[i] = i;
    return keep;
  }
  const size_t slices = kMaxChartPoints / 2;
  keep.reserve(kMaxChartPoints);
  for (size_t s = 0; s < slices; ++s) {
    const size_t b = s * n / slices, e = (s + 1) * n / slices;  // n > 2 * slices: e - b >= 2
    size_t lo = b, hi = b;
    for (size_t i = b; i < e; ++i) {
      if (values[i] < values[lo]) lo = i;
      if (values[i] > values[hi]) hi = i;
    }
    if (lo == hi) {  // a flat slice: its two ends
      lo = b;
      hi = e - 1;
    }
    keep.push_back(std::min(lo, hi));
    keep.push_back(std::max(lo, hi));
  }
  return keep;
}

std::string render_html(const HtmlReport& h) {
  std::string o =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>" +
      esc(h.title) + "</title><style>" + kStyle +
      "</style></head>"
      "<body data-report-ready=\"1\"><main>";
  o += "<h1>" + esc(h.title) + "</h1><div class=\"facts\">";
  for (const auto& [k, v] : h.facts) o += "<span><b>" + esc(k) + "</b> " + esc(v) + "</span> ";
  o += "</div>";
  if (h.report) {
    o += verdict_section(*h.report, h.curves);
    o += phases_section(*h.report);
    o += ops_section(h.report->ops);
  }
  if (!h.timeline.empty() || !h.gpu.empty()) o += curves_section(h);
  o += ablations_section(h.ablations, h.conclusions);
  o += checks_section(h.checks);
  if (h.comparison) o += comparison_section(*h.comparison);
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  o += "<footer>stoker " + esc(std::string(core::version())) + ", " + date +
       ". Every number is defined in stoker's docs/diagnostics.md.</footer>";
  o += "</main></body></html>\n";
  return o;
}

void write_html(const std::filesystem::path& path, const HtmlReport& report) {
  const std::string text = render_html(report);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  util::write_file_atomically(path,
                              [&](int fd) { util::write_all(fd, text.data(), text.size(), path); });
}

}  // namespace stoker::diag
