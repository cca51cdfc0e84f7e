// Curves (diag/curves.h): the saw-tooth, slowing-down and evaluation-heavy detectors on
// made-up runs, the bounded series and the CSV files.
#include "diag/curves.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "stoker/diag/report.h"

namespace stoker::diag {
namespace {

// A run of `n` steps of `step_ms` each (data wait `wait_ms`), `per_epoch` steps per epoch; the
// step time of epoch e is multiplied by slow(e).
template <class Slow>
std::vector<TimelinePoint> run(int n, int per_epoch, double step_ms, double wait_ms, Slow slow) {
  std::vector<TimelinePoint> pts;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    TimelinePoint p;
    p.step = i + 1;
    p.epoch = i / per_epoch;
    const double f = slow(p.epoch);
    p.step_ms = step_ms * f * (1 + 0.01 * ((i * 7) % 5 - 2));  // +-2 % jitter
    p.data_wait_ms = wait_ms;
    t += p.step_ms / 1e3;
    p.time_s = t;
    p.samples = 32;
    pts.push_back(p);
  }
  return pts;
}

std::vector<TimelinePoint> steady(int n, int per_epoch) {
  return run(n, per_epoch, 100, 1, [](int64_t) { return 1.0; });
}

// GPU samples every 0.1 s: `busy` samples at 98 %, then `idle` at 5 %, repeated.
std::vector<GpuSample> bursts(int cycles, int busy, int idle) {
  std::vector<GpuSample> out;
  double t = 0;
  for (int c = 0; c < cycles; ++c)
    for (int i = 0; i < busy + idle; ++i) {
      GpuSample s;
      s.time_ms = t;
      s.util_gpu = i < busy ? 98 : 5;
      out.push_back(s);
      t += 100;
    }
  return out;
}

const CurveFinding* find(const CurveAnalysis& a, const std::string& what) {
  for (const CurveFinding& f : a.findings)
    if (f.what == what) return &f;
  return nullptr;
}

TEST(Sawtooth, CountsBurstGapCycles) {
  const std::vector<GpuSample> g = bursts(6, 7, 3);
  std::vector<double> t, u;
  for (const GpuSample& s : g) {
    t.push_back(s.time_ms / 1e3);
    u.push_back(s.util_gpu);
  }
  const SawtoothStats s = detect_sawtooth(t, u, Thresholds{}, "test");
  EXPECT_EQ(s.samples, 60);
  EXPECT_EQ(s.cycles, 5);  // burst gap burst ... the sixth gap has no burst after it
  EXPECT_NEAR(s.low_share, 0.3, 1e-12);
  EXPECT_NEAR(s.period_s, 1.0, 1e-9);  // a gap every 10 samples of 0.1 s
  EXPECT_NEAR(s.mean_util, (7 * 98 + 3 * 5) / 10.0, 1e-9);
}

TEST(Sawtooth, HysteresisIgnoresWobbleBetweenThresholds) {
  // 95, 70, 95, 70, ...: never below 50 %, so no gap and no cycle.
  std::vector<double> t, u;
  for (int i = 0; i < 40; ++i) {
    t.push_back(i * 0.1);
    u.push_back(i % 2 ? 70 : 95);
  }
  const SawtoothStats s = detect_sawtooth(t, u, Thresholds{}, "test");
  EXPECT_EQ(s.cycles, 0);
  EXPECT_EQ(s.low_share, 0);
}

TEST(Curves, SawtoothFromNvmlIsAFinding) {
  const CurveAnalysis a = analyze_curves(steady(200, 200), bursts(8, 6, 4), {}, 20, Thresholds{});
  const CurveFinding* f = find(a, "saw-tooth utilization");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->level, Level::high);  // 40 % of the samples are gaps (>= 30 %)
  EXPECT_NEAR(f->value, 0.4, 1e-12);
  EXPECT_EQ(a.sawtooth.source, "GPU utilization (NVML)");
  EXPECT_NE(f->evidence.find("7 busy-idle cycles"), std::string::npos) << f->evidence;
}

TEST(Curves, SteadyUtilizationIsNoSawtooth) {
  std::vector<GpuSample> g = bursts(1, 100, 0);
  // Two isolated dips (an evaluation, a checkpoint) are not a saw-tooth.
  g[30].util_gpu = 10;
  g[70].util_gpu = 10;
  const CurveAnalysis a = analyze_curves(steady(200, 200), g, {}, 20, Thresholds{});
  EXPECT_EQ(find(a, "saw-tooth utilization"), nullptr);
  EXPECT_EQ(a.sawtooth.cycles, 2);
}

