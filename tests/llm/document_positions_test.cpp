// stoker_llm's --document-mask source (examples/llm/document_positions.h): the batch's positions
// reach the model as the batch leaves next(), so the forward of that batch equals one with the
// positions set by hand (bit for bit) and differs from the default 0..T-1 one; the rest of the
// source is the wrapped one's; a batch without positions is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "document_positions.h"
#include "llama_model.h"
#include "test_util.h"

namespace stoker::llm {
namespace {

// One epoch of fixed batches (positions optional), as a SequenceBatches with document masks.
class FixedBatches : public data::BatchSource {
 public:
  explicit FixedBatches(std::vector<data::Batch> batches) : batches_(std::move(batches)) {}
  void start_epoch(int64_t epoch) override {
    epoch_ = epoch;
    index_ = 0;
  }
  bool next(data::Batch& batch) override {
    if (index_ >= static_cast<int64_t>(batches_.size())) return false;
    batch = batches_[static_cast<size_t>(index_++)];
    return true;
  }
  int64_t batches_per_epoch() const override { return static_cast<int64_t>(batches_.size()); }
  int64_t samples_per_epoch() const override { return batches_per_epoch(); }
  int64_t epoch() const override { return epoch_; }
  int64_t batch_index() const override { return index_; }
  void restore(int64_t epoch, int64_t index) override {
    epoch_ = epoch;
    index_ = index;
  }
  std::string kind() const override { return "FixedBatches"; }

 private:
  std::vector<data::Batch> batches_;
  int64_t epoch_ = 0, index_ = 0;
};

LlamaConfig small_config() {
  LlamaConfig c = LlamaConfig::preset("llama3-debug");
  c.layers = 2;
  c.vocab = 64;
  c.context = 16;
  c.init_std = 0.2f;
  return c;
}

TEST(DocumentPositions, TheBatchsPositionsReachTheModel) {
  nn::manual_seed(5);
  Llama model(small_config());
  const Tensor ids =
      Tensor::from_vector(std::vector<int64_t>{3, 9, 27, 17, 51, 41, 59, 13}, {1, 8});
  // Two documents of 4 tokens in one row.
  const Tensor positions =
      Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {1, 8});
  FixedBatches inner(
      {{.input = ids, .target = ids.reshape({8}), .size = 1, .positions = positions}});
  DocumentPositions source(inner, model);
  nn::NoSaveScope no_save;
  data::Batch batch;
  source.start_epoch(0);
  ASSERT_TRUE(source.next(batch));
  const Tensor through_source = model.forward(batch.input);
  model.set_positions(Tensor(), false);
  const Tensor plain = model.forward(ids);
  model.set_positions(positions, true);
  const Tensor by_hand = model.forward(ids);
  EXPECT_TRUE(test::bit_identical(through_source, by_hand));
  EXPECT_FALSE(test::bit_identical(through_source, plain));
  EXPECT_FALSE(source.next(batch));
  EXPECT_EQ(source.batch_index(), 1);
  EXPECT_EQ(source.batches_per_epoch(), 1);
  EXPECT_EQ(source.kind(), "FixedBatches");
}

TEST(DocumentPositions, RefusesABatchWithoutPositions) {
  nn::manual_seed(5);
  Llama model(small_config());
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4}, {1, 4});
  FixedBatches inner({{.input = ids, .target = ids.reshape({4}), .size = 1}});
  DocumentPositions source(inner, model);
  data::Batch batch;
  source.start_epoch(0);
  try {
    source.next(batch);
    FAIL() << "a batch without positions was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without positions"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoker::llm
