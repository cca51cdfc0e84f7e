#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "stoker/data/loader.h"
#include "stoker/data/pack.h"
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
      // The copy stages were measured: host time to enqueue, device time from timing events
      // (read when a slot is reused, so after more batches than slots some are counted).
      EXPECT_GT(gpu.counters().copy_s, 0.0);
      EXPECT_EQ(cpu.counters().copy_s, 0.0);
    }
  }
  fs::remove_all(dir);
}

// Epochs run back to back on the GPU (the next epoch's batches prepared and copied while the
// consumer finishes the current one, slots reused across the boundary) equal the CPU loader's,
// with autotuned threads and depth; the device copy time is counted once slots are reused.
TEST(LoaderGpuTest, OverlappedEpochsOnTheGpuEqualTheCpu) {
  STOKER_REQUIRE_GPU();
  const fs::path dir =
      fs::temp_directory_path() / ("stoker_loader_gpu_epochs_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  data::pack_synth({.samples = 80, .classes = 4, .size = 40, .seed = 2}, dir,
                   {.threads = 2, .progress = false});
  data::LmdbImageDataset ds(dir);
  data::LoaderOptions o{.batch_size = 8, .transform = {.output_size = 24}, .seed = 6};
  o.prefetch = 3;
  data::Loader cpu(ds, o);
  o.device = Device::cuda(0);
  o.prefetch = 0;  // autotuned
  o.threads = 0;
  data::Loader gpu(ds, o);
  for (int64_t e = 0; e < 3; ++e) {
    cpu.start_epoch(e);
    gpu.start_epoch(e);
    data::Batch a, b;
    while (cpu.next(a)) {
      ASSERT_TRUE(gpu.next(b));
      ASSERT_TRUE(test::bit_identical(b.input, a.input)) << "epoch " << e;
      ASSERT_EQ(b.target.to_vector<int64_t>(), a.target.to_vector<int64_t>());
    }
    EXPECT_FALSE(gpu.next(b));
  }
  const data::LoaderCounters c = gpu.counters();
  EXPECT_EQ(c.batches, 30);
  EXPECT_GT(c.early_batches, 0);
  EXPECT_GT(c.copy_device_s, 0.0);
  fs::remove_all(dir);
}

}  // namespace