TEST(Curves, SawtoothFromTheTimelineWithoutNvml) {
  // CPU run: every 4th step waits 80 % of its time for data.
  std::vector<TimelinePoint> pts = steady(200, 200);
  for (size_t i = 0; i < pts.size(); i += 4) pts[i].data_wait_ms = 0.8 * pts[i].step_ms;
  const CurveAnalysis a = analyze_curves(pts, {}, {}, 20, Thresholds{});
  EXPECT_EQ(a.sawtooth.source, "step timeline (100 % - data wait)");
  const CurveFinding* f = find(a, "saw-tooth utilization");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->level, Level::moderate);  // 25 % of the steps are gaps
}

TEST(Slowdown, RisingEpochsNameTheFirstSlowOne) {
  // Epochs 0..5; from epoch 3 on each step takes 15 %, then 30 %, 45 % longer.
  const auto pts =
      run(600, 100, 100, 1, [](int64_t e) { return e < 3 ? 1.0 : 1.0 + 0.15 * (e - 2); });
  const CurveAnalysis a = analyze_curves(pts, {}, {}, 60, Thresholds{});
  ASSERT_TRUE(a.slowdown.by_epoch);
  ASSERT_EQ(a.slowdown.segments.size(), 6u);
  EXPECT_EQ(a.slowdown.first_slow, 3);
  EXPECT_EQ(a.slowdown.segments[3].label, "epoch 4");
  EXPECT_NEAR(a.slowdown.step_rise, 0.45, 0.03);
  const CurveFinding* f = find(a, "slowing down");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->level, Level::high);
  EXPECT_NE(f->evidence.find("slower from epoch 4 on"), std::string::npos) << f->evidence;
  EXPECT_NE(f->advice.find("step itself"), std::string::npos);
}

TEST(Slowdown, RisingDataWaitIsTheInputsFault) {
  // Same step compute, but the data wait grows by 20 ms per epoch from epoch 2.
  std::vector<TimelinePoint> pts = steady(400, 100);
  for (TimelinePoint& p : pts)
    if (p.epoch >= 2) {
      p.data_wait_ms += 20.0 * (p.epoch - 1);
      p.step_ms += 20.0 * (p.epoch - 1);
    }
  const CurveAnalysis a = analyze_curves(pts, {}, {}, 40, Thresholds{});
  EXPECT_EQ(a.slowdown.first_slow, 2);
  EXPECT_NEAR(a.slowdown.data_rise, 0.40, 0.01);
  const CurveFinding* f = find(a, "slowing down");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->advice.find("input got slower"), std::string::npos);
}

TEST(Slowdown, OneSlowEpochThatRecoveredIsNoTrend) {
  const auto pts = run(500, 100, 100, 1, [](int64_t e) { return e == 2 ? 1.5 : 1.0; });
  const CurveAnalysis a = analyze_curves(pts, {}, {}, 50, Thresholds{});
  EXPECT_EQ(a.slowdown.first_slow, -1);
  EXPECT_EQ(find(a, "slowing down"), nullptr);
}

TEST(Slowdown, SteadyRunAndJitterAreNoSlowdown) {
  const CurveAnalysis a = analyze_curves(steady(500, 100), {}, {}, 50, Thresholds{});
  EXPECT_EQ(a.slowdown.segments.size(), 5u);
  EXPECT_LT(std::fabs(a.slowdown.step_rise), 0.03);
  EXPECT_EQ(a.findings.size(), 0u);
}

TEST(Slowdown, OneEpochIsSplitInQuarters) {
  const auto pts = run(400, 1000, 100, 1, [](int64_t) { return 1.0; });
  std::vector<TimelinePoint> slow = pts;
  for (size_t i = 200; i < slow.size(); ++i) slow[i].step_ms *= 1.3;
  const CurveAnalysis a = analyze_curves(slow, {}, {}, 40, Thresholds{});
  EXPECT_FALSE(a.slowdown.by_epoch);
  ASSERT_EQ(a.slowdown.segments.size(), 4u);
  EXPECT_EQ(a.slowdown.segments[2].label, "steps 201..300");
  EXPECT_EQ(a.slowdown.first_slow, 2);
}

TEST(Slowdown, ARiseWithinTheStepsOwnJitterIsNoTrend) {
  // A small model's 2 ms steps: 30 % of them take 3.6 ms (p90 / median - 1 = 0.8). The last
  // quarter's median rises to 3.0 ms (+50 %), still inside that spread: seen on an H100 as a
  // "slowing down (high)" of a 60-step run, which was the jitter.
  std::vector<TimelinePoint> pts = steady(400, 2);
  for (size_t i = 0; i < pts.size(); ++i) {
    pts[i].step_ms = i % 10 < 3 ? 3.6 : (i >= 300 ? 3.0 : 2.0);
    pts[i].epoch = 0;
  }
  const SlowdownStats s = detect_slowdown(pts, Thresholds{});
  EXPECT_NEAR(s.jitter, 0.8, 1e-9);
  EXPECT_NEAR(s.step_rise, 0.5, 1e-9);
  EXPECT_EQ(s.first_slow, -1);
  EXPECT_EQ(find(analyze_curves(pts, {}, {}, 1, Thresholds{}), "slowing down"), nullptr);
  // The same rise from a steady start is a trend.
  for (size_t i = 0; i < pts.size(); ++i) pts[i].step_ms = i >= 300 ? 3.0 : 2.0;
  EXPECT_EQ(detect_slowdown(pts, Thresholds{}).first_slow, 3);
}

