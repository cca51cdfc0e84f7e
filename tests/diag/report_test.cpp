// The verdict rules on recorded timings: one window per verdict, the thresholds' edges, and
// the numbers the advice quotes.
#include "stoker/diag/report.h"
#include "diag/breakdown.h"
#include "diag/step_timer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace diag = stoker::diag;
using diag::Level;
using diag::Phase;
using diag::Verdict;

namespace {

// One recorded step: per-phase milliseconds (data, forward, backward, comm, optimizer).
struct Recorded {
  double data, forward, backward, comm, optimizer;
  double launch = -1;  // host-paced device time (GPU)
};

// `n` steps of the recorded timings as host spans (CPU) or as device spans (GPU, where the host
// step is the sum of the phases and the launch time is known).
std::vector<diag::StepSample> window(const Recorded& r, bool gpu, int n = 20,
                                     int64_t samples = 256) {
  std::vector<diag::StepSample> out;
  for (int i = 0; i < n; ++i) {
    diag::StepSample s;
    s.step = 100 + i;
    const double jitter = 1.0 + 0.01 * (i % 5);  // a little noise, as recorded runs have
    const double phases[] = {r.data, r.forward, r.backward, r.comm, r.optimizer};
    double total = 0;
    for (int p = 0; p < diag::kPhaseCount; ++p) {
      s.host[p] = phases[p] * jitter;
      total += s.host[p];
    }
    s.host_ms = total + 0.01;
    if (gpu) {
      s.has_device = true;
      s.device = s.host;
      s.launch_ms = r.launch * jitter;
    }
    s.samples = samples;
    s.micro_steps = 1;
    out.push_back(s);
  }
  return out;
}

diag::Report report_of(const std::vector<diag::StepSample>& steps, diag::LoaderView loader = {},
                       diag::GpuHealth gpu = {}) {
  return diag::make_report(diag::summarize(steps), loader, gpu);
}

}  // namespace

TEST(Summarize, MedianP90AndShares) {
  const double v[] = {5, 1, 4, 2, 3, 10, 6, 7, 8, 9};
  const diag::PhaseStat s = diag::summarize_values(v);
  EXPECT_DOUBLE_EQ(s.median_ms, 5.5);
  EXPECT_DOUBLE_EQ(s.p90_ms, 9);  // nearest rank: 9 of 10 values are <= 9
  EXPECT_DOUBLE_EQ(s.mean_ms, 5.5);
  const auto b = diag::summarize(window({10, 30, 50, 0, 10}, false));
  EXPECT_EQ(b.steps, 20);
  EXPECT_EQ(b.first_step, 100);
  EXPECT_EQ(b.last_step, 119);
  EXPECT_FALSE(b.device_timed);
  EXPECT_NEAR(b.input_share, 0.1, 1e-3);
  EXPECT_NEAR(b.host_data_share, 0.1, 1e-3);
  EXPECT_NEAR(b.compute_share, 0.9, 1e-3);
  EXPECT_EQ(b.samples, 20 * 256);
  // 256 samples per ~100 ms step; if data never waited: per ~90 ms.
  EXPECT_NEAR(b.samples_per_s, 256 / 0.1024, 30);
  EXPECT_NEAR(b.demand_samples_per_s, b.samples_per_s / 0.9, 30);
}

TEST(Verdict, ComputeBound) {
  const auto r = report_of(window({0.2, 30, 55, 0, 8, 0.5}, true));
  EXPECT_EQ(r.verdict, Verdict::compute_bound);
  EXPECT_EQ(r.level, Level::none);
  EXPECT_NE(r.headline.find("compute-bound"), std::string::npos) << r.headline;
  EXPECT_GT(r.breakdown.compute_share, 0.95);
}

TEST(Verdict, InputBoundHighWithLoaderAdvice) {
  diag::LoaderView l;
  l.present = l.is_loader = true;
  l.kind = "Loader";
  l.threads = 1;
  l.max_threads = 16;
  l.prefetch = 4;
  l.threads_fixed = true;
  l.cpu_count = 16;
  l.worker_s_per_sample = 0.0032;  // 3.2 ms of thread time per image
  l.decode_ms = 2.9;
  l.capacity_samples_per_s = 1 / 0.0032;
  const auto r = report_of(window({60, 10, 20, 0, 5}, false), l);
  EXPECT_EQ(r.verdict, Verdict::input_bound);
  EXPECT_EQ(r.level, Level::high);
  ASSERT_FALSE(r.advice.empty());
  const std::string& a = r.advice.front();
  EXPECT_NE(a.find("loader delivers"), std::string::npos) << a;
  EXPECT_NE(a.find("the model consumes"), std::string::npos) << a;
  EXPECT_NE(a.find("raise LoaderOptions::threads"), std::string::npos) << a;
  EXPECT_NE(a.find("pack smaller images"), std::string::npos) << a;
  // Demand: 256 samples per ~35 ms of non-input step ≈ 7,300/s; needs ceil(7300*0.0032*1.25)
  // = 30 threads, capped at the 16 hardware threads.
  EXPECT_NE(a.find("threads to 16"), std::string::npos) << a;
}

