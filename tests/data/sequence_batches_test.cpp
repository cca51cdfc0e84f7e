// SequenceBatches: an epoch delivers every sequence of its global order once (padding aside),
// the same order for 1-4 ranks and 0-8 worker threads, a mixture follows its weights, and an
// epoch checkpointed on W ranks continues on W' with no slot repeated or skipped. The corpora are
// raw uint32 files whose ids are their positions + 1, so each delivered row names its sequence.
#include "stoker/data/sequence_batches.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <vector>

#include "data_test_util.h"
#include "stoker/core/error.h"

namespace stoker::data {
namespace {

using test::TempDir;

std::filesystem::path write_corpus(const TempDir& dir, const std::string& name, int64_t tokens,
                                   uint32_t first_id) {
  std::vector<uint32_t> ids(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i)
    ids[static_cast<size_t>(i)] = first_id + static_cast<uint32_t>(i);
  const auto path = dir / name;
  test::write_bytes(path, ids.data(), ids.size() * sizeof(uint32_t));
  return path;
}

TokenCorpusOptions raw_u32() { return {.format = TokenFormat::raw, .token_bytes = 4}; }

constexpr int64_t kT = 4;

// Three sources of distinct id ranges: source s's sequence i starts with id base_s + i T.
struct Fixture {
  TempDir dir;
  std::vector<std::unique_ptr<TokenCorpus>> corpora;
  std::vector<std::unique_ptr<TokenSequences>> sequences;
  Fixture(std::vector<int64_t> tokens = {4 * 97 + 1, 4 * 13 + 1, 4 * 301 + 1}) {
    for (size_t s = 0; s < tokens.size(); ++s) {
      corpora.push_back(std::make_unique<TokenCorpus>(
          write_corpus(dir, "c" + std::to_string(s) + ".bin", tokens[s],
                       static_cast<uint32_t>(1'000'000 * (s + 1)))
              .string(),
          raw_u32()));
      sequences.push_back(
          std::make_unique<TokenSequences>(*corpora.back(), TokenSequencesOptions{.context = kT}));
    }
  }
  std::vector<SequenceSource> sources(std::vector<double> weights) const {
    std::vector<SequenceSource> out;
    for (size_t s = 0; s < weights.size(); ++s) out.push_back({sequences[s].get(), weights[s], ""});
    return out;
  }
};

// What a delivered row is: (source, sequence), read back from its first id.
std::pair<int, int64_t> identify(int64_t first_id) {
  const int s = static_cast<int>(first_id / 1'000'000) - 1;
  return {s, (first_id % 1'000'000) / kT};
}

// Runs `ranks` sources of one job batch index by batch index from wherever they stand to the end
// of the epoch (or `limit` batch indices), appending each row's (source, sequence) in global
// order: batch index, then rank, then row.
void run(std::vector<std::unique_ptr<SequenceBatches>>& ranks,
         std::vector<std::pair<int, int64_t>>& order, int64_t limit = INT64_MAX) {
  for (int64_t n = 0; n < limit; ++n) {
    bool any = false, all = true;
    std::vector<Batch> batches(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) {
      const bool got = ranks[r]->next(batches[r]);
      any |= got;
      all &= got;
    }
    ASSERT_EQ(any, all) << "ranks disagree on the epoch's end";
    if (!any) return;
    for (auto& b : batches) {
      const int64_t* in = b.input.data<int64_t>();
      const int64_t* tg = b.target.data<int64_t>();
      for (int64_t j = 0; j < b.size; ++j) {
        for (int64_t k = 0; k < kT; ++k) {  // each row is one sequence's consecutive ids
          ASSERT_EQ(in[j * kT + k], in[j * kT] + k);
          ASSERT_EQ(tg[j * kT + k], in[j * kT] + k + 1);
        }
        order.push_back(identify(in[j * kT]));
      }
    }
  }
}

std::vector<std::unique_ptr<SequenceBatches>> job(const Fixture& f, std::vector<double> weights,
                                                  int world, SequenceBatchesOptions o) {
  std::vector<std::unique_ptr<SequenceBatches>> ranks;
  for (int r = 0; r < world; ++r) {
    o.rank = r;
    o.world_size = world;
    ranks.push_back(std::make_unique<SequenceBatches>(f.sources(weights), o));
  }
  return ranks;
}

// The global order of an epoch as the stream defines it: slot() of e M + i, i in [0, M).
std::vector<std::pair<int, int64_t>> global_order(const SequenceBatches& s, int64_t epoch) {
  std::vector<std::pair<int, int64_t>> out;
  for (int64_t i = 0; i < s.sequences_per_epoch(); ++i) {
    const auto slot = s.slot(epoch * s.sequences_per_epoch() + i);
    out.push_back({slot.source, slot.sequence});
  }
  return out;
}

TEST(SequenceBatches, AnEpochIsEverySequenceOnceInOneOrderForAnyRanksAndThreads) {
  Fixture f;
  const SequenceBatches reference(f.sources({1}), {.batch_size = 3, .seed = 9, .threads = 0});
  const int64_t n = f.sequences[0]->size();
  ASSERT_EQ(n, 97);
  ASSERT_EQ(reference.sequences_per_epoch(), n);
  for (int64_t epoch : {0, 1}) {
    const auto order = global_order(reference, epoch);
    // The order is a permutation of the sequences, another one each epoch.
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)].second, i);
    if (epoch == 1) EXPECT_NE(order, global_order(reference, 0));
    for (int world : {1, 2, 3, 4}) {
      for (int threads : {0, 1, 3, 8}) {
        auto ranks = job(f, {1}, world, {.batch_size = 3, .seed = 9, .threads = threads});
        for (auto& r : ranks) r->start_epoch(epoch);
        std::vector<std::pair<int, int64_t>> got;
        run(ranks, got);
        // The epoch's order, then padding: its first slots again, up to whole batches.
        const int64_t per_batch = 3 * world;
        ASSERT_EQ(static_cast<int64_t>(got.size()), (n + per_batch - 1) / per_batch * per_batch)
            << world << " ranks, " << threads << " threads";
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], order[i % static_cast<size_t>(n)])
              << "slot " << i << ", " << world << " ranks, " << threads << " threads";
        EXPECT_EQ(ranks[0]->epoch_progress(), n);
      }
    }
  }
  // Tail drop: floor(n / (W B)) whole batches, the order's prefix.
  auto ranks = job(f, {1}, 2, {.batch_size = 3, .seed = 9, .tail = ShardTail::drop});
  for (auto& r : ranks) r->start_epoch(0);
  std::vector<std::pair<int, int64_t>> got;
  run(ranks, got);
  EXPECT_EQ(got.size(), 96u);
  const auto order = global_order(reference, 0);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), order.begin()));
}

