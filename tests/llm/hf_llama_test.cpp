// examples/llm's Hugging Face folders (hf_llama.h) against transformers' own files: the fixture
// tests/llm/data (written by tests/llm/llama_hf_reference.py with transformers: two tiny random
// LlamaForCausalLM, untied and tied, and their fp32 logits and loss for fixed ids). Checked: the
// configs read; the loaded models' logits and loss equal transformers' (relative 1e-4, fp32 on
// the CPU); save_hf writes transformers' names, shapes and bits (f32) or the RNE-rounded bits
// (bf16), and a config that reads back the same; sharded folders with an f16 shard; every bad
// folder refused naming the file and the key or tensor, without changing the model. With
// STOKER_HF_PYTHON (a Python with torch + transformers) set, also the other direction: a folder
// stoker saved, loaded by transformers (llama_hf_reference.py --check).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "hf_llama.h"
#include "llama_model.h"
#include "stoker/nn/loss.h"
#include "stoker/train/safetensors.h"
#include "test_util.h"

namespace stoker::llm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kData = fs::path(STOKER_SOURCE_DIR) / "tests" / "llm" / "data";
const fs::path kUntied = kData / "tiny_llama_untied";
const fs::path kTied = kData / "tiny_llama_tied";
const fs::path kReference = kData / "tiny_llama_reference.safetensors";

class HfLlama : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tmp_ = fs::temp_directory_path() /
           ("stoker_hf_llama_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }

  // A copy of a fixture folder under tmp_ (to be damaged by the test).
  fs::path copy_of(const fs::path& folder, const std::string& name) {
    const fs::path to = tmp_ / name;
    fs::create_directories(to);
    for (const auto& e : fs::directory_iterator(folder))
      fs::copy(e.path(), to / e.path().filename());
    return to;
  }

  fs::path tmp_;
};

json read_json_file(const fs::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

void write_json_file(const fs::path& file, const json& j) {
  fs::remove(file);  // a copy of a read-only checkout is read-only
  std::ofstream(file) << j.dump(2);
}

// Replaces dir/model.safetensors with `tensors` (no stoker checksums, as transformers writes).
void write_weights(const fs::path& dir, const std::vector<train::NamedTensor>& tensors) {
  fs::remove(dir / "model.safetensors");
  train::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}},
                          {.checksums = false});
}

std::map<std::string, std::vector<float>> values(Llama& model) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, p] : model.named_parameters()) out[name] = p->value().to_floats();
  return out;
}

std::unique_ptr<Llama> loaded(const fs::path& dir) {
  auto model = std::make_unique<Llama>(read_hf_config(dir));
  load_hf(*model, dir);
  return model;
}

Tensor logits_of(Llama& model, const Tensor& ids) {
  nn::NoSaveScope no_save;
  return model.forward(ids);
}

TEST_F(HfLlama, ReadsTheConfigsTransformersWrote) {
  for (const bool tied : {false, true}) {
    const LlamaConfig c = read_hf_config(tied ? kTied : kUntied);
    EXPECT_EQ(c.vocab, 64);
    EXPECT_EQ(c.d_model, 32);
    EXPECT_EQ(c.layers, 2);
    EXPECT_EQ(c.heads, 4);
    EXPECT_EQ(c.kv_heads, 2);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.ffn, 48);
    EXPECT_EQ(c.context, 64);
    EXPECT_EQ(c.rms_eps, 1e-5f);
    EXPECT_EQ(c.init_std, 0.1f);
    EXPECT_EQ(c.tie_embeddings, tied);
    EXPECT_EQ(c.bos_id, 1);
    EXPECT_EQ(c.eos_id, 2);
    EXPECT_EQ(c.rope.head_dim, 8);
    EXPECT_EQ(c.rope.theta, 100.0);
    EXPECT_TRUE(c.rope.llama3_scaling);
    EXPECT_EQ(c.rope.factor, 8.0);
    EXPECT_EQ(c.rope.low_freq_factor, 1.0);
    EXPECT_EQ(c.rope.high_freq_factor, 4.0);
    EXPECT_EQ(c.rope.original_max_position_embeddings, 32);
  }
}

