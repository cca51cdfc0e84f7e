// Under ThreadSanitizer (the `tsan` preset, clang): oneTBB runs serially in this test binary.
//
// Why: the oneTBB library comes prebuilt, without TSan instrumentation, so TSan cannot see the
// hand-off of a parallel_for's body to TBB's worker threads and reports every CPU op and every
// pack as a race (hundreds of false reports). With max_allowed_parallelism = 1 TBB starts no
// worker threads; the threads left are the ones stoker starts itself — the Loader's opener and
// workers, synchronized with std::mutex/condition_variable/atomics, which TSan does see.
#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>

#include <memory>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STOKER_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define STOKER_UNDER_TSAN 1
#endif

namespace {

#ifdef STOKER_UNDER_TSAN
// Created before main(), alive until exit.
const auto* const kSerialTbb =
    new tbb::global_control(tbb::global_control::max_allowed_parallelism, 1);
#endif

TEST(ThreadSanitizer, OneTbbRunsSeriallyUnderTsan) {
#ifdef STOKER_UNDER_TSAN
  ASSERT_NE(kSerialTbb, nullptr);
  EXPECT_EQ(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism), 1u);
#else
  GTEST_SKIP() << "not a ThreadSanitizer build";
#endif
}

}  // namespace
