// SequenceBatches to a GPU: the batches copied on the copy stream from the ring of pinned slots
// (and without worker threads) equal the CPU source's, bit for bit, over several epochs, for a
// mixture with document masks, across resets that drop batches in flight, and while the compute
// stream is busy (each copy then waits for the compute stream to read its slot's previous batch,
// so a worker that rewrote a pinned slot before its copy ran would deliver the wrong rows). The
// corpora's ids are their positions, so a wrong row is a wrong id. Delivery makes no host sync.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/stream.h"
#include "stoker/data/sequence_batches.h"
#include "stoker/ops/gemm.h"
#include "test_util.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

// Two raw uint32 corpora of distinct ids (0 delimits documents), removed at the end.
class Corpora {
 public:
  Corpora() {
    for (int s = 0; s < 2; ++s) {
      const fs::path path =
          fs::temp_directory_path() /
          ("stoker_seq_gpu_" + std::to_string(::getpid()) + "_" + std::to_string(s) + ".bin");
      std::vector<uint32_t> ids(s == 0 ? 20000 : 7001);
      for (size_t i = 0; i < ids.size(); ++i)
        ids[i] = i % (s == 0 ? 997 : 331) == 0 ? 0 : static_cast<uint32_t>(i + s * 100000);
      FILE* f = std::fopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      if (f == nullptr) return;
      EXPECT_EQ(std::fwrite(ids.data(), 4, ids.size(), f), ids.size());
      std::fclose(f);
      paths_.push_back(path);
      corpora_.push_back(std::make_unique<data::TokenCorpus>(
          path.string(), data::TokenCorpusOptions{
                             .format = data::TokenFormat::raw, .token_bytes = 4, .delimiter = 0}));
      sequences_.push_back(std::make_unique<data::TokenSequences>(
          *corpora_.back(), data::TokenSequencesOptions{.context = 64}));
    }
  }
  ~Corpora() {
    sequences_.clear();
    corpora_.clear();
    for (const auto& p : paths_) fs::remove(p);
  }
  bool ok() const { return sequences_.size() == 2; }
  std::vector<data::SequenceSource> one() const { return {{sequences_[0].get(), 1, ""}}; }
  std::vector<data::SequenceSource> mixture() const {
    return {{sequences_[0].get(), 0.7, ""}, {sequences_[1].get(), 0.3, ""}};
  }

 private:
  std::vector<fs::path> paths_;
  std::vector<std::unique_ptr<data::TokenCorpus>> corpora_;
  std::vector<std::unique_ptr<data::TokenSequences>> sequences_;
};

// Every tensor of a GPU batch equals the CPU batch's bytes.
void expect_same(const data::Batch& cpu, const data::Batch& gpu, const std::string& where) {
  ASSERT_TRUE(gpu.input.device().is_cuda()) << where;
  ASSERT_EQ(gpu.size, cpu.size) << where;
  ASSERT_EQ(gpu.positions.defined(), cpu.positions.defined()) << where;
  for (const auto& [x, y] :
       {std::pair{cpu.input, gpu.input}, std::pair{cpu.target, gpu.target},
        std::pair{cpu.positions, gpu.positions}, std::pair{cpu.documents, gpu.documents}}) {
    if (!x.defined()) continue;
    ASSERT_TRUE(y.device().is_cuda()) << where;
    ASSERT_EQ(y.shape(), x.shape()) << where;
    const Tensor back = y.to(Device::cpu());
    ASSERT_EQ(back.nbytes(), x.nbytes()) << where;
    ASSERT_EQ(std::memcmp(back.data(), x.data(), x.nbytes()), 0) << where;
  }
}

