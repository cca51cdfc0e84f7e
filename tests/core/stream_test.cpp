// Streams and events on the CPU: empty handles, synchronous no-ops, no host syncs counted
// (core/stream.h).
#include "stoker/core/stream.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace stoker::core {
namespace {

TEST(StreamTest, CpuStreamsAreEmpty) {
  for (const Stream& s : {compute_stream(Device::cpu()), copy_stream(Device::cpu()),
                          comm_stream(Device::cpu()), current_stream(Device::cpu()), Stream()}) {
    EXPECT_EQ(s.handle(), nullptr);
    EXPECT_FALSE(s.is_cuda());
    EXPECT_EQ(s.device(), Device::cpu());
    EXPECT_TRUE(s.query());
    EXPECT_EQ(s, Stream());
  }
}

TEST(StreamTest, CpuWaitsAreNoOpsAndNotSyncs) {
  const uint64_t before = host_sync_count();
  Stream().synchronize();
  compute_stream(Device::cpu()).synchronize();
  synchronize_device(Device::cpu());
  Event e = Event::create(Device::cpu());
  EXPECT_EQ(e.handle(), nullptr);
  e.record(Stream());
  e.block(Stream());
  e.synchronize();
  EXPECT_TRUE(e.query());
  {
    StreamGuard guard(Stream{});
    EXPECT_EQ(current_stream(Device::cpu()), Stream());
  }
  // Host ops do not sync either.
  const Tensor t = test::random_tensor({100}, DType::f32, 1);
  ops::scale(t, 2.0f);
  EXPECT_TRUE(std::isfinite(ops::sum(t).item()));
  EXPECT_EQ(host_sync_count(), before);
}

TEST(StreamTest, NoteHostSyncCounts) {
  const uint64_t before = host_sync_count();
  note_host_sync();
  note_host_sync();
  EXPECT_EQ(host_sync_count(), before + 2);
}

TEST(StreamTest, ElapsedNeedsCudaEvents) {
  const Event a = Event::create(Device::cpu(), /*timing=*/true);
  const Event b = Event::create(Device::cpu(), /*timing=*/true);
  EXPECT_TRUE(test::throws_error_with([&] { Event::elapsed_ms(a, b); },
                                      {"Event::elapsed_ms needs two CUDA timing events"}));
}

TEST(StreamTest, CudaStreamsWithoutAGpuThrow) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "machine has a GPU";
  EXPECT_TRUE(test::throws_error_with([] { Stream::create(Device::cuda(0)); },
                                      {"Stream::create", "cuda:0"}));
  EXPECT_TRUE(
      test::throws_error_with([] { Event::create(Device::cuda(0)); }, {"Event::create", "cuda:0"}));
  EXPECT_TRUE(test::throws_error_with([] { compute_stream(Device::cuda(0)); }, {"cuda:0"}));
}

}  // namespace
}  // namespace stoker::core