TEST(SequenceBatches, AMixtureFollowsItsWeightsAndCountsEachSourcesEpochs) {
  Fixture f;
  // Weights that are no simple fractions (a schedule of 0.5/0.3/0.2 repeats every 10 slots).
  const std::vector<double> w = {0.3949, 0.3333, 0.2718};
  const SequenceBatches mix(f.sources(w),
                            {.batch_size = 4, .sequences_per_epoch = 10'000, .threads = 0});
  std::vector<int> source(10'000);
  for (int64_t g = 0; g < 10'000; ++g) source[static_cast<size_t>(g)] = mix.slot(g).source;
  std::vector<int64_t> count(3, 0);
  double worst_prefix = 0, worst_window = 0;
  std::vector<std::vector<int64_t>> prefix(3, std::vector<int64_t>(10'001, 0));
  for (int64_t g = 0; g < 10'000; ++g) {
    ++count[static_cast<size_t>(source[static_cast<size_t>(g)])];
    for (int s = 0; s < 3; ++s) {
      prefix[static_cast<size_t>(s)][static_cast<size_t>(g) + 1] = count[static_cast<size_t>(s)];
      worst_prefix = std::max(worst_prefix, std::abs(count[static_cast<size_t>(s)] -
                                                     (g + 1) * w[static_cast<size_t>(s)]));
    }
  }
  for (int s = 0; s < 3; ++s) {
    // Within 1 % over 10,000 sequences (in fact within one sequence).
    EXPECT_LE(std::abs(count[static_cast<size_t>(s)] - 10'000 * w[static_cast<size_t>(s)]), 100)
        << s;
    for (int64_t a = 0; a + 1000 <= 10'000; ++a) {
      const auto& p = prefix[static_cast<size_t>(s)];
      const double in_window =
          static_cast<double>(p[static_cast<size_t>(a) + 1000] - p[static_cast<size_t>(a)]);
      worst_window = std::max(worst_window, std::abs(in_window - 1000 * w[static_cast<size_t>(s)]));
    }
  }
  // After any number of sequences each source is within one of its share; so any 1,000
  // consecutive ones are within two (the difference of two such prefixes; 1.1 here).
  EXPECT_LT(worst_prefix, 1.0);
  EXPECT_LT(worst_window, 2.0);
  RecordProperty("worst_window_deviation", std::to_string(worst_window));

  // Each source visits its sequences once per source epoch: the small one (13 sequences) repeats,
  // the large one (301) is not exhausted after 1,000 slots.
  std::vector<std::map<int64_t, int>> seen(3);
  for (int64_t g = 0; g < 1000; ++g) {
    const auto s = mix.slot(g);
    ++seen[static_cast<size_t>(s.source)][s.sequence];
  }
  std::vector<int64_t> taken(3, 0);
  for (int64_t g = 0; g < 1000; ++g) ++taken[static_cast<size_t>(mix.slot(g).source)];
  for (int s = 0; s < 3; ++s) {
    const int64_t n = f.sequences[static_cast<size_t>(s)]->size();
    for (const auto& [seq, times] : seen[static_cast<size_t>(s)]) {
      const int64_t full = taken[static_cast<size_t>(s)] / n;
      EXPECT_TRUE(times == full || times == full + 1) << s << " " << seq << " " << times;
    }
  }
  EXPECT_EQ(taken[1] / 13, 25);                 // 333 slots of 13 sequences: 25 whole source epochs
  EXPECT_LT(taken[2], f.sequences[2]->size());  // 272 of 301

  // source_progress() reports those counts at the position.
  SequenceBatches pos(f.sources(w), {.batch_size = 10, .sequences_per_epoch = 1000, .threads = 0});
  pos.continue_epoch(0, 1000);
  const auto progress = pos.source_progress();
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(progress[static_cast<size_t>(s)].taken, taken[static_cast<size_t>(s)]);
    EXPECT_NEAR(progress[static_cast<size_t>(s)].weight, w[static_cast<size_t>(s)], 1e-12);
  }
  EXPECT_NE(pos.report().find("epochs"), std::string::npos);
}

// Resume 2 -> 3 -> 1 ranks in the middle of an epoch, through epoch_progress/continue_epoch:
// the concatenation is the epoch's global order, no slot repeated or skipped (padding only at
// the very end), for one source and for a mixture, with and without worker threads.
TEST(SequenceBatches, ResumingOnOtherWorldSizesContinuesTheGlobalOrderExactly) {
  Fixture f;
  for (const auto& weights : std::vector<std::vector<double>>{{1}, {0.6, 0.1, 0.3}}) {
    for (int threads : {0, 2}) {
      SequenceBatchesOptions o{.batch_size = 2,
                               .sequences_per_epoch = weights.size() > 1 ? 150 : 0,
                               .seed = 3,
                               .threads = threads};
      std::vector<std::pair<int, int64_t>> got;
      auto two = job(f, weights, 2, o);
      for (auto& r : two) r->restore(1, 0);
      run(two, got, 5);  // 5 batch indices x 2 ranks x 2 = 20 slots
      const int64_t p1 = two[0]->epoch_progress();
      EXPECT_EQ(p1, 20);
      EXPECT_EQ(two[1]->epoch_progress(), p1);
      auto three = job(f, weights, 3, o);
      for (auto& r : three) ASSERT_TRUE(r->continue_epoch(1, p1));
      run(three, got, 4);  // 24 slots
      const int64_t p2 = three[2]->epoch_progress();
      EXPECT_EQ(p2, 44);
      auto one = job(f, weights, 1, o);
      ASSERT_TRUE(one[0]->continue_epoch(1, p2));
      EXPECT_EQ(one[0]->batch_index() + (one[0]->sequences_per_epoch() - p2 + 1) / 2,
                one[0]->batches_per_epoch());
      run(one, got);
      const auto order = global_order(*one[0], 1);
      const auto m = static_cast<size_t>(one[0]->sequences_per_epoch());
      ASSERT_EQ(got.size(), m + (m % 2)) << weights.size() << " sources";
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], order[i % m]) << "slot " << i << ", " << weights.size() << " sources";
      // The epoch after the continued one is a plain one.
      one[0]->start_epoch(2);
      std::vector<std::pair<int, int64_t>> next;
      run(one, next, 3);
      const auto order2 = global_order(*one[0], 2);
      EXPECT_TRUE(std::equal(next.begin(), next.end(), order2.begin()));
    }
  }
}

TEST(SequenceBatches, DocumentMasksAndPinnedShapesTravelWithTheBatch) {
  Fixture f;
  SequenceBatches s(f.sources({1}), {.batch_size = 5, .dtype = DType::i32, .document_masks = true});
  s.start_epoch(0);
  Batch b;
  ASSERT_TRUE(s.next(b));
  EXPECT_EQ(b.input.shape(), (Shape{5, kT}));
  EXPECT_EQ(b.target.shape(), (Shape{5 * kT}));
  ASSERT_TRUE(b.positions.defined());
  EXPECT_EQ(b.documents.shape(), (Shape{5, kT}));
  const int32_t* pos = b.positions.data<int32_t>();
  const int32_t* in = b.input.data<int32_t>();
  for (int64_t k = 0; k < 5 * kT; ++k) EXPECT_EQ(pos[k], in[k] - 1'000'000);  // one document
}

TEST(SequenceBatches, BadInputsAreClearErrors) {
  Fixture f;
  auto message_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_FALSE(e.hint().empty());
      return e.message();
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  auto sources = f.sources({0.5, 0, 0.5});
  sources[1].name = "books.idx";
  std::string m = message_of([&] { SequenceBatches(sources, {}); });
  EXPECT_NE(m.find("the weight 0 of books.idx must be positive"), std::string::npos) << m;
  sources[1].weight = -0.25;
  m = message_of([&] { SequenceBatches(sources, {}); });
  EXPECT_NE(m.find("-0.25 of books.idx"), std::string::npos) << m;
  // Sources cut with other contexts cannot share a batch.
  const TokenSequences other(*f.corpora[0], {.context = kT + 1});
  m = message_of([&] { SequenceBatches({{f.sequences[0].get(), 1, "a"}, {&other, 1, "b"}}, {}); });
  EXPECT_NE(m.find("b has context 5"), std::string::npos) << m;
  // Tail drop with fewer sequences than one batch on every rank.
  m = message_of([&] {
    SequenceBatches(f.sources({1}), {.batch_size = 50, .tail = ShardTail::drop, .world_size = 2});
  });
  EXPECT_NE(m.find("makes no full batch of 50 on each of 2 ranks"), std::string::npos) << m;
  // A worker thread's failure (an id outside the vocabulary) is next()'s error, naming the id.
  const TokenSequences strict(*f.corpora[0], {.context = kT, .vocab_size = 1'000'002});
  SequenceBatches bad({{&strict, 1, "strict"}}, {.batch_size = 4, .threads = 2});
  bad.start_epoch(0);
  m = message_of([&] {
    Batch b;
    while (bad.next(b)) {
    }
  });
  EXPECT_NE(m.find("is outside the vocabulary [0, 1000002)"), std::string::npos) << m;
  // Progress outside the epoch.
  SequenceBatches s(f.sources({1}), {.threads = 0});
  EXPECT_THROW(s.continue_epoch(0, 98), Error);
}

}  // namespace
}  // namespace stoker::data
