// The example programs' shared handler and argument checks (examples/common/program.h): the
// number validators' verdicts and messages, --device against the visible GPUs, and run()'s
// exit statuses and error lines.
#include "common/program.h"
#include "common/run_flags.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace stoker::program {
namespace {

// What the validator says about `word` (empty: accepted).
std::string verdict(const CLI::Validator& v, std::string word) { return v(word); }

TEST(ProgramArgsTest, AtLeastNamesTheMinimum) {
  const CLI::Validator v = at_least(1);
  EXPECT_EQ(verdict(v, "1"), "");
  EXPECT_EQ(verdict(v, "65536"), "");
  EXPECT_EQ(verdict(v, "0"), "0 is below the minimum 1");
  EXPECT_EQ(verdict(v, "-3"), "-3 is below the minimum 1");
  EXPECT_EQ(verdict(at_least(0.5), "0.25"), "0.25 is below the minimum 0.5");
}

TEST(ProgramArgsTest, NonFiniteNumbersNeverPass) {
  for (const CLI::Validator& v : {at_least(0), positive(), in_range(0, 1e9)})
    for (const char* word : {"nan", "inf", "-inf", "1e999"})
      EXPECT_EQ(verdict(v, word), std::string(word) + " is not a finite number") << word;
}

TEST(ProgramArgsTest, WordsThatAreNoNumberAreLeftToTheConversion) {
  // CLI11's conversion then reports "Could not convert: --epochs = abc".
  EXPECT_EQ(verdict(at_least(1), "abc"), "");
  EXPECT_EQ(verdict(in_range(0, 1), "0.5x"), "");
}

TEST(ProgramArgsTest, PositiveAndRanges) {
  EXPECT_EQ(verdict(positive(), "1e-9"), "");
  EXPECT_EQ(verdict(positive(), "0"), "0 is not a positive number");
  EXPECT_EQ(verdict(positive(), "-1"), "-1 is not a positive number");
  EXPECT_EQ(verdict(positive(1), "1"), "");
  EXPECT_EQ(verdict(positive(1), "1.5"), "1.5 is not in (0, 1]");
  EXPECT_EQ(verdict(in_range(0, 1024), "0"), "");
  EXPECT_EQ(verdict(in_range(0, 1024), "1024"), "");
  EXPECT_EQ(verdict(in_range(0, 1024), "10000"), "10000 is not in [0, 1024]");
  EXPECT_EQ(verdict(in_range(0, 1024), "-1"), "-1 is not in [0, 1024]");
}

TEST(ProgramArgsTest, ThroughCli11TheErrorNamesTheFlag) {
  CLI::App app{"test"};
  int64_t batch = 8;
  float lr = 0.1f;
  app.add_option("--batch", batch)->check(at_least(1));
  app.add_option("--lr", lr)->check(positive());
  try {
    app.parse(std::vector<std::string>{"0", "--batch"});  // reversed: CLI11 pops from the back
    FAIL() << "--batch 0 accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_EQ(std::string(e.what()), "--batch: 0 is below the minimum 1");
    EXPECT_EQ(e.get_exit_code(), static_cast<int>(CLI::ExitCodes::ValidationError));
  }
  app.parse(std::vector<std::string>{"0.5", "--lr", "16", "--batch"});
  EXPECT_EQ(batch, 16);
  EXPECT_FLOAT_EQ(lr, 0.5f);
}

// The error `f` throws (fails the test when it does not throw).
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no stoker::Error thrown";
  return Error("", "");
}

TEST(ProgramArgsTest, DeviceChecksTheVisibleGpus) {
  EXPECT_EQ(device("auto"), core::best_device());
  EXPECT_EQ(device(""), core::best_device());
  EXPECT_EQ(device("cpu"), Device::cpu());
  const Error unknown = error_of([] { device("tpu"); });
  EXPECT_EQ(unknown.message(), "--device tpu: unknown device; use auto, cpu, cuda or cuda:N");
  // No machine has 1000 GPUs: refused with the way out in the hint.
  const Error missing = error_of([] { device("cuda:999", "--gpu"); });
  EXPECT_EQ(missing.message().rfind("--gpu cuda:999: ", 0), 0u) << missing.message();
  EXPECT_EQ(missing.hint().empty(), false);
  if (core::cuda_device_count() == 0) {
    const Error none = error_of([] { device("cuda"); });
    EXPECT_NE(none.message().find("--device cuda: no CUDA device is visible"), std::string::npos)
        << none.message();
    EXPECT_EQ(none.hint().rfind("use --device cpu", 0), 0u) << none.hint();
  } else {
    EXPECT_EQ(device("cuda"), Device::cuda(0));
  }
}

// --checkpoint-interval: a number of steps or a duration; anything else names the flag.
TEST(ProgramArgsTest, ParseIntervalTakesStepsOrADuration) {
  auto steps = [](const char* w) { return parse_interval(w).steps; };
  auto seconds = [](const char* w) { return parse_interval(w).seconds; };
  EXPECT_EQ(steps("500"), 500);
  EXPECT_EQ(seconds("500"), 0.0);
  EXPECT_EQ(steps("1"), 1);
  EXPECT_EQ(seconds("90s"), 90.0);
  EXPECT_EQ(steps("90s"), 0);
  EXPECT_EQ(seconds("1s"), 1.0);
  EXPECT_EQ(seconds("30m"), 1800.0);
  EXPECT_EQ(seconds("1.5h"), 5400.0);
  EXPECT_EQ(seconds("2d"), 172800.0);
  EXPECT_EQ(seconds("0.5m"), 30.0);
  for (const char* w : {"500", "90s", "30m", "1.5h", "2d"}) {
    const Interval i = parse_interval(w);
    EXPECT_TRUE((i.steps > 0) != (i.seconds > 0)) << w << ": exactly one of them is set";
  }
}

