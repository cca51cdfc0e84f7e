// Private: the attention core choice shared by nn::CausalSelfAttention and
// nn::GroupedQueryAttention (src/nn/attention*.cpp). Thread-safe (reads the environment).
#pragma once

#include <string_view>

#include "stoker/nn/attention.h"

namespace stoker::nn::detail {

// `chosen`, or for AttentionKernel::from_env the environment variable STOKER_ATTENTION, read
// now: unset, "" or "fused" -> fused; "math" -> math; any other value is an error naming `who`.
AttentionKernel resolve_attention_kernel(AttentionKernel chosen, std::string_view who);

}  // namespace stoker::nn::detail