TEST(Slowdown, ShortEpochsAreLeftOut) {
  // A max_steps run: epoch 1 has 3 steps only, far slower (cold cache) — not a trend.
  std::vector<TimelinePoint> pts = steady(103, 100);
  for (size_t i = 100; i < pts.size(); ++i) pts[i].step_ms = 500;
  const SlowdownStats s = detect_slowdown(pts, Thresholds{});
  EXPECT_FALSE(s.by_epoch);  // one epoch with enough steps: quarters
  EXPECT_EQ(s.segments.size(), 4u);
}

TEST(Evaluation, ShareOfTheWallTime) {
  const std::vector<EvalSpan> evals = {{100, 12, 3}, {200, 24, 3}, {300, 36, 3}};
  CurveAnalysis a = analyze_curves(steady(300, 100), {}, evals, 36, Thresholds{});
  EXPECT_EQ(a.evaluations, 3);
  EXPECT_NEAR(a.eval_share, 0.25, 1e-12);
  const CurveFinding* f = find(a, "evaluation-heavy");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->level, Level::high);
  EXPECT_NE(f->advice.find("EvalOptions::every_steps"), std::string::npos);
  // 3 s of 60: 5 %, no finding.
  a = analyze_curves(steady(300, 100), {}, {{300, 60, 3}}, 60, Thresholds{});
  EXPECT_EQ(find(a, "evaluation-heavy"), nullptr);
  EXPECT_NE(a.text().find("evaluation: 5 % of the wall time"), std::string::npos) << a.text();
}

TEST(Curves, FindingsStrongestFirstAndInTheReportText) {
  const std::vector<EvalSpan> evals = {{100, 10, 1.2}};  // 12 %: moderate
  const CurveAnalysis a =
      analyze_curves(steady(200, 200), bursts(8, 6, 4), evals, 10, Thresholds{});
  ASSERT_EQ(a.findings.size(), 2u);
  EXPECT_EQ(a.findings[0].what, "saw-tooth utilization");  // high
  EXPECT_EQ(a.findings[1].what, "evaluation-heavy");       // moderate
  Report r;
  r.curves = a;
  const std::string text = r.text();
  EXPECT_NE(text.find("diag  finding: saw-tooth utilization (high)"), std::string::npos) << text;
  EXPECT_NE(r.json().find("\"saw-tooth utilization\""), std::string::npos);
}

TEST(SeriesBuffer, HalvesItsResolutionAndKeepsTheWholeSpan) {
  SeriesBuffer<int> b(8);
  for (int i = 0; i < 100; ++i) b.push(i);
  const std::vector<int>& v = b.items();
  ASSERT_LE(v.size(), 8u);
  EXPECT_EQ(v.front(), 0);
  EXPECT_GE(v.back(), 100 - 2 * b.stride());  // the latest items are still there
  for (size_t i = 1; i < v.size(); ++i) EXPECT_EQ(v[i] - v[i - 1], b.stride()) << i;
}

TEST(Csv, TimelineHasAHeaderAndEmptyUnknowns) {
  std::vector<TimelinePoint> pts = steady(3, 10);
  pts[1].loss = 2.5;
  pts[2].device_ms = 90.5;
  const std::string csv = timeline_csv(pts);
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "step,epoch,time_s,step_ms,data_wait_ms,device_ms,samples,loss");
  std::getline(in, line);
  EXPECT_EQ(line.substr(line.size() - 4), ",32,");  // no device time, no loss
  std::getline(in, line);
  EXPECT_NE(line.find(",32,2.5"), std::string::npos) << line;
  std::getline(in, line);
  EXPECT_NE(line.find(",90.500,32,"), std::string::npos) << line;
}

TEST(Csv, GpuSamplesRelativeToTheFitStart) {
  GpuSample s;
  s.time_ms = 1500;
  s.util_gpu = 97;
  s.power_w = 612.25;
  s.clock_events = static_cast<int64_t>(clock_event::kSwPowerCap | clock_event::kGpuIdle);
  s.memory_used_mib = 1024;
  const std::string csv = gpu_samples_csv({s}, 1000);
  const std::string row = csv.substr(csv.find('\n') + 1);
  EXPECT_EQ(row.substr(0, 9), "0.500,97,");
  EXPECT_NE(row.find(",612.2,"), std::string::npos) << row;  // 0.25 rounds to even
  EXPECT_NE(row.find(",1024,"), std::string::npos) << row;
  EXPECT_NE(row.find(",5,power cap\n"), std::string::npos) << row;  // idle bit not a slowdown
}

}  // namespace
}  // namespace stoker::diag