// Every field read_hf_config fills, compared.
void expect_same_config(const LlamaConfig& got, const LlamaConfig& want) {
  EXPECT_EQ(got.str(), want.str());
  EXPECT_EQ(got.rms_eps, want.rms_eps);
  EXPECT_EQ(got.init_std, want.init_std);
  EXPECT_EQ(got.bos_id, want.bos_id);
  EXPECT_EQ(got.eos_id, want.eos_id);
  EXPECT_EQ(got.rope.head_dim, want.rope.head_dim);
  EXPECT_EQ(got.rope.theta, want.rope.theta);
  EXPECT_EQ(got.rope.llama3_scaling, want.rope.llama3_scaling);
  if (want.rope.llama3_scaling) {
    EXPECT_EQ(got.rope.factor, want.rope.factor);
    EXPECT_EQ(got.rope.low_freq_factor, want.rope.low_freq_factor);
    EXPECT_EQ(got.rope.high_freq_factor, want.rope.high_freq_factor);
    EXPECT_EQ(got.rope.original_max_position_embeddings,
              want.rope.original_max_position_embeddings);
  }
}

// The config.json files published with Llama 3.2 1B (transformers 4.45's spelling) and Llama 3
// 8B (before head_dim and rope_type were written) read as the presets of the same names; each
// preset written by write_hf_config reads back unchanged.
TEST_F(HfLlama, PublishedConfigsReadAsThePresets) {
  const json llama32_1b = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
  const json llama3_8b = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0", "use_cache": true, "vocab_size": 128256})");
  for (const auto& [preset, published] :
       {std::pair{"llama3.2-1b", llama32_1b}, std::pair{"llama3-8b", llama3_8b}}) {
    SCOPED_TRACE(preset);
    LlamaConfig want = LlamaConfig::preset(preset);
    const fs::path dir = tmp_ / preset;
    fs::create_directories(dir);
    write_json_file(dir / "config.json", published);
    want.bos_id = 128000;
    want.eos_id = 128001;
    expect_same_config(read_hf_config(dir), want);
    write_hf_config(dir / "config.json", want, DType::bf16);
    expect_same_config(read_hf_config(dir), want);
  }
}

TEST_F(HfLlama, LogitsAndLossEqualTransformers) {
  const train::SafetensorsReader ref(kReference);
  const Tensor ids = ref.load("ids");
  const Tensor targets = ref.load("targets");
  for (const std::string variant : {"untied", "tied"}) {
    SCOPED_TRACE(variant);
    auto model = loaded(variant == "tied" ? kTied : kUntied);
    const Tensor logits = logits_of(*model, ids);
    ASSERT_EQ(logits.shape(), Shape({34, 64}));
    test::expect_max_abs_close(logits.to_floats(), ref.load(variant + ".logits").to_floats(), 1e-4,
                               variant + " logits", 0.0);
    auto loss = model->make_loss(-100);
    const double got = loss->forward(logits, targets).item();
    const double want = ref.load(variant + ".loss").to_floats()[0];
    EXPECT_NEAR(got, want, 1e-4 * std::abs(want));
  }
  // The comparison discriminates: the untied weights in the tied folder's model do not pass.
  auto tied = loaded(kTied);
  const auto untied_logits = ref.load("untied.logits").to_floats();
  const auto tied_logits = logits_of(*tied, ids).to_floats();
  double diff = 0;
  for (size_t i = 0; i < tied_logits.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::abs(tied_logits[i] - untied_logits[i])));
  EXPECT_GT(diff, 1e-2);
}

