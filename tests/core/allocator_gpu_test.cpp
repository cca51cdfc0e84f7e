// The CUDA pool allocator: current/peak/reserved bytes of cuda:0 follow allocations, and an
// impossible allocation throws OutOfMemoryError with the numbers a user needs. A CUDA graph's
// own allocations show in graph_memory_stats, not in memory_stats.
#include <gtest/gtest.h>

#include <string>

#include "core/graph.h"
#include "stoker/ops/layout.h"
#include "test_util.h"

namespace stoker::core {
namespace {

using test::gpu;

TEST(AllocatorGpuTest, CountersTrackDeviceAllocations) {
  STOKER_REQUIRE_GPU();
  synchronize_device(gpu());
  const MemoryStats before = memory_stats(gpu());
  const size_t bytes = 10u << 20;
  {
    const Tensor t = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, gpu());
    const MemoryStats s = memory_stats(gpu());
    EXPECT_EQ(s.current_bytes, before.current_bytes + bytes);
    EXPECT_EQ(s.allocations, before.allocations + 1);
    EXPECT_GE(s.peak_bytes, s.current_bytes);
    EXPECT_GE(s.reserved_bytes, s.current_bytes);
  }
  const MemoryStats after = memory_stats(gpu());
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_GE(after.peak_bytes, before.current_bytes + bytes);
  EXPECT_GE(after.reserved_bytes, bytes) << "freed pool memory stays reserved";
}

TEST(AllocatorGpuTest, ResetPeak) {
  STOKER_REQUIRE_GPU();
  { const Tensor big = Tensor::empty({64 << 20}, DType::u8, gpu()); }
  reset_peak_memory(gpu());
  const MemoryStats base = memory_stats(gpu());
  EXPECT_EQ(base.peak_bytes, base.current_bytes);
  { const Tensor t = Tensor::empty({1 << 20}, DType::f32, gpu()); }
  EXPECT_EQ(memory_stats(gpu()).peak_bytes, base.current_bytes + (4u << 20));
}

TEST(AllocatorGpuTest, ImpossibleAllocationThrowsOutOfMemory) {
  STOKER_REQUIRE_GPU();
  const size_t huge = size_t{1} << 50;
  const MemoryStats before = memory_stats(gpu());
  try {
    const Tensor t = Tensor::empty({static_cast<int64_t>(huge)}, DType::u8, gpu());
    FAIL() << "allocating 1 PiB did not throw";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.requested_bytes, huge);
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(huge)), std::string::npos) << what;
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    EXPECT_NE(what.find("peak"), std::string::npos) << what;
    EXPECT_NE(what.find("hint:"), std::string::npos) << what;
  }
  EXPECT_EQ(memory_stats(gpu()).current_bytes, before.current_bytes);
  // The device is still usable afterwards.
  const Tensor ok = Tensor::from_floats({1.0f, 2.0f}, {2}, DType::f32, gpu());
  EXPECT_EQ(ops::sum(ok).item(), 3.0);
}

TEST(AllocatorGpuTest, NonexistentDeviceThrows) {
  STOKER_REQUIRE_GPU();
  const int n = cuda_device_count();
  EXPECT_TRUE(test::throws_error_with(
      [n] { Tensor::empty({4}, DType::f32, Device::cuda(n)); },
      {"cannot allocate on cuda:" + std::to_string(n), std::to_string(n) + " CUDA devices visible",
       "CUDA_VISIBLE_DEVICES"}));
}

TEST(AllocatorGpuTest, FormatMemoryStats) {
  STOKER_REQUIRE_GPU();
  const Tensor t = Tensor::empty({1 << 20}, DType::u8, gpu());
  const std::string s = format_memory_stats(gpu());
  EXPECT_EQ(s.rfind("cuda:0: current ", 0), 0u) << s;
  EXPECT_NE(s.find("peak"), std::string::npos) << s;
  EXPECT_NE(s.find("reserved"), std::string::npos) << s;
}

TEST(AllocatorGpuTest, GraphAllocationsAreCountedApart) {
  STOKER_REQUIRE_GPU();
  reset_graph_memory_peak(gpu());
  const Tensor keep = Tensor::zeros({1}, DType::f32, gpu());
  const Stream stream = compute_stream(gpu());
  // 64 MiB made and freed inside the captured work: a graph allocation node and its free.
  const CudaGraph g = CudaGraph::capture(stream, [&] {
    const Tensor tmp = Tensor::empty({16 << 20}, DType::f32, gpu());
    ops::fill(tmp, 1.0);
    ops::copy(keep, tmp.slice(0, 1));
  });
  // The capture itself went through the allocator's bookkeeping once; a launch does not.
  reset_peak_memory(gpu());
  g.launch(stream);
  stream.synchronize();
  const GraphMemoryStats gs = graph_memory_stats(gpu());
  EXPECT_GE(gs.used_high_bytes, size_t{64} << 20);
  EXPECT_GE(gs.reserved_bytes, gs.used_high_bytes);
  EXPECT_LT(memory_stats(gpu()).peak_bytes, size_t{64} << 20)
      << "a launch is not seen by the allocator's counters";
  EXPECT_EQ(keep.item(), 1.0);
}

}  // namespace
}  // namespace stoker::core