TEST(Verdict, InputModerateAndThresholdEdges) {
  // 4.9 % of the step: not a finding; 5 %: moderate; 20 %: high.
  auto at = [](double share) {
    const double rest = 100.0 * (1 - share);
    diag::Breakdown b = diag::summarize(window({0, rest, 0, 0, 0}, false));
    b.input_share = share;
    b.compute_share = 1 - share;
    return diag::make_report(b, {}, {});
  };
  EXPECT_EQ(at(0.049).verdict, Verdict::compute_bound);
  EXPECT_EQ(at(0.05).verdict, Verdict::input_bound);
  EXPECT_EQ(at(0.05).level, Level::moderate);
  EXPECT_EQ(at(0.199).level, Level::moderate);
  EXPECT_EQ(at(0.20).level, Level::high);
  const auto r = report_of(window({8, 40, 45, 0, 7}, false));
  EXPECT_EQ(r.verdict, Verdict::input_bound);
  EXPECT_EQ(r.level, Level::moderate);
  // A data source that is not a Loader gets generic advice with its rates.
  ASSERT_FALSE(r.advice.empty());
  EXPECT_NE(r.advice.front().find("samples/s, the model consumes"), std::string::npos);
}

TEST(Verdict, LaunchBound) {
  // Many tiny kernels: the device finished each interval as soon as the host launched it, for
  // 6 of the 9 ms of every step (well above 15 %); data and communication are small.
  const auto r = report_of(window({0.1, 3, 4, 0, 2, 6}, true));
  EXPECT_EQ(r.verdict, Verdict::launch_bound);
  EXPECT_EQ(r.level, Level::high);
  EXPECT_TRUE(r.breakdown.launch_known);
  EXPECT_NEAR(r.breakdown.launch_share, 6.0 / 9.11, 0.01);
  ASSERT_FALSE(r.advice.empty());
  EXPECT_NE(r.advice.front().find("CUDA graph (TrainerOptions::cuda_graph; --cuda-graph in the "
                                  "example trainers)"),
            std::string::npos)
      << r.advice.front();
  // 2 % host-paced: below the moderate threshold (3 %), so compute-bound.
  EXPECT_EQ(report_of(window({0.1, 30, 50, 0, 19.9, 2}, true)).verdict, Verdict::compute_bound);
  EXPECT_EQ(report_of(window({0.1, 30, 50, 0, 19.9, 4}, true)).level, Level::moderate);
}

TEST(Verdict, CommunicationBound) {
  const auto r = report_of(window({0.3, 20, 40, 25, 5, 0.5}, true));
  EXPECT_EQ(r.verdict, Verdict::communication_bound);
  EXPECT_EQ(r.level, Level::high);
  EXPECT_NEAR(r.breakdown.comm_share, 25.0 / 90.3, 0.01);
  EXPECT_NE(r.headline.find("exposed per step"), std::string::npos);
  EXPECT_NE(r.advice.front().find("bucket"), std::string::npos);
  // The largest high share wins: input 30 % beats communication 20 %.
  EXPECT_EQ(report_of(window({30, 20, 25, 20, 5, 0}, true)).verdict, Verdict::input_bound);
}

TEST(Verdict, Throttled) {
  diag::GpuHealth g;
  g.available = true;
  g.samples = g.busy_samples = 50;
  g.sm_clock_mhz = 1400;
  g.sm_clock_max_mhz = 1980;
  g.slowdown_share = 0.6;
  g.power_cap_share = 0.6;
  const auto r = report_of(window({0.2, 30, 55, 0, 8, 0.5}, true), {}, g);
  EXPECT_EQ(r.verdict, Verdict::throttled);
  EXPECT_EQ(r.level, Level::high);  // 71 % of the maximum clock
  EXPECT_NE(r.headline.find("1,400 of 1,980 MHz"), std::string::npos) << r.headline;
  // Clocks near the maximum, or few slowdown samples: not throttled.
  g.sm_clock_mhz = 1900;
  EXPECT_EQ(report_of(window({0.2, 30, 55, 0, 8}, true), {}, g).verdict, Verdict::compute_bound);
  g.sm_clock_mhz = 1400;
  g.slowdown_share = 0.1;
  EXPECT_EQ(report_of(window({0.2, 30, 55, 0, 8}, true), {}, g).verdict, Verdict::compute_bound);
  // A high input share outranks throttling; a moderate one does not.
  g.slowdown_share = 0.6;
  EXPECT_EQ(report_of(window({40, 30, 25, 0, 5}, true), {}, g).verdict, Verdict::input_bound);
  EXPECT_EQ(report_of(window({8, 40, 45, 0, 7}, true), {}, g).verdict, Verdict::throttled);
}

TEST(Report, TextAndJson) {
  auto r = report_of(window({60, 10, 20, 0, 5}, false));
  r.device = "cpu";
  const std::string text = r.text();
  EXPECT_NE(text.find("verdict: input-bound (high)"), std::string::npos) << text;
  for (const char* phase : {"data", "forward", "backward", "comm", "optimizer", "other"})
    EXPECT_NE(text.find(std::string("  ") + phase), std::string::npos) << phase;
  const auto j = nlohmann::json::parse(r.json());
  EXPECT_EQ(j["verdict"], "input-bound");
  EXPECT_EQ(j["level"], "high");
  EXPECT_EQ(j["steps"], 20);
  EXPECT_NEAR(j["shares"]["input"].get<double>(), 60.0 / 95.0, 0.01);
  EXPECT_TRUE(j["phases"].contains("forward"));
  EXPECT_FALSE(j["gpu"]["available"].get<bool>());
}

TEST(Report, FormatCount) {
  EXPECT_EQ(diag::format_count(3100), "3,100");
  EXPECT_EQ(diag::format_count(5400.4), "5,400");
  EXPECT_EQ(diag::format_count(999), "999");
  EXPECT_EQ(diag::format_count(1234567), "1,234,567");
  EXPECT_EQ(diag::format_count(-1500), "-1,500");
  EXPECT_EQ(diag::format_count(0), "0");
}

TEST(Report, EmptyWindow) {
  const auto r = report_of({});
  EXPECT_EQ(r.breakdown.steps, 0);
  EXPECT_NE(r.headline.find("no timed steps"), std::string::npos);
}