TEST(ProgramArgsTest, ParseIntervalErrorsNameTheFlagAndTheForms) {
  for (const char* w : {"0", "-5", "30x", "", "m", "0.5s", "1.5", "0s", "-1h", "nan", "inf", "5 m",
                        "s30", "10ms", "0x10", " 5", "1e3", "+5"}) {
    SCOPED_TRACE(std::string("'") + w + "'");
    const Error e = error_of([&] { parse_interval(w); });
    EXPECT_EQ(e.message().rfind("--checkpoint-interval ", 0), 0u) << e.message();
    EXPECT_NE(e.message().find(w), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find("90s, 30m, 1.5h, 2d"), std::string::npos) << e.hint();
  }
  EXPECT_NE(error_of([] { parse_interval("30x"); }).message().find("the unit 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_interval("0.5s"); }).message().find("at least 1 second"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_interval("1.5"); }).message().find("whole number"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_interval("0"); }).message().find("at least 1"), std::string::npos);
  const Error other = error_of([] { parse_interval("soon", "--every"); });
  EXPECT_EQ(other.message().rfind("--every 'soon'", 0), 0u) << other.message();
}

// run() on argv with a body; returns the status and what went to stderr.
std::pair<int, std::string> run_with(std::vector<std::string> args,
                                     const std::function<int()>& body,
                                     const FlagNames& flag_names = {}) {
  CLI::App app{"test"};
  int64_t batch = 8;
  app.add_option("--batch", batch)->check(at_least(1));
  std::vector<char*> argv;
  args.insert(args.begin(), "prog");
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int status = run("prog", app, static_cast<int>(argv.size()), argv.data(), flag_names, body);
  ::testing::internal::GetCapturedStdout();
  return {status, ::testing::internal::GetCapturedStderr()};
}

TEST(ProgramRunTest, EveryExceptionEndsInOneErrorLineAndStatus1) {
  auto [status, err] = run_with({}, []() -> int {
    STOKER_CHECK_HINT(false, "use --batch 8", "--batch 0 is too small");
    return 0;
  });
  EXPECT_EQ(status, 1);
  EXPECT_EQ(err, "prog: error: --batch 0 is too small\n  hint: use --batch 8\n");
  std::tie(status, err) = run_with({}, []() -> int { throw std::runtime_error("plain"); });
  EXPECT_EQ(status, 1);
  EXPECT_EQ(err, "prog: error: plain\n");
  std::tie(status, err) = run_with({}, []() -> int { throw 42; });
  EXPECT_EQ(status, 1);
  EXPECT_EQ(err, "prog: error: an unknown exception\n");
  std::tie(status, err) = run_with({}, [] { return 3; });
  EXPECT_EQ(status, 3);
  EXPECT_EQ(err, "");
}

TEST(ProgramRunTest, ParseErrorsKeepCli11sStatusAndTheBodyDoesNotRun) {
  bool ran = false;
  auto body = [&] {
    ran = true;
    return 0;
  };
  EXPECT_EQ(run_with({"--batch", "0"}, body).first,
            static_cast<int>(CLI::ExitCodes::ValidationError));
  EXPECT_EQ(run_with({"--no-such-flag"}, body).first,
            static_cast<int>(CLI::ExitCodes::ExtrasError));
  EXPECT_EQ(run_with({"--help"}, body).first, 0);
  EXPECT_FALSE(ran);
  EXPECT_EQ(run_with({"--batch", "4"}, body).first, 0);
  EXPECT_TRUE(ran);
}

TEST(ProgramRunTest, LibraryErrorsNameTheProgramsFlagsNotTheCppOptions) {
  // The Trainer's own words (train/trainer.cpp), right for a C++ user.
  const auto nan = []() -> int {
    STOKER_THROW(
        "training stopped: the loss became NaN/Inf at step 3. Lower the learning rate, "
        "enable clip_grad_norm, check the inputs for NaN, or set "
        "TrainerOptions::continue_on_nan");
  };
  FlagNames names{{"enable clip_grad_norm", "enable gradient clipping (--clip)"}};
  for (auto& n : trainer_flag_names()) names.push_back(std::move(n));
  auto [status, err] = run_with({}, nan, names);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(err,
            "prog: error: training stopped: the loss became NaN/Inf at step 3. Lower the "
            "learning rate (--lr), enable gradient clipping (--clip), check the inputs for NaN\n");
  std::tie(status, err) = run_with(
      {},
      []() -> int {
        STOKER_CHECK_HINT(false, "train without TrainerOptions::cuda_graph",
                          "TrainerOptions::cuda_graph: the model is on cpu");
        return 0;
      },
      trainer_flag_names());
  EXPECT_EQ(err,
            "prog: error: --cuda-graph: the model is on cpu\n  hint: train without "
            "--cuda-graph\n");
  // Without names (a program that has no such flags) the text is the library's.
  std::tie(status, err) = run_with({}, nan);
  EXPECT_NE(err.find("TrainerOptions::continue_on_nan"), std::string::npos) << err;
}

TEST(ProgramArgsTest, AnEmptyPathIsRefusedNotTakenAsOff) {
  CLI::App app{"test"};
  std::string save;
  app.add_option("--save", save)->check(non_empty_path());
  std::vector<std::string> words{"prog", "--save", ""};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    ADD_FAILURE() << "--save '' accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("--save: an empty path does not turn it off"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(verdict(non_empty_path(), "w.safetensors"), "");
}

}  // namespace
}  // namespace stoker::program
