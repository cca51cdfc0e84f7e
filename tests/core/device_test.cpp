// Device names, parsing and selection (core/device.h) on a machine with or without a GPU.
#include "stoker/core/device.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "test_util.h"

namespace stoker::core {
namespace {

TEST(DeviceTest, ConstructorsAndNames) {
  EXPECT_TRUE(Device::cpu().is_cpu());
  EXPECT_FALSE(Device::cpu().is_cuda());
  EXPECT_TRUE(Device::cuda(3).is_cuda());
  EXPECT_EQ(Device::cuda(3).index, 3);
  EXPECT_EQ(Device::cuda().index, 0);
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(0).str(), "cuda:0");
  EXPECT_EQ(Device::cuda(12).str(), "cuda:12");
  EXPECT_EQ(Device{}, Device::cpu());
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::cpu());
  std::ostringstream os;
  os << Device::cuda(2) << " " << Device::cpu();
  EXPECT_EQ(os.str(), "cuda:2 cpu");
}

TEST(DeviceTest, ParseGoodNames) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("gpu"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:0"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:1"), Device::cuda(1));
  EXPECT_EQ(parse_device("cuda:15"), Device::cuda(15));
}

TEST(DeviceTest, ParseBadNamesSaysWhatIsExpected) {
  for (const std::string bad : {"", "tpu", "CPU", "cuda:", "cuda:x", "cuda:1x", "cuda:-1", "cuda0",
                                "cuda:99999999999999", "cuda: 1", "cuda:+1"}) {
    EXPECT_TRUE(test::throws_error_with([&] { parse_device(bad); },
                                        {"unknown device '" + bad + "'", "cpu, cuda or cuda:N"}))
        << "'" << bad << "'";
  }
}

TEST(DeviceTest, BestDeviceFollowsTheDeviceCount) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(best_device(), n > 0 ? Device::cuda(0) : Device::cpu());
  if (!built_with_cuda()) EXPECT_EQ(n, 0);
  EXPECT_EQ(built_with_cuda(), STOKER_WITH_CUDA != 0);
}

TEST(DeviceTest, DescribeDevice) {
  const std::string cpu = describe_device(Device::cpu());
  EXPECT_FALSE(cpu.empty());
  EXPECT_NE(cpu.find("hardware threads"), std::string::npos) << cpu;
  if (cuda_device_count() == 0) {
    EXPECT_TRUE(test::throws_error_with([] { describe_device(Device::cuda(0)); }, {"cuda:0"}));
  }
}

}  // namespace
}  // namespace stoker::core
