#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "stoker/train/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using stoker::Device;
using stoker::DType;
using stoker::Tensor;
using stoker::train::NamedTensor;
using stoker::train::SafetensorsReader;

namespace {

TEST(SafetensorsGpuTest, GpuTensorsRoundTrip) {
  STOKER_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  Tensor w = Tensor::empty({33, 17}, DType::bf16, gpu);
  stoker::ops::random_normal(w, 0.0f, 1.0f, 5, 0);
  const fs::path p =
      fs::temp_directory_path() / ("stoker_gpu_" + std::to_string(::getpid()) + ".safetensors");
  stoker::train::save_safetensors(p, std::vector<NamedTensor>{{"w", w}});
  const Tensor back = SafetensorsReader(p).load("w", gpu);
  fs::remove(p);
  EXPECT_EQ(back.device(), gpu);
  ASSERT_EQ(back.shape(), w.shape());
  EXPECT_EQ(0, std::memcmp(back.to(Device::cpu()).data(), w.to(Device::cpu()).data(), w.nbytes()));
}

}  // namespace