TEST_F(HfLlama, SaveWritesTransformersNamesShapesAndBits) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const fs::path src = tied ? kTied : kUntied;
    auto model = loaded(src);
    const fs::path out = tmp_ / (tied ? "tied" : "untied");
    save_hf(*model, out, DType::f32);

    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(out)) files.insert(e.path().filename().string());
    EXPECT_EQ(files, (std::set<std::string>{"config.json", "model.safetensors"}));

    const train::SafetensorsReader want(src / "model.safetensors");
    const train::SafetensorsReader got(out / "model.safetensors");
    EXPECT_EQ(std::set<std::string>(got.names().begin(), got.names().end()),
              std::set<std::string>(want.names().begin(), want.names().end()));
    EXPECT_EQ(got.metadata().at("format"), "pt");
    for (const std::string& name : want.names()) {
      ASSERT_TRUE(got.contains(name)) << name;
      EXPECT_EQ(got.entry(name).dtype, DType::f32) << name;
      EXPECT_EQ(got.entry(name).shape, want.entry(name).shape) << name;
      EXPECT_TRUE(test::bit_identical(got.load(name), want.load(name))) << name;
    }

    const LlamaConfig a = read_hf_config(src), b = read_hf_config(out);
    EXPECT_EQ(b.str(), a.str());
    EXPECT_EQ(b.rms_eps, a.rms_eps);
    EXPECT_EQ(b.init_std, a.init_std);
    EXPECT_EQ(b.context, a.context);
    EXPECT_EQ(b.bos_id, a.bos_id);
    EXPECT_EQ(b.eos_id, a.eos_id);
    EXPECT_EQ(b.rope.theta, a.rope.theta);
    EXPECT_EQ(b.rope.llama3_scaling, a.rope.llama3_scaling);
    EXPECT_EQ(b.rope.factor, a.rope.factor);
    EXPECT_EQ(b.rope.low_freq_factor, a.rope.low_freq_factor);
    EXPECT_EQ(b.rope.high_freq_factor, a.rope.high_freq_factor);
    EXPECT_EQ(b.rope.original_max_position_embeddings, a.rope.original_max_position_embeddings);
    // What transformers reads to build the model, spelled as transformers 4.x spells it.
    const json j = read_json_file(out / "config.json");
    EXPECT_EQ(j.at("model_type"), "llama");
    EXPECT_EQ(j.at("architectures"), json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(j.at("torch_dtype"), "float32");
    EXPECT_EQ(j.at("hidden_act"), "silu");
    EXPECT_EQ(j.at("rms_norm_eps"), 1e-5);
    EXPECT_EQ(j.at("rope_scaling").at("rope_type"), "llama3");
    EXPECT_EQ(j.at("tie_word_embeddings"), tied);

    // Saving again into the folder it wrote replaces the two files.
    save_hf(*model, out, DType::f32);
    auto again = loaded(out);
    EXPECT_EQ(values(*again), values(*model));
  }
}

TEST_F(HfLlama, SaveInBf16RoundsToNearestEvenAndLoadsBack) {
  auto model = loaded(kUntied);
  const fs::path out = tmp_ / "bf16";
  save_hf(*model, out, DType::bf16);
  EXPECT_EQ(read_json_file(out / "config.json").at("torch_dtype"), "bfloat16");
  const train::SafetensorsReader want(kUntied / "model.safetensors");
  const train::SafetensorsReader got(out / "model.safetensors");
  ASSERT_EQ(got.names().size(), want.names().size());
  for (const std::string& name : want.names()) {
    ASSERT_EQ(got.entry(name).dtype, DType::bf16) << name;
    EXPECT_TRUE(test::matches_rounded(got.load(name), want.load(name).to_floats())) << name;
  }
  // Loading casts the bf16 values into the f32 masters exactly.
  auto back = loaded(out);
  for (const auto& [name, v] : values(*back)) {
    const std::vector<float> orig = values(*model).at(name);
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(v[i], test::round_to(DType::bf16, orig[i])) << name << "[" << i << "]";
  }
}