TEST(SequenceBatchesGpuTest, GpuBatchesEqualCpuBatchesOverEpochs) {
  STOKER_REQUIRE_GPU();
  const Corpora corpora;
  ASSERT_TRUE(corpora.ok());
  for (const bool mix : {false, true}) {
    for (const int threads : {0, 1, 3}) {
      // 40 batches of 8 sequences per epoch (the mixture's): more than the ring holds.
      data::SequenceBatchesOptions o{.batch_size = 8,
                                     .sequences_per_epoch = 320,
                                     .seed = 5,
                                     .dtype = mix ? DType::i32 : DType::i64,
                                     .document_masks = true,
                                     .threads = threads,
                                     .prefetch = 3};
      data::SequenceBatches cpu(mix ? corpora.mixture() : corpora.one(), o);
      o.device = Device::cuda(0);
      data::SequenceBatches gpu(mix ? corpora.mixture() : corpora.one(), o);
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        cpu.start_epoch(epoch);
        gpu.start_epoch(epoch);
        int64_t b = 0;
        for (data::Batch c; cpu.next(c); ++b) {
          data::Batch g;
          ASSERT_TRUE(gpu.next(g));
          expect_same(c, g,
                      "epoch " + std::to_string(epoch) + ", batch " + std::to_string(b) + ", " +
                          std::to_string(threads) + " threads" + (mix ? ", mixture" : ""));
        }
        EXPECT_EQ(b, 40);
        data::Batch g;
        EXPECT_FALSE(gpu.next(g));
      }
    }
  }
}

TEST(SequenceBatchesGpuTest, ResetsWithBatchesInFlightDeliverTheCpuBatches) {
  STOKER_REQUIRE_GPU();
  const Corpora corpora;
  ASSERT_TRUE(corpora.ok());
  data::SequenceBatchesOptions o{
      .batch_size = 8, .seed = 9, .document_masks = true, .threads = 3, .prefetch = 4};
  data::SequenceBatches cpu(corpora.mixture(), o);
  o.device = Device::cuda(0);
  data::SequenceBatches gpu(corpora.mixture(), o);
  // Each reset drops the batches the workers have prepared (and copied) ahead.
  auto both = [&](auto&& position) {
    position(cpu);
    position(gpu);
    for (int b = 0; b < 5; ++b) {
      data::Batch c, g;
      ASSERT_EQ(cpu.next(c), gpu.next(g));
      if (c.size == 0) return;
      expect_same(c, g, "batch " + std::to_string(b) + " after a reset");
    }
  };
  both([](data::SequenceBatches& s) { s.start_epoch(0); });
  both([](data::SequenceBatches& s) { s.restore(1, 7); });
  both([](data::SequenceBatches& s) { s.continue_epoch(1, 123); });
  both([](data::SequenceBatches& s) { s.start_epoch(2); });
  both([](data::SequenceBatches& s) { s.restore(2, 2); });
}

TEST(SequenceBatchesGpuTest, BusyComputeStreamNeitherCorruptsNorSyncs) {
  STOKER_REQUIRE_GPU();
  const Corpora corpora;
  ASSERT_TRUE(corpora.ok());
  const Device gpu_device = Device::cuda(0);
  // Work that keeps the compute stream busy for tens of milliseconds (fp32 GEMMs, about 140
  // GFLOP each), queued before the batches are taken.
  const int64_t n = 4096;
  const Tensor a = Tensor::zeros({n, n}, DType::f32, gpu_device);
  const Tensor c = Tensor::empty({n, n}, DType::f32, gpu_device);
  for (const int threads : {0, 2}) {
    data::SequenceBatchesOptions o{
        .batch_size = 8, .seed = 3, .document_masks = true, .threads = threads, .prefetch = 2};
    data::SequenceBatches cpu(corpora.one(), o);
    o.device = gpu_device;
    data::SequenceBatches gpu(corpora.one(), o);
    cpu.start_epoch(0);
    gpu.start_epoch(0);
    data::Batch warm;
    ASSERT_TRUE(gpu.next(warm));  // the slots exist; the next copies reuse them
    for (int i = 0; i < 40; ++i) ops::gemm(c, a, a);
    // Many more batches than slots while the GEMMs run: each copy waits for the compute stream
    // to have read its slot's previous batch; the workers must wait for that copy before they
    // rewrite the slot's pinned rows.
    const uint64_t syncs = core::host_sync_count();
    std::vector<data::Batch> taken;
    for (int b = 0; b < 12; ++b) {
      data::Batch g;
      ASSERT_TRUE(gpu.next(g));
      taken.push_back(std::move(g));
    }
    EXPECT_EQ(core::host_sync_count(), syncs) << "next() waited for the device";
    data::Batch first;
    ASSERT_TRUE(cpu.next(first));
    expect_same(first, warm, "batch 0");
    for (size_t b = 0; b < taken.size(); ++b) {
      data::Batch expected;
      ASSERT_TRUE(cpu.next(expected));
      expect_same(expected, taken[b],
                  "batch " + std::to_string(b + 1) + ", " + std::to_string(threads) + " threads");
    }
  }
}

}  // namespace
}  // namespace stoker
