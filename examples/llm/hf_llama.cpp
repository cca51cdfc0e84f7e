// Hugging Face Llama folders <-> llm::Llama (hf_llama.h).
#include "hf_llama.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/ops/layout.h"
#include "stoker/train/safetensors.h"
#include "util/atomic_file.h"

namespace stoker::llm {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kGenerationFile = "generation_config.json";
constexpr const char* kFolderHint =
    "give the folder that transformers' save_pretrained (or stoker's save_hf) wrote";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The whole file as JSON, read through a descriptor opened without blocking (a FIFO never hangs).
json read_json(const fs::path& file, std::string_view what) {
  core::check_input_file(file, what);
  const int fd = core::open_input_file(file, what);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      STOKER_THROW(fmt::format("cannot read {}: {}", file.string(), std::strerror(err)));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    core::detail::throw_error(__FILE__, __LINE__,
                              fmt::format("{} is not valid JSON ({})", file.string(), e.what()),
                              kFolderHint);
  }
}

// Typed look-ups in one JSON object of a config file; errors name the file and the key.
class Keys {
 public:
  Keys(const fs::path& file, const json& object, std::string prefix = "")
      : file_(file), j_(object), prefix_(std::move(prefix)) {}

  // The value, or nullptr when the key is absent or null (transformers' None: the default).
  const json* get(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void bad(const char* key, std::string_view expected) const {
    core::detail::throw_error(__FILE__, __LINE__,
                              fmt::format("{}: '{}{}' is {}; expected {}", file_.string(), prefix_,
                                          key, j_.at(key).dump(), expected),
                              kFolderHint);
  }
  [[noreturn]] void missing(const char* key, std::string_view expected) const {
    core::detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("{} has no '{}{}' ({}); a transformers LlamaConfig records it", file_.string(),
                    prefix_, key, expected),
        kFolderHint);
  }
  int64_t count(const char* key, std::optional<int64_t> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (!fallback) missing(key, "a positive integer");
      return *fallback;
    }
    if (!v->is_number_integer() || v->get<int64_t>() <= 0) bad(key, "a positive integer");
    return v->get<int64_t>();
  }
  double number(const char* key, std::optional<double> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (!fallback) missing(key, "a positive number");
      return *fallback;
    }
    if (!v->is_number() || !(v->get<double>() > 0)) bad(key, "a positive number");
    return v->get<double>();
  }
  bool flag(const char* key, bool fallback) const {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) bad(key, "true or false");
    return v->get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) bad(key, "a string");
    return v->get<std::string>();
  }
  // A token id: an integer, null (-1) or, for eos_token_id, a list whose first id is kept.
  int64_t token_id(const char* key, int64_t fallback) const {
    const auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if (it->is_null()) return -1;
    const json& v = it->is_array() && !it->empty() ? it->front() : *it;
    if (it->is_array() && it->empty()) return -1;
    if (!v.is_number_integer() || v.get<int64_t>() < 0) bad(key, "a token id (or a list of them)");
    return v.get<int64_t>();
  }

 private:
  const fs::path& file_;
  const json& j_;
  std::string prefix_;
};

// The rope_type of a rope_scaling / rope_parameters object into `rope`.
void read_rope_type(const fs::path& file, const json& object, const std::string& key,
                    ops::RopeOptions& rope) {
  STOKER_CHECK_HINT(object.is_object(), kFolderHint, file.string(), ": '", key, "' is ",
                    object.dump(), "; expected null or an object with rope_type");
  const Keys k(file, object, key + ".");
  // transformers before 4.43 wrote "type"; later versions "rope_type".
  const std::string type = k.get("rope_type") ? k.text("rope_type", "") : k.text("type", "default");
  if (type == "default") return;
  STOKER_CHECK_HINT(type == "llama3",
                    "stoker's RoPE implements transformers' \"default\" and \"llama3\" types only "
                    "(Llama 3, 3.1, 3.2); convert the model with one of them",
                    file.string(), ": ", key, " type \"", type, "\" is not supported");
  rope.llama3_scaling = true;
  rope.factor = k.number("factor", std::nullopt);
  rope.low_freq_factor = k.number("low_freq_factor", std::nullopt);
  rope.high_freq_factor = k.number("high_freq_factor", std::nullopt);
  rope.original_max_position_embeddings = k.count("original_max_position_embeddings", std::nullopt);
  STOKER_CHECK_HINT(rope.high_freq_factor > rope.low_freq_factor, kFolderHint, file.string(), ": ",
                    key, ".high_freq_factor ", rope.high_freq_factor,
                    " must exceed low_freq_factor ", rope.low_freq_factor,
                    " (transformers divides by their difference)");
}

