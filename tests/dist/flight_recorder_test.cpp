// Hangs become errors: sequence numbers, the flight recorder (and its file), the collective
// timeout naming the ranks that had not reached a collective (thread and TCP backends), the NCCL
// watchdog's policy on recorded timings, STOKER_COLLECTIVE_TIMEOUT.
#include "dist/flight_recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "dist/tcp_communicator.h"
#include "dist/thread_communicator.h"
#include "dist/watchdog_policy.h"
#include "dist_test_util.h"
#include "stoker/dist/env.h"
#include "stoker/dist/grad_sync.h"
#include "stoker/dist/launcher.h"
#include "test_util.h"

namespace dist = stoker::dist;
namespace fs = std::filesystem;
using dist::CollectiveRecord;
using dist::CollectiveState;
using dist::ReduceOp;
using dist::WatchdogDecision;
using dist::WatchdogPolicy;
using stoker::DType;
using stoker::Tensor;
using stoker::test::error_of;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_flight_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return nlohmann::json::parse(in);
}

// What each rank saw: its error, when it failed (seconds after the hanging collective began),
// and its flight recorder's entries at that moment.
struct RankOutcome {
  std::string error = "(no error)";
  double failed_after_s = 0.0;
  std::vector<CollectiveRecord> entries;
};

// Three collectives every rank issues (seq 1..3), the third tagged, then the hanging one.
void warm_up(dist::Communicator& comm) {
  comm.all_reduce(Tensor::zeros({10}, DType::f32));          // #1: 40 bytes
  comm.broadcast(Tensor::zeros({3}, DType::i64), 1);         // #2: 24 bytes
  const dist::CollectiveTag tag(comm, "warm-up bucket", 7);  // #3 tagged
  comm.all_gather(Tensor::zeros({2}, DType::bf16), Tensor::zeros({6}, DType::bf16));
}

// Rank `hung` stops issuing collectives (sleeps `sleep_s`); the others call a 4th. fn runs each
// rank's body with its communicator.
RankOutcome rank_body(dist::Communicator& comm, int hung, double sleep_s) {
  RankOutcome o;
  warm_up(comm);
  if (comm.rank() == hung) {
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
    o.entries = comm.flight_recorder().entries();
    return o;
  }
  const auto start = Clock::now();
  o.error = error_of([&] { comm.all_reduce(Tensor::zeros({5}, DType::f32), ReduceOp::max); });
  o.failed_after_s = seconds_since(start);
  o.entries = comm.flight_recorder().entries();
  return o;
}

void expect_warm_up_then_failed_all_reduce(const std::vector<CollectiveRecord>& e) {
  ASSERT_EQ(e.size(), 4u);
  for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i].seq, i + 1);
  EXPECT_STREQ(e[0].op, "all_reduce");
  EXPECT_EQ(e[0].bytes, 40);
  EXPECT_STREQ(e[0].reduce_op, "sum");
  EXPECT_STREQ(e[1].op, "broadcast");
  EXPECT_EQ(e[1].bytes, 24);
  EXPECT_EQ(e[1].root, 1);
  EXPECT_EQ(e[1].dtype, DType::i64);
  EXPECT_STREQ(e[2].op, "all_gather");
  EXPECT_EQ(e[2].tag_view(), "warm-up bucket 7");
  EXPECT_STREQ(e[3].op, "all_reduce");
  EXPECT_EQ(e[3].bytes, 20);
  EXPECT_EQ(e[3].tag_view(), "");  // the tag's scope ended
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(e[i].state, CollectiveState::completed);
    EXPECT_GT(e[i].end_ns, 0);
    EXPECT_LE(e[i].enqueue_ns, e[i].start_ns);
    EXPECT_LE(e[i].start_ns, e[i].end_ns);
    if (i > 0) EXPECT_LE(e[i - 1].end_ns, e[i].enqueue_ns);
  }
  EXPECT_EQ(e[3].state, CollectiveState::failed);
}

