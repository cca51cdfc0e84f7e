// An ops-only program: links stoker::ops alone (find_package(stoker COMPONENTS ops)), so its link
// line must hold neither LMDB nor libjpeg / TurboJPEG nor NCCL (CheckLinkLine.cmake checks it
// after the link). A 2x3 by 3x2 GEMM on the CPU, checked by hand; only core and ops headers.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "stoker/core/tensor.h"
#include "stoker/ops/gemm.h"

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
      std::fprintf(stderr, "stoker_ops_only: wrong GEMM result:");
      for (float v : got) std::fprintf(stderr, " %g", v);
      std::fprintf(stderr, " (want 58 64 139 154)\n");
      return 1;
    }
    std::printf("stoker_ops_only: ops::gemm linked with stoker::ops alone: OK\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker_ops_only: %s\n", e.what());
    return 1;
  }
}