// A float as the shortest decimal that reads back to it ("1e-05", not 9.99999974737875e-06).
double shortest(float v) { return std::stod(fmt::format("{}", v)); }

// One transformers tensor that makes up rows [begin, end) of a stoker parameter.
struct Part {
  std::string hf_name;
  int64_t begin = 0, end = 0;
};

// The transformers tensors of stoker parameter `name` (llama_model.h's names), in row order.
std::vector<Part> hf_parts(const std::string& name, const Shape& shape, const LlamaConfig& c) {
  const int64_t rows = shape[0];
  if (name == "lm_head.weight") return {{name, 0, rows}};
  auto split = [&](const std::string& fused, std::vector<std::pair<std::string, int64_t>> pieces) {
    const std::string prefix = "model." + name.substr(0, name.size() - fused.size());
    std::vector<Part> parts;
    int64_t at = 0;
    for (const auto& [piece, n] : pieces) {
      parts.push_back({prefix + piece + ".weight", at, at + n});
      at += n;
    }
    STOKER_CHECK(at == rows, name, ": ", shape.str(), " is not the ", at,
                 " rows of its transformers parts (", c.str(), ")");
    return parts;
  };
  if (ends_with(name, "self_attn.qkv_proj.weight"))
    return split("qkv_proj.weight", {{"q_proj", c.heads * c.head_dim},
                                     {"k_proj", c.kv_heads * c.head_dim},
                                     {"v_proj", c.kv_heads * c.head_dim}});
  if (ends_with(name, "mlp.gate_up_proj.weight"))
    return split("gate_up_proj.weight", {{"gate_proj", c.ffn}, {"up_proj", c.ffn}});
  return {{"model." + name, 0, rows}};
}

Shape rows_of(const Shape& shape, int64_t rows) {
  Shape s = shape;
  s[0] = rows;
  return s;
}

// Refuses a model config that computes differently from the folder's (hf_llama.h: load_hf).
void check_same_network(const LlamaConfig& model, const LlamaConfig& file, const fs::path& path) {
  auto differ = [&](const char* key, const auto& ours, const auto& theirs) {
    // fmt: bools as true/false, floats as their shortest decimal.
    STOKER_CHECK_HINT(
        ours == theirs,
        "build the model from llm::read_hf_config(folder), or give the folder "
        "saved from this model",
        fmt::format("the model has {} {} but {} says {}", key, ours, path.string(), theirs));
  };
  differ("vocab_size", model.vocab, file.vocab);
  differ("hidden_size", model.d_model, file.d_model);
  differ("num_hidden_layers", model.layers, file.layers);
  differ("num_attention_heads", model.heads, file.heads);
  differ("num_key_value_heads", model.kv_heads, file.kv_heads);
  differ("head_dim", model.head_dim, file.head_dim);
  differ("intermediate_size", model.ffn, file.ffn);
  differ("rms_norm_eps", model.rms_eps, file.rms_eps);
  differ("tie_word_embeddings", model.tie_embeddings, file.tie_embeddings);
  differ("rope_theta", model.rope.theta, file.rope.theta);
  differ("rope_scaling (llama3)", model.rope.llama3_scaling, file.rope.llama3_scaling);
  if (model.rope.llama3_scaling) {
    differ("rope_scaling.factor", model.rope.factor, file.rope.factor);
    differ("rope_scaling.low_freq_factor", model.rope.low_freq_factor, file.rope.low_freq_factor);
    differ("rope_scaling.high_freq_factor", model.rope.high_freq_factor,
           file.rope.high_freq_factor);
    differ("rope_scaling.original_max_position_embeddings",
           model.rope.original_max_position_embeddings, file.rope.original_max_position_embeddings);
  }
}

// The tensors of a folder's weight files: which opened file holds each name.
struct WeightFiles {
  std::vector<std::unique_ptr<train::SafetensorsReader>> readers;
  std::map<std::string, const train::SafetensorsReader*> where;
  fs::path listing;  // the file that lists the tensors (model.safetensors or the index)
};

