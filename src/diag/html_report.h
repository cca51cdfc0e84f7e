// The health check as one HTML file a person reads at a glance
// (docs/diagnostics.md#the-html-report): the verdict with its evidence and advice, the findings
// ordered by how certain they are, the phase breakdown, the op table, the curves (step time, data
// wait, loss, GPU utilization, power, clocks, memory), the static checks, the comparison with a
// baseline card and `stoker doctor`'s ablations. Self-contained: inline CSS and SVG, no script, no
// network, no external file.
//
// Written at the end of fit() when DiagnosticsOptions::html_report (STOKER_DIAG_HTML) is set,
// and by `stoker doctor --html`. render_html is a pure function of its input (tests render
// recorded runs; a headless browser checks the page in CI).
//
// Every chart is an <svg class="chart" data-chart="NAME"> and every plotted series a
// <polyline class="series" data-series="NAME" data-points="N">: a series longer than
// kMaxChartPoints is reduced to kMaxChartPoints points (the lowest and highest point of each of
// kMaxChartPoints / 2 equal slices, in order), so spikes and saw-teeth survive the reduction.
//
// Thread-safety: free functions on values.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diag/baseline.h"
#include "diag/curves.h"
#include "diag/doctor.h"
#include "stoker/diag/report.h"

namespace stoker::diag {

struct HtmlReport {
  std::string title = "stoker health check";
  // Facts shown under the title, in order: ("model", "Sequential(...)"), ("device", "cuda:0"),...
  std::vector<std::pair<std::string, std::string>> facts;
  std::optional<Report> report;  // the verdict over the whole fit (none: doctor without a run)
  CurveAnalysis curves;
  std::vector<TimelinePoint> timeline;
  std::vector<GpuSample> gpu;
  double gpu_t0_ms = 0;  // the fit's start on the diag::now_ms() time line (the charts' zero)
  std::vector<EvalSpan> evals;
  std::vector<Check> checks;  // static checks (empty: not run)
  std::optional<Comparison> comparison;
  std::vector<Measurement> ablations;  // stoker doctor's runs
  std::vector<std::string> conclusions;
};

inline constexpr size_t kMaxChartPoints = 1200;
// How many points a chart draws of a series of n points.
inline size_t chart_point_count(size_t n) { return n < kMaxChartPoints ? n : kMaxChartPoints; }
// The indices kept of a series of values (all when n <= kMaxChartPoints, else the lowest and
// highest of each slice, in index order).
std::vector<size_t> chart_indices(const std::vector<double>& values);

std::string render_html(const HtmlReport& report);
// Writes render_html(report) to `path` atomically (a temporary file renamed into place).
void write_html(const std::filesystem::path& path, const HtmlReport& report);

}  // namespace stoker::diag
