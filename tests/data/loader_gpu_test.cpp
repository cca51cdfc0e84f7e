#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "stoker/data/loader.h"
#include "stoker/data/synth.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace stoker;

namespace {

// GPU batches (uint8 copied on the copy stream, normalized on the device) equal the CPU
// loader's bit for bit, in both layouts and a half dtype, and the compute stream never waits on
// the host for them.
TEST(LoaderGpuTest, GpuBatchesEqualCpuBatches) {
  STOKER_REQUIRE_GPU();
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_loader_gpu_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  data::pack_synth({.samples = 64, .classes = 4, .size = 40, .seed = 9}, dir,
                   {.threads = 2, .progress = false});
  data::LmdbImageDataset ds(dir);
  for (const auto layout : {ops::Layout::nchw, ops::Layout::nhwc}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      data::LoaderOptions o{.batch_size = 16,
                            .threads = 4,
                            .prefetch = 3,
                            .transform = {.output_size = 32},
                            .seed = 4,
                            .dtype = dtype,
                            .layout = layout};
      data::Loader cpu(ds, o);
      o.device = Device::cuda(0);
      data::Loader gpu(ds, o);
      cpu.start_epoch(1);
      gpu.start_epoch(1);
      data::Batch a, b;
      int batches = 0;
      while (cpu.next(a)) {
        ASSERT_TRUE(gpu.next(b));
        ASSERT_EQ(b.input.device(), Device::cuda(0));
        ASSERT_TRUE(test::bit_identical(b.input, a.input));
        ASSERT_EQ(b.target.to_vector<int64_t>(), a.target.to_vector<int64_t>());
        ++batches;
      }
      EXPECT_FALSE(gpu.next(b));
      EXPECT_EQ(batches, 4);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