void expect_file(const fs::path& dir, int rank, int world, const std::string& reason_has) {
  const nlohmann::json j = read_json(dir / ("rank" + std::to_string(rank) + ".json"));
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["rank"], rank);
  EXPECT_EQ(j["world_size"], world);
  EXPECT_EQ(j["recorded"], 4);
  EXPECT_EQ(j["capacity"], 2048);
  EXPECT_NE(j["reason"].get<std::string>().find(reason_has), std::string::npos) << j["reason"];
  ASSERT_EQ(j["entries"].size(), 4u);
  const nlohmann::json& last = j["entries"][3];
  EXPECT_EQ(last["seq"], 4);
  EXPECT_EQ(last["op"], "all_reduce");
  EXPECT_EQ(last["dtype"], "f32");
  EXPECT_EQ(last["numel"], 5);
  EXPECT_EQ(last["bytes"], 20);
  EXPECT_EQ(last["reduce_op"], "max");
  EXPECT_EQ(last["state"], "failed");
  EXPECT_GT(last["enqueue_us"].get<int64_t>(), 0);
  EXPECT_GE(last["end_us"].get<int64_t>(), last["enqueue_us"].get<int64_t>());
  EXPECT_EQ(j["entries"][2]["tag"], "warm-up bucket 7");
  EXPECT_EQ(j["entries"][1]["root"], 1);
  EXPECT_EQ(j["entries"][0]["state"], "completed");
}

}  // namespace

TEST(FlightRecorderTest, ThreadBackendTimeoutNamesTheRankThatStopped) {
  const double timeout = 1.0;
  const fs::path dir = scratch("threads");
  auto group = std::make_shared<dist::ThreadGroup>(
      3, dist::ThreadGroupOptions{.timeout_s = timeout, .flight_recorder = {.dir = dir.string()}});
  std::vector<RankOutcome> out(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      dist::ThreadCommunicator comm(group, r);
      out[r] = rank_body(comm, 2, timeout + 1.5);
    });
  for (auto& t : threads) t.join();
  for (int r : {0, 1}) {
    const std::string& e = out[r].error;
    EXPECT_LT(out[r].failed_after_s, timeout + 2.0) << "rank " << r;
    EXPECT_NE(e.find("for rank 2 (world size 3)"), std::string::npos) << e;
    EXPECT_NE(e.find("collective #4 all_reduce(f32 x 5, max, 20 bytes)"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 2 #3"), std::string::npos) << e;  // the last one rank 2 reached
    expect_warm_up_then_failed_all_reduce(out[r].entries);
    expect_file(dir, r, 3, "for rank 2");
  }
  EXPECT_EQ(out[2].entries.size(), 3u);
  EXPECT_FALSE(fs::exists(dir / "rank2.json"));  // rank 2 did not fail
  fs::remove_all(dir);
}

namespace {

// Ranks as threads, each with its own TcpCommunicator (sockets), collective timeout `timeout`.
std::vector<RankOutcome> run_tcp_hang(int world, int hung, double timeout, const fs::path& dir) {
  const int port = stoker::test::free_port();
  std::vector<std::future<RankOutcome>> f;
  for (int r = 0; r < world; ++r)
    f.push_back(std::async(std::launch::async, [=] {
      RankOutcome o;
      const std::string setup = error_of([&] {
        dist::TcpCommunicator comm(
            r, world,
            {.rendezvous = {.master_addr = "127.0.0.1", .master_port = port, .timeout_s = 10},
             .timeout_s = timeout,
             .flight_recorder = {.dir = dir.string()}});
        o = rank_body(comm, hung, timeout + 3.5);
      });
      EXPECT_EQ(setup, "(no error)") << "rank " << r;
      return o;
    }));
  std::vector<RankOutcome> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

}  // namespace

TEST(FlightRecorderTest, TcpTimeoutNamesTheRankThatStopped) {
  const double timeout = 1.0;
  const fs::path dir = scratch("tcp");
  const std::vector<RankOutcome> out = run_tcp_hang(3, 2, timeout, dir);
  for (int r : {0, 1}) {
    const std::string& e = out[r].error;
    EXPECT_LT(out[r].failed_after_s, timeout + 2.0) << "rank " << r << ": " << e;
    EXPECT_NE(e.find("rank 0 waited 1 s (collective timeout) in collective #4 all_reduce(f32 x 5, "
                     "max, 20 bytes) for rank 2 (world size 3), which had not reached it"),
              std::string::npos)
        << e;
    // The rank blamed may be alive behind a cut link: the message says so too.
    EXPECT_NE(e.find("or the network between it and rank 0 is down (a cut link, a firewall"),
              std::string::npos)
        << e;
    expect_warm_up_then_failed_all_reduce(out[r].entries);
    expect_file(dir, r, 3, "for rank 2");
  }
  EXPECT_NE(out[1].error.find("rank 0 reports"), std::string::npos) << out[1].error;
  fs::remove_all(dir);
}

TEST(FlightRecorderTest, TcpTimeoutNamesEveryMissingRank) {
  // Ranks 2 and 3 stop; rank 0 names both (rank 3 had sent nothing either).
  const int port = stoker::test::free_port();
  std::vector<std::future<std::string>> f;
  for (int r = 0; r < 4; ++r)
    f.push_back(std::async(std::launch::async, [=] {
      return error_of([&] {
        dist::TcpCommunicator comm(
            r, 4,
            {.rendezvous = {.master_addr = "127.0.0.1", .master_port = port, .timeout_s = 10},
             .timeout_s = 0.5});
        comm.barrier();
        if (r >= 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));
          return;
        }
        comm.all_reduce(Tensor::zeros({4}, DType::f32));
      });
    }));
  std::vector<std::string> errors;
  for (auto& x : f) errors.push_back(x.get());
  for (int r : {0, 1})
    EXPECT_NE(errors[r].find("for ranks 2, 3 (world size 4)"), std::string::npos) << errors[r];
}