WeightFiles open_weights(const fs::path& dir) {
  WeightFiles w;
  std::error_code ec;
  const fs::path single = dir / kWeightsFile;
  if (fs::exists(fs::symlink_status(single, ec))) {
    core::check_input_file(single, "the Hugging Face folder's weights");
    w.readers.push_back(std::make_unique<train::SafetensorsReader>(single));
    for (const std::string& name : w.readers.back()->names())
      w.where[name] = w.readers.back().get();
    w.listing = single;
    return w;
  }
  const fs::path index = dir / kIndexFile;
  STOKER_CHECK_HINT(fs::exists(fs::symlink_status(index, ec)), kFolderHint, dir.string(),
                    " has neither ", kWeightsFile, " nor ", kIndexFile, " (the weights)");
  w.listing = index;
  const json j = read_json(index, "the Hugging Face folder's weight index");
  STOKER_CHECK_HINT(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object() &&
                        !j["weight_map"].empty(),
                    kFolderHint, index.string(),
                    ": expected an object with a non-empty 'weight_map' of tensor name -> file");
  std::map<std::string, const train::SafetensorsReader*> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    STOKER_CHECK_HINT(file.is_string(), kFolderHint, index.string(), ": weight_map['", name,
                      "'] is ", file.dump(), "; expected a file name");
    const std::string f = file.get<std::string>();
    // Shards lie beside the index: a path elsewhere is not this folder's.
    STOKER_CHECK_HINT(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                      kFolderHint, index.string(), ": weight_map['", name, "'] is \"", f,
                      "\"; expected the name of a file in ", dir.string());
    auto it = by_file.find(f);
    if (it == by_file.end()) {
      core::check_input_file(dir / f, fmt::format("{}'s shard", index.string()));
      w.readers.push_back(std::make_unique<train::SafetensorsReader>(dir / f));
      it = by_file.emplace(f, w.readers.back().get()).first;
    }
    STOKER_CHECK_HINT(it->second->contains(name), kFolderHint, index.string(), " puts tensor '",
                      name, "' in ", f, ", which has no such tensor");
    w.where[name] = it->second;
  }
  return w;
}

}  // namespace

LlamaConfig read_hf_config(const fs::path& dir) {
  core::check_input_folder(dir, "the Hugging Face folder", {kConfigFile});
  const fs::path file = dir / kConfigFile;
  const json j = read_json(file, "the Hugging Face folder's config.json");
  STOKER_CHECK_HINT(j.is_object(), kFolderHint, file.string(), " is not a JSON object");
  const Keys k(file, j);

  const std::string model_type = k.text("model_type", "");
  STOKER_CHECK_HINT(model_type == "llama",
                    "stoker reads transformers Llama folders (model_type \"llama\", "
                    "LlamaForCausalLM) only",
                    file.string(), ": model_type is ",
                    model_type.empty() ? std::string("missing") : "\"" + model_type + "\"",
                    "; expected \"llama\"");
  if (const json* arch = k.get("architectures")) {
    STOKER_CHECK_HINT(
        arch->is_array() &&
            std::find(arch->begin(), arch->end(), json("LlamaForCausalLM")) != arch->end(),
        "stoker's Llama is the causal LM (an embedding, the blocks and lm_head)", file.string(),
        ": architectures is ", arch->dump(), "; expected [\"LlamaForCausalLM\"]");
  }
  const std::string act = k.text("hidden_act", "silu");
  STOKER_CHECK_HINT(act == "silu", "stoker's Llama MLP is SwiGLU (silu)", file.string(),
                    ": hidden_act is \"", act, "\"; expected \"silu\"");
  for (const char* key : {"attention_bias", "mlp_bias"})
    STOKER_CHECK_HINT(!k.flag(key, false), "stoker's Llama has no biases (Llama 3 has none)",
                      file.string(), ": ", key, " is true; expected false");

  LlamaConfig c;
  c.vocab = k.count("vocab_size", std::nullopt);
  c.d_model = k.count("hidden_size", std::nullopt);
  c.layers = k.count("num_hidden_layers", std::nullopt);
  c.heads = k.count("num_attention_heads", std::nullopt);
  c.kv_heads = k.count("num_key_value_heads", c.heads);
  c.ffn = k.count("intermediate_size", std::nullopt);
  STOKER_CHECK_HINT(c.heads % c.kv_heads == 0, kFolderHint, file.string(), ": num_key_value_heads ",
                    c.kv_heads, " does not divide num_attention_heads ", c.heads);
  if (k.get("head_dim") == nullptr)
    STOKER_CHECK_HINT(c.d_model % c.heads == 0, kFolderHint, file.string(), ": hidden_size ",
                      c.d_model, " is not a multiple of num_attention_heads ", c.heads,
                      " and no head_dim is given");
  c.head_dim = k.count("head_dim", c.d_model / c.heads);
  STOKER_CHECK_HINT(c.head_dim % 2 == 0, kFolderHint, file.string(), ": head_dim ", c.head_dim,
                    " is odd; RoPE rotates pairs");
  c.context = k.count("max_position_embeddings", 2048);
  c.rms_eps = static_cast<float>(k.number("rms_norm_eps", 1e-6));
  c.init_std = static_cast<float>(k.number("initializer_range", 0.02));
  c.tie_embeddings = k.flag("tie_word_embeddings", false);
  c.bos_id = k.token_id("bos_token_id", 1);
  c.eos_id = k.token_id("eos_token_id", 2);

  c.rope = ops::RopeOptions{};
  c.rope.head_dim = c.head_dim;
  c.rope.llama3_scaling = false;
  c.rope.theta = 10000.0;
  // transformers 5 keeps rope_theta and the type in rope_parameters; 4.x at the top level and in
  // rope_scaling.
  const json* params = k.get("rope_parameters");
  if (params != nullptr) {
    STOKER_CHECK_HINT(params->is_object(), kFolderHint, file.string(), ": rope_parameters is ",
                      params->dump(), "; expected an object");
    c.rope.theta = Keys(file, *params, "rope_parameters.").number("rope_theta", c.rope.theta);
  }
  c.rope.theta = k.number("rope_theta", c.rope.theta);
  if (const json* scaling = k.get("rope_scaling"))
    read_rope_type(file, *scaling, "rope_scaling", c.rope);
  else if (params != nullptr)
    read_rope_type(file, *params, "rope_parameters", c.rope);
  return c;
}

