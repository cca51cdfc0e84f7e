#include "stoker/data/token_batches.h"

#include <gtest/gtest.h>

#include "data_test_util.h"

namespace stoker::data {
namespace {

// Token k of the file is (k * 7) % vocab, so every window's content can be predicted.
std::filesystem::path write_tokens(const test::TempDir& dir, int64_t n, int width, uint32_t vocab) {
  std::vector<uint8_t> bytes;
  for (int64_t k = 0; k < n; ++k) {
    const uint32_t v = static_cast<uint32_t>((k * 7) % vocab);
    for (int b = 0; b < width; ++b) bytes.push_back(static_cast<uint8_t>(v >> (8 * b)));
  }
  const auto path = dir / ("tokens_u" + std::to_string(8 * width) + ".bin");
  test::write_bytes(path, bytes);
  return path;
}

TEST(TokenDataset, WindowsAreDeterministicInRangeAndShifted) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 1000, 2, 50000);
  TokenDataset ds(path, {.token_bytes = 2, .context = 16, .seed = 3});
  EXPECT_EQ(ds.num_tokens(), 1000);
  EXPECT_EQ(ds.size(), 1000 / 17);
  TokenDataset again(path, {.token_bytes = 2, .context = 16, .seed = 3});
  bool epochs_differ = false;
  for (int64_t i = 0; i < 50; ++i) {
    const int64_t off = ds.offset(0, i);
    EXPECT_EQ(off, again.offset(0, i));
    EXPECT_GE(off, 0);
    EXPECT_LE(off + 17, 1000);
    epochs_differ |= off != ds.offset(1, i);
    const TokenWindow w = ds.window(0, i);
    ASSERT_EQ(w.input.dtype(), DType::i64);
    ASSERT_EQ(w.input.numel(), 16);
    EXPECT_EQ(w.offset, off);
    for (int64_t k = 0; k < 16; ++k) {
      EXPECT_EQ(w.input.data<int64_t>()[k], ((off + k) * 7) % 50000);
      EXPECT_EQ(w.target.data<int64_t>()[k], ((off + k + 1) * 7) % 50000);
    }
  }
  EXPECT_TRUE(epochs_differ);
}

TEST(TokenDataset, Uint32TokensAndI32Output) {
  test::TempDir dir;
  const auto path = write_tokens(dir, 300, 4, 200000);
  TokenDataset ds(path, {.token_bytes = 4, .context = 8, .seed = 1, .dtype = DType::i32});
  const TokenWindow w = ds.window_at(290);
  ASSERT_EQ(w.target.dtype(), DType::i32);
  EXPECT_EQ(w.target.data<int32_t>()[7], (298 * 7) % 200000);
  EXPECT_THROW(ds.window_at(292), Error);  // 292 + 9 > 300
}

TEST(TokenDataset, BadInputNamesThePath) {
  test::TempDir dir;
  try {
    TokenDataset ds(dir / "missing.bin", {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("missing.bin"), std::string::npos);
  }
  const std::vector<uint8_t> odd = {1, 2, 3};
  test::write_bytes(dir / "odd.bin", odd);
  try {
    TokenDataset ds(dir / "odd.bin", {.token_bytes = 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("not a multiple"), std::string::npos);
    EXPECT_FALSE(e.hint().empty());
  }
  const auto small = write_tokens(dir, 10, 2, 100);
  EXPECT_THROW(TokenDataset(small, {.context = 10}), Error);
  const auto path = write_tokens(dir, 100, 2, 1000);
  TokenDataset strict(path, {.context = 8, .vocab_size = 500});
  EXPECT_THROW(
      {
        for (int64_t i = 0; i < 20; ++i) strict.window(0, i);
      },
      Error);
}

}  // namespace
}  // namespace stoker::data