TEST(FlightRecorderTest, TcpRanksNameRankZeroWhenItStops) {
  const double timeout = 0.5;
  const std::vector<RankOutcome> out = run_tcp_hang(3, 0, timeout, {});
  for (int r : {1, 2}) {
    const std::string& e = out[r].error;
    // Rank 0 gets a grace of 2 s to report someone else first.
    EXPECT_LT(out[r].failed_after_s, timeout + 3.0) << "rank " << r << ": " << e;
    EXPECT_NE(e.find("in collective #4 all_reduce(f32 x 5, max, 20 bytes) for rank 0 (world size "
                     "3), which had not answered"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("or the network to rank 0 is down (a cut link, a firewall"), std::string::npos)
        << e;
  }
}

TEST(FlightRecorderTest, RingKeepsTheLastEntriesAndDumpsOnRequest) {
  const fs::path dir = scratch("ring");
  dist::run_ranks(2,
                  [&](dist::Communicator& comm) {
                    for (int i = 0; i < 10; ++i)
                      comm.all_reduce(Tensor::zeros({i + 1}, DType::f32));
                    EXPECT_EQ(comm.last_seq(), 10u);
                    const auto& fr = comm.flight_recorder();
                    EXPECT_EQ(fr.capacity(), 4u);
                    EXPECT_EQ(fr.recorded(), 10u);
                    const std::vector<CollectiveRecord> e = fr.entries();
                    ASSERT_EQ(e.size(), 4u);
                    for (size_t i = 0; i < 4; ++i) {
                      EXPECT_EQ(e[i].seq, 7 + i);
                      EXPECT_EQ(e[i].numel, static_cast<int64_t>(7 + i));
                    }
                    EXPECT_FALSE(fr.find(6).has_value());
                    EXPECT_EQ(fr.find(9)->numel, 9);
                    // Empty collectives are not issued and get no number.
                    comm.all_reduce(Tensor::zeros({0}, DType::f32));
                    EXPECT_EQ(comm.last_seq(), 10u);
                    const std::string written = comm.dump_flight_recorder("checkpoint");
                    EXPECT_EQ(written,
                              (dir / ("rank" + std::to_string(comm.rank()) + ".json")).string());
                  },
                  {.timeout_s = 10, .flight_recorder = {.entries = 4, .dir = dir.string()}});
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json j = read_json(dir / ("rank" + std::to_string(r) + ".json"));
    EXPECT_EQ(j["reason"], "checkpoint");
    EXPECT_EQ(j["capacity"], 4);
    EXPECT_EQ(j["recorded"], 10);
    ASSERT_EQ(j["entries"].size(), 4u);
    EXPECT_EQ(j["entries"][0]["seq"], 7);
    EXPECT_EQ(j["entries"][3]["seq"], 10);
    EXPECT_EQ(j["entries"][3]["bytes"], 40);
    EXPECT_EQ(j["entries"][3]["state"], "completed");
  }
  fs::remove_all(dir);
}