TEST_F(HfLlama, ShardedFolderWithAnF16ShardLoads) {
  // Split the untied fixture as transformers shards: layer 1 and the rest in F16 in a second
  // file, listed by model.safetensors.index.json.
  const fs::path dir = tmp_ / "sharded";
  fs::create_directories(dir);
  fs::copy(kUntied / "config.json", dir / "config.json");
  std::vector<train::NamedTensor> a, b;
  json map = json::object();
  std::set<std::string> in_f16;
  for (train::NamedTensor& t : train::load_safetensors(kUntied / "model.safetensors")) {
    const bool second = t.name.rfind("model.layers.1.", 0) == 0 || t.name == "lm_head.weight";
    if (second) {
      Tensor h = Tensor::empty(t.tensor.shape(), DType::f16);
      ops::cast(h, t.tensor);
      b.push_back({t.name, h});
      in_f16.insert(t.name);
    } else {
      a.push_back(t);
    }
    map[t.name] = second ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  train::save_safetensors(dir / "model-00001-of-00002.safetensors", a, {{"format", "pt"}},
                          {.checksums = false});
  train::save_safetensors(dir / "model-00002-of-00002.safetensors", b, {{"format", "pt"}},
                          {.checksums = false});
  write_json_file(dir / "model.safetensors.index.json",
                  {{"metadata", {{"total_size", 0}}}, {"weight_map", map}});

  auto model = loaded(dir);
  auto whole = loaded(kUntied);
  const auto got = values(*model), want = values(*whole);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    // The second shard's tensors (layer 1's fused weights included) went through f16.
    const bool f16 = name.rfind("layers.1.", 0) == 0 || name == "lm_head.weight";
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(got.at(name)[i], f16 ? test::round_to(DType::f16, w[i]) : w[i])
          << name << "[" << i << "]";
  }
  EXPECT_EQ(in_f16.size(), 10u);  // layer 1's nine tensors and lm_head

  // An index that points outside the folder, at a missing shard, or at a shard without the
  // tensor is refused naming the index and the entry.
  const json good = read_json_file(dir / "model.safetensors.index.json");
  json bad = good;
  bad["weight_map"]["model.norm.weight"] = "../model-00001-of-00002.safetensors";
  write_json_file(dir / "model.safetensors.index.json", bad);
  EXPECT_TRUE(test::throws_error_with([&] { loaded(dir); },
                                      {"model.safetensors.index.json", "model.norm.weight",
                                       "../model-00001-of-00002.safetensors"}));
  bad = good;
  bad["weight_map"]["model.norm.weight"] = "model-00003-of-00003.safetensors";
  write_json_file(dir / "model.safetensors.index.json", bad);
  EXPECT_TRUE(test::throws_error_with([&] { loaded(dir); }, {"model-00003-of-00003.safetensors"}));
  bad = good;
  bad["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
  write_json_file(dir / "model.safetensors.index.json", bad);
  EXPECT_TRUE(test::throws_error_with(
      [&] { loaded(dir); }, {"model.norm.weight", "model-00002-of-00002.safetensors", "no such"}));
  write_json_file(dir / "model.safetensors.index.json", {{"weight_map", json::object()}});
  EXPECT_TRUE(test::throws_error_with([&] { loaded(dir); }, {"weight_map"}));
}

TEST_F(HfLlama, BadFoldersAreRefusedNamingTheFileAndKey) {
  EXPECT_TRUE(test::throws_error_with([&] { read_hf_config(tmp_ / "absent"); },
                                      {(tmp_ / "absent").string()}));
  EXPECT_TRUE(test::throws_error_with([&] { read_hf_config(kUntied / "config.json"); },
                                      {"config.json", "not a folder"}));
  EXPECT_TRUE(test::throws_error_with([&] { read_hf_config(tmp_); }, {"config.json"}));

  const fs::path dir = copy_of(kUntied, "bad");
  const json good = read_json_file(dir / "config.json");
  auto refused = [&](const std::function<void(json&)>& edit,
                     std::initializer_list<std::string> parts) {
    json j = good;
    edit(j);
    write_json_file(dir / "config.json", j);
    return test::throws_error_with([&] { read_hf_config(dir); }, parts);
  };
  EXPECT_TRUE(refused([](json& j) { j["model_type"] = "gpt2"; }, {"model_type", "gpt2", "llama"}));
  EXPECT_TRUE(
      refused([](json& j) { j["architectures"] = json::array({"LlamaForSequenceClassification"}); },
              {"architectures", "LlamaForCausalLM"}));
  EXPECT_TRUE(refused([](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; },
                      {"config.json", "yarn"}));
  EXPECT_TRUE(refused(
      [](json& j) {
        j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
      },
      {"rope_scaling", "linear"}));
  EXPECT_TRUE(
      refused([](json& j) { j["rope_parameters"].erase("factor"); }, {"rope_parameters.factor"}));
  EXPECT_TRUE(refused([](json& j) { j["attention_bias"] = true; }, {"attention_bias"}));
  EXPECT_TRUE(refused([](json& j) { j["mlp_bias"] = true; }, {"mlp_bias"}));
  EXPECT_TRUE(refused([](json& j) { j["hidden_act"] = "gelu"; }, {"hidden_act", "gelu"}));
  EXPECT_TRUE(refused([](json& j) { j["hidden_size"] = "32"; },
                      {"config.json", "'hidden_size'", "positive integer"}));
  EXPECT_TRUE(refused([](json& j) { j.erase("vocab_size"); }, {"vocab_size"}));
  EXPECT_TRUE(refused([](json& j) { j["num_key_value_heads"] = 3; },
                      {"num_key_value_heads 3", "num_attention_heads 4"}));
  EXPECT_TRUE(refused([](json& j) { j["rms_norm_eps"] = -1; }, {"rms_norm_eps"}));
  fs::remove(dir / "config.json");
  std::ofstream(dir / "config.json") << "{\"model_type\": \"llama\",";
  EXPECT_TRUE(test::throws_error_with([&] { read_hf_config(dir); }, {"config.json", "JSON"}));
  // Defaults as transformers', the eos list's first id kept.
  json j = good;
  j.erase("num_key_value_heads");
  j.erase("head_dim");
  j.erase("rope_parameters");
  j["eos_token_id"] = {128001, 128009};
  write_json_file(dir / "config.json", j);
  const LlamaConfig c = read_hf_config(dir);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.rope.llama3_scaling);
  EXPECT_EQ(c.eos_id, 128001);

  // A folder or a FIFO where a file should be: refused at once, never opened.
  fs::remove(dir / "config.json");
  fs::create_directory(dir / "config.json");
  EXPECT_TRUE(test::throws_error_with([&] { read_hf_config(dir); }, {"config.json"}));
  fs::remove(dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0644), 0);
  EXPECT_TRUE(test::throws_error_with([&] { read_hf_config(dir); }, {"config.json"}));
  fs::remove(dir / "config.json");
  write_json_file(dir / "config.json", good);
  fs::remove(dir / "model.safetensors");
  Llama model(read_hf_config(dir));
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0644), 0);
  EXPECT_TRUE(test::throws_error_with([&] { load_hf(model, dir); }, {"model.safetensors"}));
  fs::remove(dir / "model.safetensors");
  EXPECT_TRUE(
      test::throws_error_with([&] { load_hf(model, dir); },
                              {dir.string(), "model.safetensors", "model.safetensors.index.json"}));

  // A truncated weights file: the reader's own validation.
  {
    std::ifstream in(kUntied / "model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "model.safetensors", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  EXPECT_TRUE(
      test::throws_error_with([&] { load_hf(model, dir); }, {"model.safetensors", "truncated"}));
}

