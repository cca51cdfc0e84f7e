// Smoke test of an installed stoker: a 2x3 by 3x2 GEMM on the CPU, checked by hand.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "stoker/stoker.h"

int main() {
  try {
    // A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]] (row-major).
    const auto a = stoker::Tensor::from_floats({1, 2, 3, 4, 5, 6}, stoker::Shape{2, 3});
    const auto b = stoker::Tensor::from_floats({7, 8, 9, 10, 11, 12}, stoker::Shape{3, 2});
    const auto c = stoker::Tensor::zeros(stoker::Shape{2, 2}, stoker::DType::f32);
    stoker::ops::gemm(c, a, b);

    const std::vector<float> want = {58, 64, 139, 154};
    const std::vector<float> got = c.to_floats();
    bool ok = got.size() == want.size();
    for (size_t i = 0; ok && i < want.size(); ++i) ok = std::fabs(got[i] - want[i]) < 1e-4f;
    if (!ok) {
      std::fprintf(stderr, "stoker_consumer: wrong GEMM result:");
      for (float v : got) std::fprintf(stderr, " %g", v);
      std::fprintf(stderr, " (want 58 64 139 154)\n");
      return 1;
    }
    std::printf("stoker_consumer: %s = A[2, 3] x B[3, 2] on the CPU: OK\n", c.str().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker_consumer: %s\n", e.what());
    return 1;
  }
}