TEST(FlightRecorderTest, NoFileWithoutAPlace) {
  if (std::getenv("STOKER_FLIGHT_RECORDER")) GTEST_SKIP() << "STOKER_FLIGHT_RECORDER is set";
  dist::run_ranks(1, [](dist::Communicator& comm) {
    comm.barrier();
    EXPECT_EQ(comm.dump_flight_recorder(), "");
    const std::vector<CollectiveRecord> e = comm.flight_recorder().entries();
    ASSERT_EQ(e.size(), 1u);
    EXPECT_STREQ(e[0].op, "barrier");
    EXPECT_EQ(e[0].bytes, 0);
  });
}

TEST(FlightRecorderTest, GradSyncTagsItsBuckets) {
  std::vector<std::unique_ptr<stoker::nn::Sequential>> models;
  for (int r = 0; r < 2; ++r) models.push_back(stoker::test::make_mlp(3));
  std::vector<std::vector<std::string>> tags(2);
  dist::run_ranks(2, [&](dist::Communicator& comm) {
    stoker::nn::Sequential& m = *models[comm.rank()];
    dist::ReplicatedGradSync sync(comm, m, {.bucket_bytes = 512, .first_bucket_bytes = 256});
    m.forward(stoker::test::random_tensor({4, 8}, DType::f32, 70 + comm.rank()));
    m.backward(stoker::test::random_tensor({4, 3}, DType::f32, 80 + comm.rank()));
    sync.finish();
    for (const CollectiveRecord& r : comm.flight_recorder().entries())
      tags[comm.rank()].emplace_back(r.tag_view());
    ASSERT_GE(sync.num_buckets(), 2);
  });
  EXPECT_EQ(tags[0], tags[1]);
  std::map<std::string, int> count;
  for (const std::string& t : tags[0]) ++count[t];
  EXPECT_EQ(count["grad_sync bucket 0"], 1);
  EXPECT_EQ(count["grad_sync bucket 1"], 1);
  EXPECT_GT(count[""], 0);  // the constructor's broadcasts are untagged
}

TEST(FlightRecorderTest, RecordStrAndTagTruncation) {
  CollectiveRecord r;
  r.seq = 12;
  r.op = "reduce_scatter";
  r.dtype = DType::bf16;
  r.numel = 8;
  r.bytes = 16;
  r.reduce_op = "avg";
  EXPECT_EQ(r.str(), "collective #12 reduce_scatter(bf16 x 8, avg, 16 bytes)");
  dist::run_ranks(1, [](dist::Communicator& comm) {
    const std::string long_tag(100, 'x');
    {
      const dist::CollectiveTag outer(comm, "outer");
      {
        const dist::CollectiveTag inner(comm, long_tag);
        EXPECT_EQ(comm.collective_tag(), long_tag.substr(0, CollectiveRecord::kTagBytes - 1));
      }
      EXPECT_EQ(comm.collective_tag(), "outer");
      comm.barrier();
    }
    EXPECT_EQ(comm.collective_tag(), "");
    EXPECT_EQ(comm.flight_recorder().entries()[0].str(), "collective #1 barrier(tag 'outer')");
  });
}

