// Baseline cards: round trip through JSON, and the comparison flags changes beyond the measured
// noise only.
#include "diag/baseline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "diag/breakdown.h"
#include "diag/step_timer.h"
#include "stoker/core/error.h"

namespace diag = stoker::diag;
using diag::Phase;

namespace {

// Steps of a CPU run: forward `fwd` ms with a +-`noise` ms zig-zag, the rest fixed.
std::vector<diag::StepSample> run(double fwd, double noise, int n = 200) {
  std::vector<diag::StepSample> out;
  for (int i = 0; i < n; ++i) {
    diag::StepSample s;
    s.step = i;
    s.host[static_cast<int>(Phase::data)] = 1.0;
    s.host[static_cast<int>(Phase::forward)] = fwd + ((i / 7) % 2 ? noise : -noise);
    s.host[static_cast<int>(Phase::backward)] = 2 * fwd;
    s.host[static_cast<int>(Phase::optimizer)] = 0.5;
    s.host_ms = 1.5 + 3 * fwd;
    s.samples = 32;
    out.push_back(s);
  }
  return out;
}

diag::Environment env() {
  diag::Environment e = diag::collect_environment(stoker::Device::cpu(), {{"model", "mlp"}});
  e.date = "2026-11-29T00:00:00Z";
  return e;
}

}  // namespace

TEST(Baseline, EnvironmentIsCollected) {
  const diag::Environment e = diag::collect_environment(stoker::Device::cpu(), {{"batch", "64"}});
  EXPECT_GT(e.cpu_count, 0);
  EXPECT_FALSE(e.cpu.empty());
  EXPECT_EQ(e.device, "cpu");
  EXPECT_FALSE(e.stoker_version.empty());
  EXPECT_EQ(e.run.at("batch"), "64");
  EXPECT_EQ(e.date.size(), 20u);  // 2026-11-29T12:34:56Z
}

TEST(Baseline, CardRoundTrip) {
  const auto card = diag::make_card(env(), run(10, 0.1), "compute-bound");
  EXPECT_EQ(card.timing, "host");
  EXPECT_EQ(card.steps, 200);
  const diag::MetricCard* fwd = card.find("forward");
  ASSERT_NE(fwd, nullptr);
  EXPECT_NEAR(fwd->median_ms, 10, 0.11);
  EXPECT_EQ(fwd->chunk_medians_ms.size(), static_cast<size_t>(diag::kChunks));
  EXPECT_NE(card.find("step"), nullptr);
  EXPECT_NE(card.find("comm"), nullptr);
  EXPECT_EQ(card.find("launch"), nullptr);  // not measured on the CPU

  const auto path = std::filesystem::temp_directory_path() /
                    ("stoker_card_" + std::to_string(::getpid()) + ".json");
  diag::save_card(path, card);
  {
    std::ifstream f(path);
    const auto j = nlohmann::json::parse(f);
    EXPECT_EQ(j["stoker_baseline_card"], 1);
    EXPECT_EQ(j["environment"]["run"]["model"], "mlp");
    EXPECT_GT(j["environment"]["cpu_count"].get<int>(), 0);
  }
  const auto back = diag::load_card(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.env.cpu, card.env.cpu);
  EXPECT_EQ(back.verdict, "compute-bound");
  ASSERT_EQ(back.metrics.size(), card.metrics.size());
  EXPECT_DOUBLE_EQ(back.find("forward")->median_ms, fwd->median_ms);
  EXPECT_DOUBLE_EQ(back.find("forward")->noise_ms, fwd->noise_ms);

  EXPECT_THROW(diag::parse_card("{\"x\": 1}"), stoker::Error);
  EXPECT_THROW(diag::parse_card("not json"), stoker::Error);
  EXPECT_THROW(diag::load_card("/nonexistent/card.json"), stoker::Error);
}

TEST(Baseline, FlagsOnlyChangesBeyondTheNoise) {
  const auto before = diag::make_card(env(), run(10, 0.05), "compute-bound");
  // Same run again: nothing flagged.
  const auto same = diag::compare_cards(before, diag::make_card(env(), run(10, 0.05), ""));
  EXPECT_EQ(same.slower(), 0);
  EXPECT_EQ(same.faster(), 0);
  EXPECT_TRUE(same.environment_changes.empty());
  // Forward 10 % slower (backward and step follow): flagged.
  const auto slower = diag::compare_cards(before, diag::make_card(env(), run(11, 0.05), ""));
  EXPECT_GE(slower.slower(), 2);
  bool forward_flagged = false;
  for (const auto& m : slower.metrics)
    if (m.name == "forward") forward_flagged = m.significant && m.change > 0.09;
  EXPECT_TRUE(forward_flagged);
  EXPECT_NE(slower.text().find("SLOWER"), std::string::npos);
  // 1.5 % faster: below the 2 % floor, not flagged.
  EXPECT_EQ(diag::compare_cards(before, diag::make_card(env(), run(9.85, 0.05), "")).faster(), 0);
  // A noisy baseline: chunk medians alternate by +-2 ms, so a 3 % change is within the noise.
  std::vector<diag::StepSample> noisy = run(10, 0);
  for (size_t i = 0; i < noisy.size(); ++i)
    noisy[i].host[static_cast<int>(Phase::forward)] += (i / 20) % 2 ? 2.0 : -2.0;
  const auto noisy_card = diag::make_card(env(), noisy, "");
  EXPECT_GT(noisy_card.find("forward")->noise_ms, 1.0);
  const auto within = diag::compare_cards(noisy_card, diag::make_card(env(), run(10.3, 0), ""));
  for (const auto& m : within.metrics)
    if (m.name == "forward") EXPECT_FALSE(m.significant) << m.noise_ms;
  // Environment changes are listed.
  auto other = diag::make_card(env(), run(10, 0.05), "");
  other.env.driver = "999.1";
  other.env.run["model"] = "cnn";
  const auto changed = diag::compare_cards(before, other);
  ASSERT_EQ(changed.environment_changes.size(), 2u);
  EXPECT_NE(changed.text().find("environment changed: driver"), std::string::npos);
}