void write_hf_config(const fs::path& file, const LlamaConfig& c, DType dtype) {
  STOKER_CHECK_HINT(dtype == DType::f32 || dtype == DType::bf16,
                    "save the Hugging Face folder in f32 or bf16", "write_hf_config(",
                    file.string(), "): dtype ", dtype_name(dtype), " is not f32 or bf16");
  auto id = [](int64_t v) { return v < 0 ? json(nullptr) : json(v); };
  json rope_scaling = nullptr;
  if (c.rope.llama3_scaling)
    rope_scaling = {{"rope_type", "llama3"},
                    {"factor", c.rope.factor},
                    {"low_freq_factor", c.rope.low_freq_factor},
                    {"high_freq_factor", c.rope.high_freq_factor},
                    {"original_max_position_embeddings", c.rope.original_max_position_embeddings}};
  // Keys sorted, as transformers writes them (nlohmann's object is a sorted map).
  const json j = {{"architectures", {"LlamaForCausalLM"}},
                  {"attention_bias", false},
                  {"attention_dropout", 0.0},
                  {"bos_token_id", id(c.bos_id)},
                  {"eos_token_id", id(c.eos_id)},
                  {"head_dim", c.head_dim},
                  {"hidden_act", "silu"},
                  {"hidden_size", c.d_model},
                  {"initializer_range", shortest(c.init_std)},
                  {"intermediate_size", c.ffn},
                  {"max_position_embeddings", c.context},
                  {"mlp_bias", false},
                  {"model_type", "llama"},
                  {"num_attention_heads", c.heads},
                  {"num_hidden_layers", c.layers},
                  {"num_key_value_heads", c.kv_heads},
                  {"pretraining_tp", 1},
                  {"rms_norm_eps", shortest(c.rms_eps)},
                  {"rope_scaling", rope_scaling},
                  {"rope_theta", c.rope.theta},
                  {"tie_word_embeddings", c.tie_embeddings},
                  {"torch_dtype", dtype == DType::f32 ? "float32" : "bfloat16"},
                  {"use_cache", true},
                  {"vocab_size", c.vocab}};
  const std::string text = j.dump(2) + "\n";
  util::write_file_atomically(file,
                              [&](int fd) { util::write_all(fd, text.data(), text.size(), file); });
}

