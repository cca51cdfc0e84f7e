// Shape: inline extents, element counts, printing and limits (core/shape.h).
#include "stoker/core/tensor.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "test_util.h"

namespace stoker::core {
namespace {

TEST(ShapeTest, RankNumelAndExtents) {
  const Shape s{2, 3, 5};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 30);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[1], 3);
  EXPECT_EQ(s[2], 5);
  ASSERT_EQ(s.dims().size(), 3u);
  EXPECT_EQ(s.dims()[2], 5);
  Shape m = s;
  m[1] = 7;
  EXPECT_EQ(m.numel(), 70);
  EXPECT_EQ(s.numel(), 30);  // copies are independent
}

TEST(ShapeTest, ScalarAndEmpty) {
  const Shape scalar;
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.str(), "[]");
  const Shape empty{4, 0, 3};
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.str(), "[4, 0, 3]");
}

TEST(ShapeTest, FromSpan) {
  const std::vector<int64_t> d = {6, 1, 2};
  const Shape s{std::span<const int64_t>(d)};
  EXPECT_EQ(s, (Shape{6, 1, 2}));
  EXPECT_EQ(s.numel(), 12);
}

TEST(ShapeTest, Equality) {
  EXPECT_EQ((Shape{2, 3}), (Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3}) == (Shape{3, 2}));
  EXPECT_FALSE((Shape{6}) == (Shape{6, 1}));
  EXPECT_FALSE((Shape{}) == (Shape{1}));
}

TEST(ShapeTest, Printing) {
  EXPECT_EQ((Shape{2, 3}).str(), "[2, 3]");
  EXPECT_EQ((Shape{7}).str(), "[7]");
  std::ostringstream os;
  os << Shape{1, 2, 3};
  EXPECT_EQ(os.str(), "[1, 2, 3]");
}

TEST(ShapeTest, MaxDims) {
  const Shape eight{1, 2, 1, 2, 1, 2, 1, 2};
  EXPECT_EQ(eight.rank(), Shape::kMaxDims);
  EXPECT_EQ(eight.numel(), 16);
  EXPECT_TRUE(test::throws_error_with([] { Shape s{1, 1, 1, 1, 1, 1, 1, 1, 1}; },
                                      {"9 dimensions given", "at most 8"}));
}

TEST(ShapeTest, NegativeExtentsAreRejectedExceptMinusOne) {
  EXPECT_TRUE(test::throws_error_with([] { Shape s{2, -3}; }, {"extent -3", "dim 1", "negative"}));
  const Shape infer{-1, 4};  // allowed: reshape infers it
  EXPECT_EQ(infer[0], -1);
}

}  // namespace
}  // namespace stoker::core
