#include "data/text/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fmt/format.h>
#include <algorithm>
#include <random>
#include <unordered_map>

#include "stoker/core/error.h"

// Exported by libsentencepiece (the level below which its log lines are dropped), not declared
// in its public headers: the trainer logs a few hundred lines at INFO otherwise.
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}  // namespace sentencepiece::logging

namespace stoker::data::detail {

namespace {

// SentencePiece drops longer sentences from training (with a log line); stoker leaves them out
// of the sample itself.
constexpr size_t kMaxSentenceBytes = 16384;
constexpr int kTrainerThreads = 8;

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept =
    default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& path,
                                                    const std::string& flag) {
  SentencePieceTokenizer t;
  const auto status = t.sp_->Load(path);
  STOKER_CHECK_HINT(status.ok(),
                    "pass a SentencePiece .model file (spm_train's output, or the tokenizer.model "
                    "of a Llama-style checkpoint), or train one with --train-tokenizer "
                    "--vocab-size N",
                    flag, " ", path, " is not a SentencePiece model: ", status.ToString());
  t.serialized_ = t.sp_->serialized_model_proto();
  return t;
}

SentencePieceTokenizer SentencePieceTokenizer::train(
    const TokenizerTraining& o,
    const std::function<void(const std::function<void(std::string_view)>&)>& sentences) {
  STOKER_CHECK_HINT(o.model_type == "bpe" || o.model_type == "unigram",
                    "pass --model-type bpe or unigram", "stoker pack-text: --model-type ",
                    o.model_type, " is not bpe or unigram");
  STOKER_CHECK(o.vocab_size >= 1, "stoker pack-text: --vocab-size ", o.vocab_size,
               " is not positive");
  STOKER_CHECK(o.sample_sentences >= 1, "stoker pack-text: --train-sentences ", o.sample_sentences,
               " is not positive");
  // The sample: reservoir sampling (Algorithm R) of every non-empty line, seeded, so that memory
  // stays within the sample whatever the corpus and the same input gives the same model.
  std::vector<std::string> sample;
  std::mt19937_64 rng(o.seed);
  uint64_t seen = 0;
  const auto cap = static_cast<uint64_t>(o.sample_sentences);
  sentences([&](std::string_view s) {
    if (s.empty() || s.size() > kMaxSentenceBytes) return;
    ++seen;
    if (sample.size() < cap) {
      sample.emplace_back(s);
    } else {
      const uint64_t j = std::uniform_int_distribution<uint64_t>(0, seen - 1)(rng);
      if (j < cap) sample[j].assign(s);
    }
  });
  STOKER_CHECK_HINT(!sample.empty(), "pass inputs with text, or a --tokenizer FILE.model",
                    "stoker pack-text: no text to train the tokenizer on");
  sentencepiece::logging::SetMinLogLevel(o.verbose ? 0 : 2);
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"character_coverage", "0.9995"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"input_sentence_size", "0"},  // the sample above is the whole input
      // Fixed, not -j: the model stores it, and the same input must give the same bytes.
      {"num_threads", std::to_string(kTrainerThreads)},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
  };
  VectorIterator it(sample);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &it, &model);
  sentencepiece::logging::SetMinLogLevel(0);
  if (!status.ok()) {
    const std::string why = status.ToString();
    const bool too_high = why.find("too high") != std::string::npos;
    const bool too_small = why.find("smaller than required") != std::string::npos;
    core::detail::throw_error(
        __FILE__, __LINE__,
        fmt::format("stoker pack-text: training the tokenizer ({}, --vocab-size {}) on {} "
                    "sentences failed: {}",
                    o.model_type, o.vocab_size, sample.size(), why),
        too_high    ? "the text is too small for this vocabulary: pass a smaller --vocab-size "
                      "(the largest one SentencePiece accepts is in the message) or more text"
        : too_small ? "the vocabulary must hold the 256 byte pieces, <unk>, <s>, </s> and every "
                      "character of the text: pass a larger --vocab-size (the least is the "
                      "second number in the message)"
                    : "check the inputs, or pass --verbose for SentencePiece's log");
  }
  SentencePieceTokenizer t;
  const auto loaded = t.sp_->LoadFromSerializedProto(model);
  STOKER_CHECK(loaded.ok(),
               "stoker pack-text: the trained tokenizer does not load: ", loaded.ToString());
  t.serialized_ = std::move(model);
  return t;
}

std::string SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<int> out;
  const auto status = sp_->Encode(text, &out);
  if (!status.ok()) return status.ToString();
  ids.insert(ids.end(), out.begin(), out.end());
  return {};
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  const int64_t n = vocab_size();
  std::string text;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string piece;
    const auto status = sp_->Decode(run, &piece);
    text += status.ok() ? piece : "[" + status.ToString() + "]";
    run.clear();
  };
  for (const int64_t id : ids) {
    if (id >= 0 && id < n) {
      run.push_back(static_cast<int>(id));
    } else {
      flush();
      text += fmt::format("[{}]", id);
    }
  }
  flush();
  return text;
}

int SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int SentencePieceTokenizer::eos_id() const { return sp_->eos_id(); }
int SentencePieceTokenizer::bos_id() const { return sp_->bos_id(); }

}  // namespace stoker::data::detail
