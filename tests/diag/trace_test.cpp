// TraceWriter: Chrome trace-event JSON that parses, with spans in microseconds, counters and
// track names; the file is written atomically.
#include "diag/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace diag = stoker::diag;

TEST(Trace, EventsInChromeFormat) {
  diag::TraceWriter t;
  t.process_name(1, "host");
  t.thread_name(1, 1, "training thread");
  t.complete("forward", "phase", 1, 1, 10.0, 2.5, {{"step", 3}});
  t.counter("loader busy threads", 3, 12.0, {{"decode", 0.9}, {"read", 0.1}});
  EXPECT_EQ(t.size(), 4u);
  const auto j = nlohmann::json::parse(t.json());
  ASSERT_EQ(j["traceEvents"].size(), 4u);
  const auto& m = j["traceEvents"][0];
  EXPECT_EQ(m["ph"], "M");
  EXPECT_EQ(m["args"]["name"], "host");
  const auto& x = j["traceEvents"][2];
  EXPECT_EQ(x["ph"], "X");
  EXPECT_EQ(x["name"], "forward");
  EXPECT_EQ(x["cat"], "phase");
  EXPECT_DOUBLE_EQ(x["ts"].get<double>(), 10000.0);  // microseconds
  EXPECT_DOUBLE_EQ(x["dur"].get<double>(), 2500.0);
  EXPECT_EQ(x["args"]["step"], 3);
  const auto& c = j["traceEvents"][3];
  EXPECT_EQ(c["ph"], "C");
  EXPECT_DOUBLE_EQ(c["args"]["decode"].get<double>(), 0.9);
  EXPECT_EQ(j["displayTimeUnit"], "ms");
}

TEST(Trace, BoundedThreadSafeAndWrittenAtomically) {
  diag::TraceWriter t(1000);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 400; ++i) t.complete("x", "", 1, k, i, 1);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.size(), 1000u);
  EXPECT_EQ(t.dropped(), 600);
  const auto path = std::filesystem::temp_directory_path() /
                    ("stoker_trace_" + std::to_string(::getpid())) / "t.json";
  t.write(path);
  std::ifstream f(path);
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["traceEvents"].size(), 1000u);
  EXPECT_EQ(j["otherData"]["dropped_events"], 600);
  std::filesystem::remove_all(path.parent_path());
}