TEST_F(HfLlama, WrongTensorsAreRefusedBeforeAnyWeightChanges) {
  const fs::path dir = copy_of(kUntied, "tensors");
  const std::vector<train::NamedTensor> good =
      train::load_safetensors(kUntied / "model.safetensors");
  nn::manual_seed(3);
  Llama model(read_hf_config(dir));
  const auto before = values(model);

  std::vector<train::NamedTensor> t;
  for (const auto& n : good)
    if (n.name != "model.layers.1.self_attn.k_proj.weight") t.push_back(n);
  write_weights(dir, t);
  EXPECT_TRUE(
      test::throws_error_with([&] { load_hf(model, dir); },
                              {"model.safetensors", "model.layers.1.self_attn.k_proj.weight"}));
  t = good;
  t.push_back({"model.layers.2.mlp.up_proj.weight", good.back().tensor});
  write_weights(dir, t);
  EXPECT_TRUE(test::throws_error_with([&] { load_hf(model, dir); },
                                      {"model.safetensors", "model.layers.2.mlp.up_proj.weight"}));
  t = good;
  for (auto& n : t)
    if (n.name == "model.norm.weight") n.tensor = Tensor::zeros({31}, DType::f32);
  write_weights(dir, t);
  EXPECT_TRUE(test::throws_error_with([&] { load_hf(model, dir); },
                                      {"model.safetensors", "model.norm.weight", "[31]", "[32]"}));
  t = good;
  for (auto& n : t)
    if (n.name == "model.norm.weight") n.tensor = Tensor::zeros({32}, DType::i32);
  write_weights(dir, t);
  EXPECT_TRUE(test::throws_error_with([&] { load_hf(model, dir); }, {"model.norm.weight", "I32"}));
  EXPECT_EQ(values(model), before);

  // A config that differs from the model's: named with both values.
  write_weights(dir, good);
  LlamaConfig other = read_hf_config(dir);
  other.rms_eps = 1e-6f;
  Llama eps_model(other);
  EXPECT_TRUE(test::throws_error_with([&] { load_hf(eps_model, dir); },
                                      {"rms_norm_eps", "1e-06", "1e-05", "config.json"}));
  other = read_hf_config(dir);
  other.tie_embeddings = true;
  Llama tied_model(other);
  EXPECT_TRUE(test::throws_error_with([&] { load_hf(tied_model, dir); }, {"tie_word_embeddings"}));
  // The context length may differ (a model trained on shorter sequences).
  other = read_hf_config(dir);
  other.context = 32;
  Llama short_model(other);
  load_hf(short_model, dir);
}

