// examples/llm's KV-cache generation on the CPU: greedy tokens with the cache equal the greedy
// tokens of a full forward over the whole window at each step (f32, a random llama3-debug-sized
// model with grouped-query attention), top-k draws are a pure function of the seed, and the
// errors for an empty prompt, an id outside the vocabulary and a prompt + count over the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "generate.h"
#include "llama_model.h"
#include "test_util.h"

namespace stoker::llm {
namespace {

// llama3-debug's shapes (V 1024, C 128, 4 layers, H 4, KV 2, D 32), a shorter context; a larger
// init std than training's so that the logits of a random model are far from ties.
LlamaConfig debug_config() {
  LlamaConfig c = LlamaConfig::preset("llama3-debug");
  c.context = 48;
  c.init_std = 0.1f;
  return c;
}

// The greedy reference: each step a full forward over every token so far, the last row's argmax.
std::vector<int64_t> greedy_by_full_forward(Llama& model, std::vector<int64_t> tokens,
                                            int64_t count) {
  nn::NoSaveScope no_save;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = static_cast<int64_t>(tokens.size());
    const Tensor logits = model.forward(Tensor::from_vector(tokens, {1, t}));
    const std::vector<float> last = logits.slice(t - 1, t).to_floats();
    const int64_t next = std::max_element(last.begin(), last.end()) - last.begin();
    out.push_back(next);
    tokens.push_back(next);
  }
  return out;
}

// The message of the stoker::Error that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LlamaGenerate, GreedyWithTheCacheEqualsFullForwards) {
  nn::manual_seed(7);
  Llama model(debug_config());
  model.set_training(false);
  const std::vector<int64_t> prompt{5, 900, 17, 3, 250, 1023, 64};
  const int64_t count = 30;
  const std::vector<int64_t> cached = generate(model, prompt, count, 1, 1.0f, 0);
  const std::vector<int64_t> full = greedy_by_full_forward(model, prompt, count);
  ASSERT_EQ(cached.size(), static_cast<size_t>(count));
  EXPECT_EQ(cached, full);
  // Not a constant sequence (the comparison would then prove little).
  EXPECT_GT(std::count_if(cached.begin(), cached.end(), [&](int64_t t) { return t != cached[0]; }),
            0);
}

TEST(LlamaGenerate, OneTokenPromptAndTiedHead) {
  LlamaConfig c = debug_config();
  c.tie_embeddings = true;
  c.layers = 2;
  nn::manual_seed(3);
  Llama model(c);
  const std::vector<int64_t> prompt{42};
  EXPECT_EQ(generate(model, prompt, 12, 1, 1.0f, 0), greedy_by_full_forward(model, prompt, 12));
}

TEST(LlamaGenerate, TopKDrawsArePureFunctionsOfTheSeed) {
  nn::manual_seed(11);
  Llama model(debug_config());
  const std::vector<int64_t> prompt{1, 2, 3};
  const auto a = generate(model, prompt, 20, 50, 1.5f, 123);
  const auto b = generate(model, prompt, 20, 50, 1.5f, 123);
  const auto c = generate(model, prompt, 20, 50, 1.5f, 124);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (const int64_t t : a) EXPECT_TRUE(t >= 0 && t < 1024) << t;
  // top_k limits the draw to the k largest logits.
  const std::vector<float> logits{0.0f, 5.0f, 1.0f, 4.9f, -3.0f};
  for (uint64_t draw = 0; draw < 64; ++draw) {
    const int64_t t = sample_token(logits, 2, 1.0f, 9, draw);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  EXPECT_EQ(sample_token(logits, 1, 1.0f, 9, 0), 1);
}

TEST(LlamaGenerate, RefusesEmptyPromptsBadIdsAndTooLongWindows) {
  nn::manual_seed(1);
  LlamaConfig c = debug_config();
  c.layers = 1;
  Llama model(c);
  const auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_PRED2(has, error_of([&] { generate(model, {}, 4, 1, 1.0f, 0); }), "prompt is empty");
  EXPECT_PRED2(has, error_of([&] {
                 generate(model, {1, 2024}, 4, 1, 1.0f, 0);
               }),
               "outside the vocabulary");
  EXPECT_PRED2(has, error_of([&] { generate(model, std::vector<int64_t>(40, 1), 9, 1, 1.0f, 0); }),
               "more than the model's context of 48");
  EXPECT_EQ(generate(model, std::vector<int64_t>(40, 1), 8, 1, 1.0f, 0).size(), 8u);
}

}  // namespace
}  // namespace stoker::llm
