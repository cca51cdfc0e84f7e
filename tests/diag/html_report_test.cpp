// The HTML report (diag/html_report.h) rendered from recorded runs: its sections, the
// charts' point counts (and the reduction of long series that keeps spikes), escaping, and the
// atomic write. tests/diag/html_browser_check.py loads such pages in a real browser.
#include "diag/html_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "html_report_fixture.h"

namespace fs = std::filesystem;

namespace stoker::diag {
namespace {

// data-points of the polyline of `series` in chart `chart` (-1: absent).
int points_of(const std::string& html, const std::string& chart, const std::string& series) {
  const size_t c = html.find("data-chart=\"" + chart + "\"");
  if (c == std::string::npos) return -1;
  const size_t end = html.find("</svg>", c);
  const size_t s = html.find("data-series=\"" + series + "\" data-points=\"", c);
  if (s == std::string::npos || s > end) return -1;
  const size_t v = html.find("data-points=\"", s) + 13;
  return std::stoi(html.substr(v, html.find('"', v) - v));
}

// The coordinate pairs really written in that polyline's points attribute.
int pairs_of(const std::string& html, const std::string& chart, const std::string& series) {
  const size_t c = html.find("data-chart=\"" + chart + "\"");
  const size_t s = html.find("data-series=\"" + series + "\"", c);
  const size_t p = html.find(" points=\"", s) + 9;
  const std::string pts = html.substr(p, html.find('"', p) - p);
  std::istringstream in(pts);
  std::string pair;
  int n = 0;
  while (in >> pair) {
    EXPECT_NE(pair.find(','), std::string::npos) << pair;
    ++n;
  }
  return n;
}

TEST(HtmlReport, SectionsChartsAndPointCounts) {
  const HtmlReport h = test_fixture::sample_report(/*steps=*/240, /*gpu_samples=*/2500);
  const std::string html = render_html(h);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* section : {"Verdict", "Where a step's time goes", "op by op", "Curves",
                              "Static checks", "Against the baseline card"})
    EXPECT_NE(html.find(section), std::string::npos) << section;
  // The verdict with its evidence, the findings in order, the run's findings.
  EXPECT_NE(html.find("input-bound"), std::string::npos);
  EXPECT_LT(html.find("input (data wait on the device)"), html.find("launch (host-paced"));
  EXPECT_NE(html.find("saw-tooth utilization"), std::string::npos);
  // Step charts: one point per step; GPU charts reduced to kMaxChartPoints.
  EXPECT_EQ(points_of(html, "step_time", "step_ms"), 240);
  EXPECT_EQ(pairs_of(html, "step_time", "step_ms"), 240);
  EXPECT_EQ(points_of(html, "data_wait", "data_wait_ms"), 240);
  EXPECT_EQ(points_of(html, "loss", "loss"), 24);  // logged every 10 steps
  EXPECT_EQ(points_of(html, "gpu_util", "util_gpu"), static_cast<int>(kMaxChartPoints));
  EXPECT_EQ(pairs_of(html, "gpu_util", "util_gpu"), static_cast<int>(kMaxChartPoints));
  EXPECT_EQ(points_of(html, "power", "power_w"), static_cast<int>(kMaxChartPoints));
  EXPECT_EQ(points_of(html, "clocks", "sm_clock_mhz"), static_cast<int>(kMaxChartPoints));
  EXPECT_EQ(points_of(html, "gpu_memory", "memory_used_mib"), static_cast<int>(kMaxChartPoints));
  EXPECT_NE(html.find("data-chart=\"phases\""), std::string::npos);
  // No script and nothing fetched: the page works offline.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("nan"), std::string::npos);
  EXPECT_EQ(html.find("inf,"), std::string::npos);
}

TEST(HtmlReport, ReductionKeepsTheExtremesOfEverySlice) {
  std::vector<double> v(10000, 50.0);
  v[1234] = 0;    // a dip ...
  v[7777] = 100;  // ... and a spike, each alone in its slice
  const std::vector<size_t> keep = chart_indices(v);
  ASSERT_EQ(keep.size(), kMaxChartPoints);
  EXPECT_NE(std::find(keep.begin(), keep.end(), 1234u), keep.end());
  EXPECT_NE(std::find(keep.begin(), keep.end(), 7777u), keep.end());
  EXPECT_TRUE(std::is_sorted(keep.begin(), keep.end()));
  EXPECT_EQ(keep.front(), 0u);
  EXPECT_EQ(keep.back(), v.size() - 1);
  // Short series are kept whole.
  EXPECT_EQ(chart_indices(std::vector<double>(kMaxChartPoints, 1.0)).size(), kMaxChartPoints);
  EXPECT_EQ(chart_point_count(kMaxChartPoints + 1), kMaxChartPoints);
  EXPECT_EQ(chart_point_count(7), 7u);
}

TEST(HtmlReport, TextIsEscaped) {
  HtmlReport h;
  h.title = "model <script>alert(1)</script> & \"quotes\"";
  h.checks = {{CheckStatus::warn, "GPU 0 <b>hot</b>", "cool it & retry"}};
  const std::string html = render_html(h);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;"),
            std::string::npos);
  EXPECT_NE(html.find("GPU 0 &lt;b&gt;hot&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html.find("fix: cool it &amp; retry"), std::string::npos);
}

TEST(HtmlReport, CpuRunWithoutGpuSamplesSaysSo) {
  HtmlReport h = test_fixture::sample_report(50, 0);
  const std::string html = render_html(h);
  EXPECT_EQ(html.find("data-chart=\"gpu_util\""), std::string::npos);
  EXPECT_NE(html.find("No GPU samples"), std::string::npos);
  EXPECT_EQ(points_of(html, "step_time", "step_ms"), 50);
}

TEST(HtmlReport, DoctorPageWithAblationsAndNoRun) {
  HtmlReport h;
  h.title = "stoker doctor";
  h.ablations = {{.name = "real data",
                  .kind = "real",
                  .batch = 64,
                  .samples_per_s = 1000,
                  .step_ms = 64,
                  .verdict = "input-bound",
                  .input_share = 0.4},
                 {.name = "synthetic data",
                  .kind = "synthetic",
                  .batch = 64,
                  .samples_per_s = 2500,
                  .step_ms = 25.6,
                  .verdict = "compute-bound"}};
  h.conclusions = {"the input pipeline limits training"};
  const std::string html = render_html(h);
  EXPECT_NE(html.find("Ablations"), std::string::npos);
  EXPECT_NE(html.find("2,500"), std::string::npos);
  EXPECT_NE(html.find("the input pipeline limits training"), std::string::npos);
  EXPECT_EQ(html.find("Verdict"), std::string::npos);
}

TEST(HtmlReport, WrittenAtomically) {
  const fs::path dir = fs::temp_directory_path() / ("stoker_html_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path path = dir / "sub" / "report.html";
  write_html(path, test_fixture::sample_report(20, 30));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("</html>"), std::string::npos);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir / "sub")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);  // no temporary file left behind
  fs::remove_all(dir);
}

}  // namespace
}  // namespace stoker::diag
