// Text generation from a Llama (llama_model.h) with a KV cache: the prompt is run through the
// blocks once (the prefill), each layer's rotated keys and values kept in a cache
// [KV, T_max, D] on the model's device, then one token at a time only the new token is
// projected and attends over the cache. The arithmetic is f32 on the model's master weights
// (Parameter::value()), whatever precision the model trains in; nothing is saved for backward.
// The attention of the H query heads over the cache is two ops::gemm_batched over the KV groups
// (the H / KV query heads of a group as the rows) against the whole cache, positions not yet
// written given probability 0 by the softmax, which runs on the host: a batch of one sequence,
// one host sync per layer and token, attention work O(T_max) per token.
//
// Not thread-safe (it runs the model's device's current stream); the model is only read.
#pragma once

#include <cstdint>
#include <vector>

#include "llama_model.h"

namespace stoker::llm {

// `count` tokens continuing `prompt` (ids < V), drawn greedily (top_k <= 1) or from the softmax
// at `temperature` of the top_k largest logits, one Philox draw per token: a pure function of
// `seed`. Throws for an empty prompt, an id outside the vocabulary, or prompt + count over
// max_position_embeddings (the cache's length). Returns the new tokens only.
std::vector<int64_t> generate(Llama& model, const std::vector<int64_t>& prompt, int64_t count,
                              int top_k, float temperature, uint64_t seed);

// The next token of `logits` (one row of V) as generate() draws it; `draw`: the token's index.
int64_t sample_token(const std::vector<float>& logits, int top_k, float temperature, uint64_t seed,
                     uint64_t draw);

}  // namespace stoker::llm