void save_hf(Llama& model, const fs::path& dir, DType dtype) {
  STOKER_CHECK_HINT(dtype == DType::f32 || dtype == DType::bf16,
                    "save the Hugging Face folder in f32 or bf16", "save_hf(", dir.string(),
                    "): dtype ", dtype_name(dtype), " is not f32 or bf16");
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    STOKER_CHECK_HINT(fs::is_directory(st), "pick another --save folder (a new or empty one)",
                      "the Hugging Face folder ", dir.string(), " is a file, not a folder");
    // What killed earlier saves left behind (their writers are gone) is not a foreign file.
    util::remove_stale_temporaries(dir, ".safetensors");
    util::remove_stale_temporaries(dir, ".json");
    std::vector<std::string> foreign;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name != kConfigFile && name != kWeightsFile && name != kGenerationFile)
        foreign.push_back(name);
    }
    STOKER_CHECK(!ec, "cannot list ", dir.string(), ": ", ec.message());
    std::sort(foreign.begin(), foreign.end());
    if (foreign.size() > 5) {
      foreign.resize(5);
      foreign.push_back("...");
    }
    STOKER_CHECK_HINT(foreign.empty(), "pick another --save folder (a new or empty one)",
                      dir.string(), " holds files that save_hf would not write (",
                      fmt::format("{}", fmt::join(foreign, ", ")),
                      "); a Hugging Face folder is written only into a folder of its own");
  }
  core::check_output_dir(dir, "the Hugging Face folder");

  const LlamaConfig& c = model.config();
  std::vector<train::NamedTensor> tensors;
  for (const auto& [name, p] : model.named_parameters()) {
    Tensor value = p->value();
    // bf16 is cast on the host, one parameter at a time: a GPU model needs no second copy.
    if (dtype == DType::bf16 && !value.device().is_cpu()) value = value.to(Device::cpu());
    for (const Part& part : hf_parts(name, value.shape(), c)) {
      Tensor rows =
          part.begin == 0 && part.end == value.size(0) ? value : value.slice(part.begin, part.end);
      if (dtype == DType::bf16) {
        Tensor half = Tensor::empty(rows.shape(), DType::bf16);
        ops::cast(half, rows);
        rows = half;
      }
      tensors.push_back({part.hf_name, rows});
    }
  }
  train::save_safetensors(dir / kWeightsFile, tensors, {{"format", "pt"}});
  write_hf_config(dir / kConfigFile, c, dtype);
}

void load_hf(Llama& model, const fs::path& dir) {
  const LlamaConfig& c = model.config();
  check_same_network(c, read_hf_config(dir), dir / kConfigFile);
  const WeightFiles w = open_weights(dir);

  // Every name, shape and dtype is checked before any weight changes.
  struct Target {
    nn::Parameter* parameter;
    std::vector<Part> parts;
  };
  std::vector<Target> targets;
  std::set<std::string> used;
  for (const auto& [name, p] : model.named_parameters()) {
    Target t{p, hf_parts(name, p->shape(), c)};
    for (const Part& part : t.parts) {
      const auto it = w.where.find(part.hf_name);
      STOKER_CHECK_HINT(it != w.where.end(), kFolderHint, w.listing.string(), " has no tensor '",
                        part.hf_name, "' (", name, " of the model: ", c.str(), ")");
      const train::SafetensorsReader::Entry& e = it->second->entry(part.hf_name);
      const Shape want = rows_of(p->shape(), part.end - part.begin);
      STOKER_CHECK_HINT(e.shape == want, kFolderHint, it->second->path().string(), ", tensor '",
                        part.hf_name, "': the file holds ", e.shape.str(), " but config.json's ",
                        c.str(), " needs ", want.str());
      STOKER_CHECK_HINT(is_float(e.dtype), kFolderHint, it->second->path().string(), ", tensor '",
                        part.hf_name, "': dtype ", train::safetensors_dtype_name(e.dtype),
                        " is not F32, BF16 or F16");
      used.insert(part.hf_name);
    }
    targets.push_back(std::move(t));
  }
  for (const auto& [name, reader] : w.where) {
    if (used.count(name)) continue;
    // transformers omits a tied head when saving and ties it when loading: a copy is ignored.
    if (c.tie_embeddings && name == "lm_head.weight") continue;
    // Old checkpoints stored RoPE's inverse frequencies; they follow from the config.
    if (ends_with(name, ".rotary_emb.inv_freq")) continue;
    STOKER_CHECK_HINT(false, kFolderHint, reader->path().string(), " has tensor '", name,
                      "' that a Llama of config.json's ", c.str(), " does not have");
  }

  // One parameter at a time: each part is read (mapped pages), cast into the f32 rows, and a
  // GPU parameter gets one host-to-device copy.
  for (const Target& t : targets) {
    nn::Parameter& p = *t.parameter;
    const bool on_host = p.device().is_cpu();
    const Tensor host = on_host ? p.value() : Tensor::empty(p.shape(), DType::f32);
    for (const Part& part : t.parts) {
      const Tensor src = w.where.at(part.hf_name)->load(part.hf_name);
      const Tensor dst =
          part.begin == 0 && part.end == host.size(0) ? host : host.slice(part.begin, part.end);
      ops::cast(dst, src);
    }
    if (on_host)
      p.value_changed();
    else
      p.set_value(host);
  }
}

}  // namespace stoker::llm
