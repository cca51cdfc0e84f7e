// Host and pinned allocators: byte counters, peaks and the pinned block cache (core/allocator.h).
// The counters are process-wide, so each test measures differences around its own allocations.
#include "stoker/core/allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "test_util.h"

namespace stoker::core {
namespace {

TEST(AllocatorTest, HostCountersTrackAllocations) {
  const MemoryStats before = memory_stats(Device::cpu());
  {
    const Tensor a = Tensor::empty({1000}, DType::f32);
    MemoryStats s = memory_stats(Device::cpu());
    EXPECT_EQ(s.current_bytes, before.current_bytes + 4000);
    EXPECT_EQ(s.allocations, before.allocations + 1);
    EXPECT_GE(s.peak_bytes, s.current_bytes);
    // allocator.h: reserved_bytes is "held by the allocator (>= current)".
    EXPECT_GE(s.reserved_bytes, s.current_bytes);
    {
      const Tensor b = Tensor::empty({3, 7}, DType::f16);
      s = memory_stats(Device::cpu());
      EXPECT_EQ(s.current_bytes, before.current_bytes + 4000 + 42);
      EXPECT_EQ(s.allocations, before.allocations + 2);
      // Views and copies of a Tensor allocate nothing.
      const Tensor view = b.slice(1, 2).reshape({-1});
      const Tensor alias = a;
      EXPECT_EQ(memory_stats(Device::cpu()).allocations, before.allocations + 2);
    }
    EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before.current_bytes + 4000);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before.current_bytes);
}

TEST(AllocatorTest, PeakAndResetPeak) {
  reset_peak_memory(Device::cpu());
  const MemoryStats base = memory_stats(Device::cpu());
  EXPECT_EQ(base.peak_bytes, base.current_bytes);
  const size_t big = 3u << 20;
  { const Tensor t = Tensor::empty({static_cast<int64_t>(big)}, DType::u8); }
  MemoryStats s = memory_stats(Device::cpu());
  EXPECT_EQ(s.current_bytes, base.current_bytes);
  EXPECT_EQ(s.peak_bytes, base.current_bytes + big);
  {
    const Tensor small = Tensor::empty({100}, DType::u8);
    EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes, base.current_bytes + big)
        << "peak is a maximum, not the latest";
    reset_peak_memory(Device::cpu());
    EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes, base.current_bytes + 100);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes, base.current_bytes + 100);
}

TEST(AllocatorTest, PinnedCountersAndBlockReuse) {
  // 3 MiB + 1 byte and 3.5 MiB both fall in the 4 MiB size class.
  const int64_t first_bytes = (3 << 20) + 1;
  const int64_t second_bytes = (7 << 19);
  const MemoryStats before = pinned_memory_stats();
  void* first_ptr = nullptr;
  size_t reserved_after_first = 0;
  {
    const Tensor p = Tensor::empty_pinned({first_bytes}, DType::u8);
    EXPECT_TRUE(p.is_pinned());
    EXPECT_EQ(p.device(), Device::cpu());
    first_ptr = p.data();
    const MemoryStats s = pinned_memory_stats();
    EXPECT_EQ(s.current_bytes, before.current_bytes + first_bytes);
    EXPECT_EQ(s.allocations, before.allocations + 1);
    EXPECT_GE(s.reserved_bytes, s.current_bytes);
    EXPECT_LE(s.reserved_bytes, before.reserved_bytes + (4u << 20));
    reserved_after_first = s.reserved_bytes;
    // Usable memory: write and read back.
    std::memset(p.data(), 0x5a, p.nbytes());
    EXPECT_EQ(static_cast<uint8_t*>(p.data())[first_bytes - 1], 0x5a);
  }
  EXPECT_EQ(pinned_memory_stats().current_bytes, before.current_bytes);
  EXPECT_EQ(pinned_memory_stats().reserved_bytes, reserved_after_first)
      << "a freed pinned block stays reserved in the cache";
  {
    const Tensor q = Tensor::empty_pinned({second_bytes / 2}, DType::f16);
    EXPECT_EQ(q.data(), first_ptr) << "the cached block of the same size class is reused";
    EXPECT_EQ(pinned_memory_stats().reserved_bytes, reserved_after_first)
        << "reusing a cached block must not grow reserved_bytes";
    EXPECT_EQ(pinned_memory_stats().current_bytes, before.current_bytes + second_bytes);
  }
  // Pinned allocations do not count as ordinary host memory.
  const MemoryStats host_before = memory_stats(Device::cpu());
  { const Tensor r = Tensor::empty_pinned({1000}, DType::f32); }
  EXPECT_EQ(memory_stats(Device::cpu()).allocations, host_before.allocations);
}

TEST(AllocatorTest, PinnedPeakReset) {
  reset_peak_pinned_memory();
  const MemoryStats base = pinned_memory_stats();
  EXPECT_EQ(base.peak_bytes, base.current_bytes);
  { const Tensor p = Tensor::empty_pinned({12345}, DType::u8); }
  EXPECT_EQ(pinned_memory_stats().peak_bytes, base.current_bytes + 12345);
  reset_peak_pinned_memory();
  EXPECT_EQ(pinned_memory_stats().peak_bytes, base.current_bytes);
}

TEST(AllocatorTest, StorageRejectsPinnedDeviceMemory) {
  EXPECT_TRUE(
      test::throws_error_with([] { Storage::allocate(16, Device::cuda(0), /*pinned=*/true); },
                              {"pinned memory is host memory", "Device::cpu()"}));
}

TEST(AllocatorTest, StorageRemembersWhatItHolds) {
  const auto s = Storage::allocate(100, Device::cpu());
  EXPECT_EQ(s->bytes(), 100u);
  EXPECT_EQ(s->device(), Device::cpu());
  EXPECT_FALSE(s->pinned());
  EXPECT_NE(s->data(), nullptr);
  const auto z = Storage::allocate(0, Device::cpu());
  EXPECT_EQ(z->bytes(), 0u);
}

TEST(AllocatorTest, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3u << 20), "3.00 MiB");
  EXPECT_EQ(format_bytes(size_t{3} << 29), "1.50 GiB");
}

TEST(AllocatorTest, FormatMemoryStats) {
  const Tensor t = Tensor::empty({2048}, DType::u8);
  const std::string s = format_memory_stats(Device::cpu());
  EXPECT_EQ(s.rfind("cpu: current ", 0), 0u) << s;
  EXPECT_NE(s.find(", peak "), std::string::npos) << s;
  EXPECT_NE(s.find(", reserved "), std::string::npos) << s;
  EXPECT_NE(s.find(format_bytes(memory_stats(Device::cpu()).current_bytes)), std::string::npos)
      << s;
}

TEST(AllocatorTest, GraphMemoryIsZeroOnTheCpu) {
  const GraphMemoryStats s = graph_memory_stats(Device::cpu());
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.used_high_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_NO_THROW(reset_graph_memory_peak(Device::cpu()));
}

TEST(AllocatorTest, BadDeviceIndexThrows) {
  EXPECT_TRUE(test::throws_error_with([] { memory_stats(Device::cuda(64)); },
                                      {"memory_stats: bad device cuda:64"}));
  EXPECT_TRUE(test::throws_error_with([] { reset_peak_memory(Device::cuda(-1)); },
                                      {"reset_peak_memory: bad device cuda:-1"}));
}

}  // namespace
}  // namespace stoker::core