// The NCCL watchdog's decisions, on timings a watchdog would have recorded.
namespace {

constexpr int64_t kS = 1'000'000'000;  // ns per second

CollectiveRecord enqueued(uint64_t seq, int64_t enqueue_ns, const char* tag = "") {
  CollectiveRecord r;
  r.seq = seq;
  r.op = "all_reduce";
  r.dtype = DType::f32;
  r.numel = 1 << 20;
  r.bytes = 4 << 20;
  r.reduce_op = "sum";
  std::snprintf(r.tag.data(), r.tag.size(), "%s", tag);
  r.enqueue_ns = enqueue_ns;
  return r;
}

}  // namespace

TEST(WatchdogPolicyTest, CompletesInTimeDoesNothing) {
  const dist::WatchdogPolicy p{.timeout_s = 10};
  // Nothing outstanding: all completed.
  EXPECT_EQ(p.decide(100 * kS, {}, 99 * kS, "", 0, 2).action, WatchdogDecision::Action::none);
  // Outstanding for 9.9 s of a 10 s timeout.
  const WatchdogDecision d = p.decide(109 * kS + 9 * kS / 10, {enqueued(5, 100 * kS)}, 0, "", 0, 2);
  EXPECT_EQ(d.action, WatchdogDecision::Action::none);
  EXPECT_NEAR(d.waited_s, 9.9, 1e-9);
}

TEST(WatchdogPolicyTest, PastTheTimeoutAbortsWithTheRecord) {
  const dist::WatchdogPolicy p{.timeout_s = 10};
  const std::vector<CollectiveRecord> out = {enqueued(7, 100 * kS, "grad_sync bucket 3"),
                                             enqueued(8, 101 * kS)};
  const WatchdogDecision d = p.decide(111 * kS, out, 50 * kS, "", 1, 4);
  ASSERT_EQ(d.action, WatchdogDecision::Action::abort_timeout);
  ASSERT_TRUE(d.record.has_value());
  EXPECT_EQ(d.record->seq, 7u);
  EXPECT_NEAR(d.waited_s, 11.0, 1e-9);
  EXPECT_NE(d.message.find("rank 1 of 4 waited 11 s (collective timeout 10 s) for collective #7 "
                           "all_reduce(f32 x 1048576, sum, 4194304 bytes, tag 'grad_sync bucket "
                           "3') to complete (1 more queued behind it)"),
            std::string::npos)
      << d.message;
  // The message is completed with what the peer watch said about the ranks.
  using State = dist::RankProgress::State;
  const std::string m = WatchdogPolicy::timeout_message(
      d, true,
      dist::ProgressTable{
          {State::answered, 8}, {State::answered, 7}, {State::answered, 6}, {State::no_answer, 0}});
  EXPECT_NE(m.find("to complete (1 more queued behind it); not reached by rank 2 (its last "
                   "collective was #6), rank 3 (it did not answer the peer watch in time: "
                   "stopped (SIGSTOP, a debugger), frozen, or cut off by the network (a cut "
                   "link, a firewall)); the communicator was aborted (ncclCommAbort)"),
            std::string::npos)
      << m;
}

