// StepTimer on the CPU: phases are wall-clock spans between marks, repeated phases add up,
// steps come out in order, a cancelled step leaves nothing behind.
#include "diag/step_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace diag = stoker::diag;
using diag::Phase;
using stoker::Device;

namespace {
void busy_for_ms(double ms) {
  const double until = diag::now_ms() + ms;
  while (diag::now_ms() < until) {
  }
}
}  // namespace

TEST(StepTimer, PhasesAreHostSpansOnTheCpu) {
  diag::StepTimer t(Device::cpu());
  EXPECT_FALSE(t.device_timing());
  t.begin(Phase::forward);  // outside a step: ignored
  t.begin_step(7);
  EXPECT_TRUE(t.in_step());
  busy_for_ms(4);  // data
  t.begin(Phase::forward);
  busy_for_ms(2);
  t.begin(Phase::backward);
  busy_for_ms(3);
  t.begin(Phase::data);  // second micro-step
  busy_for_ms(1);
  t.begin(Phase::forward);
  busy_for_ms(2);
  t.begin(Phase::backward);
  busy_for_ms(3);
  t.begin(Phase::optimizer);
  busy_for_ms(1);
  t.end_step(64);
  EXPECT_FALSE(t.in_step());
  const auto steps = t.completed();
  ASSERT_EQ(steps.size(), 1u);
  const diag::StepSample& s = steps[0];
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.samples, 64);
  EXPECT_EQ(s.micro_steps, 2);
  EXPECT_FALSE(s.has_device);
  EXPECT_LT(s.launch_ms, 0);
  EXPECT_EQ(s.host_syncs, 0);
  const auto at = [&](Phase p) { return s.host[static_cast<int>(p)]; };
  // Lower bounds only: a loaded machine may preempt the busy loops, never shorten them.
  EXPECT_GE(at(Phase::data), 5);
  EXPECT_GE(at(Phase::forward), 4);
  EXPECT_GE(at(Phase::backward), 6);
  EXPECT_GE(at(Phase::optimizer), 1);
  EXPECT_LT(at(Phase::data), 1000);
  EXPECT_DOUBLE_EQ(at(Phase::comm), 0);
  double sum = 0;
  for (double v : s.host) sum += v;
  EXPECT_NEAR(sum, s.host_ms, 1e-9);  // every instant of the step is in exactly one phase
  ASSERT_EQ(s.marks.size(), 8u);
  EXPECT_TRUE(s.marks.back().end);
  EXPECT_TRUE(t.completed().empty());
}

TEST(StepTimer, OrderCancelAndAbandonedSteps) {
  diag::StepTimer t(Device::cpu());
  for (int i = 0; i < 3; ++i) {
    t.begin_step(i);
    t.begin(Phase::forward);
    t.begin(Phase::optimizer);
    t.end_step(1);
  }
  t.begin_step(3);
  t.cancel_step();  // the epoch had no batch left
  EXPECT_FALSE(t.in_step());
  t.begin_step(4);  // abandoned (an exception inside the step) ...
  t.begin_step(5);  // ... and dropped when the next one opens
  t.end_step(1);
  const auto steps = t.completed();
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].step, 0);
  EXPECT_EQ(steps[2].step, 2);
  EXPECT_EQ(steps[3].step, 5);
  EXPECT_EQ(t.dropped(), 0);
}

TEST(StepTimer, PhaseNames) {
  EXPECT_STREQ(diag::phase_name(Phase::data), "data");
  EXPECT_STREQ(diag::phase_name(Phase::comm), "comm");
  EXPECT_STREQ(diag::phase_name(Phase::optimizer), "optimizer");
  const double a = diag::now_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(diag::now_ms() - a, 1.9);
}
