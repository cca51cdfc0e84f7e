// stoker::Error and the check macros: message, location and hint (core/error.h).
#include "stoker/core/error.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "test_util.h"

namespace stoker::core {
namespace {

TEST(ErrorTest, CheckThrowsWithMessageAndLocation) {
  int line = 0;
  try {
    const int n = 3;
    line = __LINE__ + 1;
    STOKER_CHECK(n == 4, "expected 4 things, got ", n, " (", 2.5, ")");
    FAIL() << "STOKER_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "expected 4 things, got 3 (2.5)");
    EXPECT_EQ(e.where(), "error_test.cpp:" + std::to_string(line));
    EXPECT_TRUE(e.hint().empty());
    const std::string what = e.what();
    EXPECT_NE(what.find("expected 4 things, got 3 (2.5)"), std::string::npos) << what;
    EXPECT_NE(what.find("error_test.cpp:" + std::to_string(line)), std::string::npos) << what;
    EXPECT_EQ(what.find("hint"), std::string::npos) << what;
  }
}

TEST(ErrorTest, CheckPassesWithoutEvaluatingTheMessage) {
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  EXPECT_NO_THROW(STOKER_CHECK(1 + 1 == 2, "never built ", count()));
  EXPECT_EQ(evaluated, 0);
}

TEST(ErrorTest, HintAppearsInWhat) {
  try {
    STOKER_CHECK_HINT(false, "run `stoker pack` first", "dataset missing: ", "/tmp/x");
    FAIL() << "STOKER_CHECK_HINT did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "dataset missing: /tmp/x");
    EXPECT_EQ(e.hint(), "run `stoker pack` first");
    const std::string what = e.what();
    EXPECT_NE(what.find("dataset missing: /tmp/x"), std::string::npos) << what;
    EXPECT_NE(what.find("hint: run `stoker pack` first"), std::string::npos) << what;
    EXPECT_NE(what.find("error_test.cpp:"), std::string::npos) << what;
  }
}

TEST(ErrorTest, ThrowMacroAndErrorIsARuntimeError) {
  EXPECT_THROW(STOKER_THROW("boom ", 1), Error);
  EXPECT_THROW(STOKER_THROW("boom ", 1), std::runtime_error);
  EXPECT_TRUE(
      test::throws_error_with([] { STOKER_THROW("boom ", 42); }, {"boom 42", "error_test.cpp:"}));
}

TEST(ErrorTest, OutOfMemoryErrorCarriesTheRequestedBytes) {
  try {
    throw OutOfMemoryError("out of memory: 1 GiB", "x.cpp:1", "lower the batch size", 1u << 30);
  } catch (const Error& e) {
    const auto* oom = dynamic_cast<const OutOfMemoryError*>(&e);
    ASSERT_NE(oom, nullptr);
    EXPECT_EQ(oom->requested_bytes, size_t{1} << 30);
    EXPECT_EQ(e.where(), "x.cpp:1");
    EXPECT_NE(std::string(e.what()).find("hint: lower the batch size"), std::string::npos);
  }
}

// The macros' messages are streamed pieces: a char as a character, floats with a stream's 6
// significant digits.
TEST(ErrorTest, MacroMessagesConcatenateStreamables) {
  try {
    STOKER_THROW("a", 1, '-', 2.5, std::string("z"), " ", 1.0 / 3);
    FAIL() << "STOKER_THROW did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "a1-2.5z 0.333333");
  }
  EXPECT_EQ(detail::macro_message(), "");
}

TEST(ErrorTest, LibraryChecksPassOnSuccessAndNameTheCallOnFailure) {
  EXPECT_NO_THROW(STOKER_CUDA_CHECK(0));
  EXPECT_NO_THROW(STOKER_CUBLAS_CHECK(0));
  EXPECT_NO_THROW(STOKER_NCCL_CHECK(0));
  EXPECT_NO_THROW(STOKER_LMDB_CHECK(0));
  EXPECT_TRUE(test::throws_error_with([] { STOKER_CUDA_CHECK(2); },
                                      {"CUDA call `2` failed with status 2", "error_test.cpp:"}));
  EXPECT_TRUE(test::throws_error_with(
      [] { STOKER_LMDB_CHECK(ENOENT); },
      {"LMDB call", "status " + std::to_string(ENOENT), "hint:", "stoker pack"}));
  EXPECT_TRUE(test::throws_error_with([] { STOKER_NCCL_CHECK(3); },
                                      {"NCCL call `3` failed with status 3"}));
}

}  // namespace
}  // namespace stoker::core