TEST(WatchdogPolicyTest, TimeoutMessageSaysWhatIsKnownAboutTheOtherRanks) {
  using State = dist::RankProgress::State;
  const dist::WatchdogPolicy p{.timeout_s = 10};
  const WatchdogDecision d = p.decide(111 * kS, {enqueued(7, 100 * kS)}, 0, "", 0, 3);
  ASSERT_EQ(d.action, WatchdogDecision::Action::abort_timeout);
  // Every rank had issued #7: NCCL or the network.
  std::string m = WatchdogPolicy::timeout_message(
      d, true,
      dist::ProgressTable{{State::answered, 7}, {State::answered, 9}, {State::answered, 7}});
  EXPECT_NE(m.find("every rank had issued collective #7, so it is stuck inside NCCL or the "
                   "network"),
            std::string::npos)
      << m;
  // A rank that never issued a collective, one that had left.
  m = WatchdogPolicy::timeout_message(
      d, true, dist::ProgressTable{{State::answered, 7}, {State::answered, 0}, {State::left, 3}});
  EXPECT_NE(m.find("not reached by rank 1 (it had issued no collective yet), rank 2 (it had "
                   "left the job)"),
            std::string::npos)
      << m;
  // No table (rank 0 stopped), no watch at all.
  m = WatchdogPolicy::timeout_message(d, true, std::nullopt);
  EXPECT_NE(m.find("rank 0 sent no progress table over the peer watch (rank 0 itself may be "
                   "stopped"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("or the network between the ranks is down (a cut link, a firewall, "
                   "NCCL_SOCKET_IFNAME"),
            std::string::npos)
      << m;
  m = WatchdogPolicy::timeout_message(d, false, std::nullopt);
  EXPECT_NE(m.find("this job has no peer watch"), std::string::npos) << m;
  EXPECT_NE(m.find("or the network between the ranks is down"), std::string::npos) << m;
  EXPECT_NE(m.find("the communicator was aborted (ncclCommAbort)"), std::string::npos) << m;
}

TEST(WatchdogPolicyTest, QueuedBehindALongCollectiveIsTimedFromItsPredecessor) {
  const dist::WatchdogPolicy p{.timeout_s = 10};
  // #8 was enqueued at 100 s but #7 only completed at 108 s: at 115 s it has run 7 s.
  WatchdogDecision d = p.decide(115 * kS, {enqueued(8, 100 * kS)}, 108 * kS, "", 0, 2);
  EXPECT_EQ(d.action, WatchdogDecision::Action::none);
  EXPECT_NEAR(d.waited_s, 7.0, 1e-9);
  d = p.decide(118 * kS + 1, {enqueued(8, 100 * kS)}, 108 * kS, "", 0, 2);
  EXPECT_EQ(d.action, WatchdogDecision::Action::abort_timeout);
  // A known start time wins.
  CollectiveRecord started = enqueued(8, 100 * kS);
  started.start_ns = 105 * kS;
  EXPECT_EQ(p.decide(116 * kS, {started}, 0, "", 0, 2).action,
            WatchdogDecision::Action::abort_timeout);
  EXPECT_EQ(p.decide(114 * kS, {started}, 0, "", 0, 2).action, WatchdogDecision::Action::none);
}

TEST(WatchdogPolicyTest, AsyncErrorAbortsAtOnce) {
  const dist::WatchdogPolicy p{.timeout_s = 600};
  WatchdogDecision d = p.decide(100 * kS + 1, {enqueued(3, 100 * kS)}, 0,
                                "remote process exited or there was a network error", 2, 8);
  ASSERT_EQ(d.action, WatchdogDecision::Action::abort_error);
  EXPECT_EQ(d.record->seq, 3u);
  EXPECT_NE(d.message.find("rank 2 of 8: NCCL reported an asynchronous error: remote process "
                           "exited"),
            std::string::npos)
      << d.message;
  EXPECT_NE(d.message.find("collective #3"), std::string::npos) << d.message;
  // Also with nothing outstanding.
  d = p.decide(100 * kS, {}, 0, "unhandled system error", 0, 2);
  EXPECT_EQ(d.action, WatchdogDecision::Action::abort_error);
  EXPECT_FALSE(d.record.has_value());
}

TEST(CollectiveTimeoutEnvTest, MalformedValuesNameTheVariable) {
  auto with = [](const char* value) {
    return [value](const char* name) -> const char* {
      return std::string(name) == "STOKER_COLLECTIVE_TIMEOUT" ? value : nullptr;
    };
  };
  EXPECT_EQ(dist::collective_timeout_from_env(with(nullptr), 600.0), 600.0);
  EXPECT_EQ(dist::collective_timeout_from_env(with("2.5"), 600.0), 2.5);
  EXPECT_EQ(dist::read_env(with("30")).collective_timeout_s, 30.0);
  EXPECT_EQ(dist::read_env(with(nullptr)).collective_timeout_s, 0.0);
  for (const char* bad : {"ten", "10s", "0", "-5", "nan", "inf"}) {
    const std::string e = error_of([&] { dist::read_env(with(bad)); });
    EXPECT_NE(e.find("STOKER_COLLECTIVE_TIMEOUT='" + std::string(bad) + "'"), std::string::npos)
        << e;
    EXPECT_NE(e.find("positive number of seconds"), std::string::npos) << e;
  }
}

// Real processes under dist::launch: rank 2 stops itself (SIGSTOP); the others fail after the
// collective timeout set by STOKER_COLLECTIVE_TIMEOUT, naming it, and write their files.
TEST(FlightRecorderTest, AStoppedProcessIsNamedByTheOthers) {
  const fs::path dir = scratch("launch");
  dist::LaunchOptions o;
  o.nproc_per_node = 3;
  o.master_port = 0;
  o.program = fs::read_symlink("/proc/self/exe").string();
  o.args = {"--gtest_filter=HangChild.RankTwoStops", "--gtest_brief=1"};
  o.extra_env = {{"STOKER_TEST_HANG_CHILD", "1"},
                 {"STOKER_COLLECTIVE_TIMEOUT", "1"},
                 {"STOKER_FLIGHT_RECORDER", dir.string()}};
  o.kill_grace_s = 1.0;
  o.forward_stderr = false;
  o.quiet = true;
  const auto start = Clock::now();
  const dist::LaunchResult r = dist::launch(o);
  EXPECT_LT(seconds_since(start), 20.0);
  EXPECT_TRUE(r.failed_rank == 0 || r.failed_rank == 1) << r.failed_rank << ": " << r.failure;
  std::string tail;
  for (const std::string& line : r.failed_stderr_tail) tail += line + "\n";
  EXPECT_NE(tail.find("for rank 2 (world size 3), which had not reached it"), std::string::npos)
      << tail;
  for (int rank : {0, 1}) {
    const nlohmann::json j = read_json(dir / ("rank" + std::to_string(rank) + ".json"));
    EXPECT_NE(j["reason"].get<std::string>().find("for rank 2"), std::string::npos) << j;
    EXPECT_EQ(j["entries"].back()["state"], "failed");
    EXPECT_EQ(j["entries"].back()["seq"], 2);
  }
  EXPECT_FALSE(fs::exists(dir / "rank2.json"));
  fs::remove_all(dir);
}

// What the launched processes run (skipped unless the test above started them).
TEST(HangChild, RankTwoStops) {
  if (!std::getenv("STOKER_TEST_HANG_CHILD"))
    GTEST_SKIP() << "run by FlightRecorderTest.AStoppedProcessIsNamedByTheOthers";
  dist::DistContext ctx = dist::init_from_env({.backend = dist::Backend::tcp, .timeout_s = 30});
  dist::Communicator& comm = *ctx.comm;
  comm.barrier();
  if (comm.rank() == 2) {
    std::raise(SIGSTOP);  // until the launcher kills it
    return;
  }
  try {
    comm.all_reduce(Tensor::zeros({8}, DType::f32));
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    std::exit(1);  // the failure the launcher reports (without gtest's own)
  }
}
