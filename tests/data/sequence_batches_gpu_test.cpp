// SequenceBatches to a GPU: the batches copied from the pinned ring (and without worker threads)
// equal the CPU source's, bit for bit, over more batches than the ring holds, with document masks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "stoker/data/sequence_batches.h"
#include "test_util.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
#include "stoker/core/stream.h"

#include "stoker/ops/gemm.h"
TEST(SequenceBatchesGpuTest, GpuBatchesEqualCpuBatches) {
  STOKER_REQUIRE_GPU();
  const fs::path path =
      fs::temp_directory_path() / ("stoker_seq_gpu_" + std::to_string(::getpid()) + ".bin");
  std::vector<uint32_t> ids(20000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i % 997 == 0 ? 0 : i);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(ids.data(), 4, ids.size(), f), ids.size());
    std::fclose(f);
  }
  {
    const data::TokenCorpus corpus(
        path.string(), {.format = data::TokenFormat::raw, .token_bytes = 4, .delimiter = 0});
    const data::TokenSequences seq(corpus, {.context = 64});
    for (const int threads : {0, 3}) {
      data::SequenceBatchesOptions o{
          .batch_size = 8, .seed = 5, .document_masks = true, .threads = threads, .prefetch = 3};
      data::SequenceBatches cpu({{&seq, 1, ""}}, o);
      o.device = Device::cuda(0);
      data::SequenceBatches gpu({{&seq, 1, ""}}, o);
      cpu.start_epoch(0);
      gpu.start_epoch(0);
      for (int b = 0; b < 12; ++b) {
        data::Batch c, g;
        ASSERT_TRUE(cpu.next(c));
        ASSERT_TRUE(gpu.next(g));
        ASSERT_TRUE(g.input.device().is_cuda());
        for (const auto& [x, y] :
             {std::pair{c.input, g.input}, std::pair{c.target, g.target},
              std::pair{c.positions, g.positions}, std::pair{c.documents, g.documents}}) {
          const Tensor back = y.to(Device::cpu());
          ASSERT_EQ(back.nbytes(), x.nbytes());
          ASSERT_EQ(std::memcmp(back.data(), x.data(), x.nbytes()), 0)
              << "batch " << b << ", " << threads << " threads";
        }
      }
    }
  }
  fs::remove(path);
}

}  // namespace
}  // namespace stoker
