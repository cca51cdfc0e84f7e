// Tensor on a GPU: host<->device round trips for every dtype, pinned copies, views of device
// memory, and the host syncs that to(cpu) / item() / to_floats() are documented to count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "test_util.h"

namespace stoker::core {
namespace {

using test::gpu;

TEST(TensorGpuTest, RoundTripEveryDtype) {
  STOKER_REQUIRE_GPU();
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
    const Tensor host = Tensor::empty({33, 7}, d);
    auto* bytes = static_cast<uint8_t*>(host.data());
    for (size_t i = 0; i < host.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(i * 29 + 3);
    const Tensor dev = host.to(gpu());
    EXPECT_EQ(dev.device(), gpu());
    EXPECT_EQ(dev.shape(), host.shape());
    EXPECT_EQ(dev.dtype(), d);
    EXPECT_EQ(dev.str(), std::string(dtype_name(d)) + "[33, 7] on cuda:0");
    const Tensor back = dev.to(Device::cpu());
    EXPECT_EQ(back.device(), Device::cpu());
    EXPECT_EQ(test::raw_bytes(back), test::raw_bytes(host)) << dtype_name(d);
  }
}

TEST(TensorGpuTest, FromFloatsAndZerosOnDevice) {
  STOKER_REQUIRE_GPU();
  const std::vector<float> v = test::random_floats(1000, 1, -5.0f, 5.0f);
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor dev = Tensor::from_floats(v, {10, 100}, d, gpu());
    EXPECT_EQ(dev.device(), gpu());
    EXPECT_TRUE(test::matches_rounded(dev, v)) << dtype_name(d);
  }
  {
    const Tensor dirty = Tensor::empty({4099}, DType::i32, gpu());
    ops::fill(dirty, -1.0);
  }
  const Tensor z = Tensor::zeros({4099}, DType::i32, gpu());
  for (int32_t x : z.to_vector<int32_t>()) ASSERT_EQ(x, 0);
}

TEST(TensorGpuTest, SliceAndReshapeOfDeviceMemory) {
  STOKER_REQUIRE_GPU();
  const Tensor host = test::random_tensor({8, 5}, DType::f32, 2);
  const Tensor dev = host.to(gpu());
  const Tensor s = dev.slice(2, 6);
  EXPECT_TRUE(s.same_storage(dev));
  EXPECT_EQ(s.device(), gpu());
  EXPECT_EQ(s.to_floats(), host.slice(2, 6).to_floats());
  EXPECT_EQ(dev.reshape({4, -1}).slice(1, 2).to_floats(), host.slice(2, 4).to_floats());
  // Writing through the view changes the parent.
  ops::fill(dev.slice(7, 8), 3.0);
  const std::vector<float> all = dev.to_floats();
  for (size_t i = 35; i < 40; ++i) EXPECT_EQ(all[i], 3.0f);
  EXPECT_EQ(all[34], host.to_floats()[34]);
}

TEST(TensorGpuTest, CloneOnDeviceIsIndependent) {
  STOKER_REQUIRE_GPU();
  const Tensor dev = test::random_tensor({1000}, DType::bf16, 3).to(gpu());
  const Tensor c = dev.clone();
  EXPECT_EQ(c.device(), gpu());
  EXPECT_FALSE(c.same_storage(dev));
  EXPECT_TRUE(test::bit_identical(c, dev));
  const std::vector<float> before = c.to_floats();
  ops::fill(dev, 1.0);
  EXPECT_EQ(c.to_floats(), before);
}

TEST(TensorGpuTest, HostSyncsAreCountedWhereDocumented) {
  STOKER_REQUIRE_GPU();
  const Tensor dev = Tensor::from_floats({2.5f}, {1}, DType::f32, gpu());
  uint64_t syncs = host_sync_count();
  EXPECT_EQ(dev.item(), 2.5);
  EXPECT_EQ(host_sync_count(), syncs + 1) << "item() on a GPU tensor is one host sync";
  syncs = host_sync_count();
  EXPECT_EQ(dev.to(Device::cpu()).to_floats()[0], 2.5f);
  EXPECT_EQ(host_sync_count(), syncs + 1) << "to(cpu) into pageable memory is one host sync";
  syncs = host_sync_count();
  EXPECT_EQ(dev.to_floats()[0], 2.5f);
  EXPECT_GE(host_sync_count(), syncs + 1) << "to_floats() waits for the device";
  // Work that stays on the device syncs nothing.
  syncs = host_sync_count();
  const Tensor x = Tensor::empty({4097}, DType::f32, gpu());
  ops::random_normal(x, 0.0f, 1.0f, 1, 0);
  ops::scale(x, 2.0f);
  const Tensor total = ops::sum(x);
  const Tensor y = x.clone();
  EXPECT_EQ(host_sync_count(), syncs);
  EXPECT_TRUE(std::isfinite(total.item()));
}

TEST(TensorGpuTest, PinnedRoundTrip) {
  STOKER_REQUIRE_GPU();
  const Tensor pinned = Tensor::empty_pinned({3, 4097}, DType::f16);
  EXPECT_TRUE(pinned.is_pinned());
  ops::random_normal(pinned, 0.0f, 1.0f, 4, 0);
  const Tensor dev = pinned.to(gpu());
  const Tensor back = Tensor::empty_pinned({3, 4097}, DType::f16);
  ops::fill(back, std::nan(""));
  ops::copy(back, dev);
  current_stream(gpu()).synchronize();
  EXPECT_TRUE(test::bit_identical(back, pinned));
}

TEST(TensorGpuTest, ItemOfEveryDtype) {
  STOKER_REQUIRE_GPU();
  EXPECT_EQ(Tensor::from_vector(std::vector<int64_t>{(int64_t{1} << 52) + 1}, {1}, gpu()).item(),
            4503599627370497.0);
  EXPECT_EQ(Tensor::from_floats({-0.5f}, {}, DType::bf16, gpu()).item(), -0.5);
  EXPECT_TRUE(test::throws_error_with([] { Tensor::empty({2}, DType::f32, gpu()).item(); },
                                      {"exactly one element", "f32[2] on cuda:0"}));
}

}  // namespace
}  // namespace stoker::core
