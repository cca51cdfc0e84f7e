// Hugging Face transformers Llama folders (LlamaForCausalLM's save_pretrained output:
// config.json + model.safetensors, or shards listed by model.safetensors.index.json) read into
// and written from llm::Llama. The weights map one to one onto transformers' names ("model."
// prefix), except the two weights llama_model.h fuses: qkv_proj is q_proj | k_proj | v_proj and
// gate_up_proj is gate_proj | up_proj, stacked by rows. transformers' Llama rotates with the same
// rotate-half RoPE as ops::rope_qkv_forward, so no q/k row permutation is applied (that one
// belongs to converting Meta's original checkpoints). The format and what is refused:
// docs/formats.md#hugging-face-llama-folders.
//
// Errors are stoker::Error naming the file, the key or tensor, what was found and what was
// expected. Loading streams one tensor at a time (the files are mapped, not read whole); a file
// found bad before any weight is copied changes nothing. Saving is atomic per file (temporary,
// fsync, rename). Thread-safety: none; one call at a time per model.
#pragma once

#include <filesystem>

#include "llama_model.h"
#include "stoker/core/dtype.h"

namespace stoker::llm {

// The LlamaConfig of dir/config.json (model_type "llama"). Keys transformers' LlamaConfig
// defaults are defaulted the same way (num_key_value_heads = num_attention_heads, head_dim =
// hidden_size / num_attention_heads, rope_theta 10000, rms_norm_eps 1e-6, ...); the five shape
// keys (vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size) are
// required. rope_scaling: null, or rope_type "llama3" (factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings) or "default"; transformers 5's
// rope_parameters is read as well. Refused, naming the key: another model_type or hidden_act,
// another rope type, attention_bias or mlp_bias true. A list eos_token_id keeps its first id; a
// null bos/eos id reads as -1.
LlamaConfig read_hf_config(const std::filesystem::path& dir);

// Writes `config` as a config.json that transformers (4.40 and later) loads as a LlamaConfig,
// with torch_dtype naming `dtype` (f32 or bf16), atomically. Ids below 0 are written as null.
void write_hf_config(const std::filesystem::path& file, const LlamaConfig& config, DType dtype);

// Writes dir/model.safetensors (transformers' names and shapes, metadata format "pt" plus stoker's
// checksums, lm_head.weight only when untied) in `dtype` (f32, or bf16 rounded to nearest even
// from the f32 masters) and dir/config.json. Creates dir; refuses a dir that holds anything but
// config.json, model.safetensors and generation_config.json (which it keeps), so that a folder
// of other files is never mixed into. The caller keeps outputs off its inputs (core::PathGuard):
// saving into the folder the model was loaded from replaces it.
void save_hf(Llama& model, const std::filesystem::path& dir, DType dtype);

// Loads the weights of the folder into `model`, which must have been built from
// read_hf_config(dir) or a config equal to it in every field that shapes or computes the
// network (max_position_embeddings, initializer_range and the token ids may differ): a
// difference is refused naming the field and both values. Reads model.safetensors, or else the
// shards of model.safetensors.index.json's weight_map. Float weights of any dtype (F32, BF16,
// F16) are cast into the f32 masters. Missing tensors, tensors the model does not have and
// wrong shapes are refused naming the file, the tensor and both shapes, before any weight
// changes. Ignored: lm_head.weight of a tied model (transformers omits it when tying, and ties
// it to embed_tokens when loading), and rotary_emb.inv_freq buffers of old checkpoints (computed
// from the config).
void load_hf(Llama& model, const std::filesystem::path& dir);

}  // namespace stoker::llm