TEST_F(HfLlama, TiedFolderWithAnLmHeadCopyIgnoresIt) {
  const fs::path dir = copy_of(kTied, "tied_with_head");
  std::vector<train::NamedTensor> t = train::load_safetensors(kTied / "model.safetensors");
  t.push_back({"lm_head.weight", Tensor::zeros({64, 32}, DType::f32)});
  t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", Tensor::zeros({4}, DType::f32)});
  write_weights(dir, t);
  auto with_head = loaded(dir);
  auto plain = loaded(kTied);
  EXPECT_EQ(values(*with_head), values(*plain));
}

TEST_F(HfLlama, SaveRefusesAFolderOfOtherFiles) {
  auto model = loaded(kTied);
  const fs::path dir = tmp_ / "occupied";
  fs::create_directories(dir);
  std::ofstream(dir / "train.bin") << "data";
  std::ofstream(dir / "notes.txt") << "notes";
  EXPECT_TRUE(test::throws_error_with([&] { save_hf(*model, dir, DType::f32); },
                                      {dir.string(), "notes.txt", "train.bin", "--save"}));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "train.bin"));
  EXPECT_TRUE(test::throws_error_with([&] { save_hf(*model, dir / "train.bin", DType::f32); },
                                      {"train.bin", "not a folder"}));
  EXPECT_TRUE(test::throws_error_with([&] { save_hf(*model, tmp_ / "f16", DType::f16); },
                                      {"f16", "f32 or bf16"}));
  // A stale temporary of an interrupted save (its writer gone) does not count as a file.
  const fs::path again = tmp_ / "again";
  save_hf(*model, again, DType::f32);
  std::ofstream(again / "model.safetensors.tmp.999999999.0") << "partial";
  save_hf(*model, again, DType::f32);
  EXPECT_FALSE(fs::exists(again / "model.safetensors.tmp.999999999.0"));
}

// transformers loads a folder stoker saved and computes stoker's logits (needs a Python with
// torch + transformers: STOKER_HF_PYTHON=/path/to/python).
TEST_F(HfLlama, TransformersLoadsWhatStokerSaved) {
  const char* python = std::getenv("STOKER_HF_PYTHON");
  if (python == nullptr || *python == '\0')
    GTEST_SKIP() << "set STOKER_HF_PYTHON to a Python with torch and transformers";
  const train::SafetensorsReader ref(kReference);
  for (const bool tied : {false, true}) {
    // A model of stoker's own init (not the fixture's weights), saved by stoker.
    nn::manual_seed(tied ? 11 : 12);
    Llama model(read_hf_config(tied ? kTied : kUntied));
    const fs::path out = tmp_ / (tied ? "tied" : "untied");
    save_hf(model, out, DType::f32);
    const Tensor ids = ref.load("ids");
    const std::vector<train::NamedTensor> logits{{"ids", ids}, {"logits", logits_of(model, ids)}};
    train::save_safetensors(out / "stoker_logits.safetensors", logits, {{"format", "pt"}},
                            {.checksums = false});
    const std::string cmd = std::string(python) + " " + STOKER_SOURCE_DIR +
                            "/tests/llm/llama_hf_reference.py --check " + out.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

}  // namespace
}  // namespace stoker::llm
