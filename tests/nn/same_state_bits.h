// Shared by the fused-module tests (tests/nn): two modules that ran the same steps hold the same
// bits in every parameter gradient and every buffer (the running statistics).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stoker/nn/module.h"
#include "test_util.h"

namespace stoker::test {

// `same_names`: the parameters also have the same names, in order.
inline void expect_same_grads_and_buffers(nn::Module& a, nn::Module& b, const std::string& what,
                                          bool same_names) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size()) << what;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (same_names) EXPECT_EQ(pa[i].first, pb[i].first) << what;
    EXPECT_TRUE(bit_identical(pa[i].second->grad(), pb[i].second->grad()))
        << what << ": grad of " << pa[i].first;
  }
  std::vector<Tensor> ba, bb;
  a.visit_buffers("", [&](const std::string&, Tensor& t) { ba.push_back(t); });
  b.visit_buffers("", [&](const std::string&, Tensor& t) { bb.push_back(t); });
  ASSERT_EQ(ba.size(), bb.size()) << what;
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(bit_identical(ba[i], bb[i])) << what;
}

}  // namespace stoker::test
