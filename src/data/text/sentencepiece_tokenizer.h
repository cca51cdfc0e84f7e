// Private (`stoker pack-text`): a SentencePiece model, loaded from a .model file or trained
// from sentences.
//
// Training defaults are Llama's (its tokenizer is a SentencePiece BPE model): BPE, byte
// fallback (any byte of any text encodes, no <unk> for unseen characters), digits split,
// identity normalization and no collapsing of spaces (the text round-trips, newlines inside a
// document come back as the byte piece <0x0A>), <unk> 0, <s> 1, </s> 2. SentencePiece samples
// `sample_sentences` of the sentences offered (its own reservoir sampling, seeded: the same
// input gives the same model).
// Thread-safety: encode() is const and thread-safe (SentencePiece's Encode is); training and
// loading belong to one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace stoker::data::detail {

struct TokenizerTraining {
  int vocab_size = 8000;
  std::string model_type = "bpe";  // or "unigram"
  int64_t sample_sentences = 1'000'000;
  uint32_t seed = 0;
  bool verbose = false;  // SentencePiece's own log on stderr
};

class SentencePieceTokenizer {
 public:
  // Loads a .model file (a serialized ModelProto); errors name the file as `flag` (the program's
  // flag that gave it) and the fix.
  static SentencePieceTokenizer load(const std::string& path,
                                     const std::string& flag = "stoker pack-text: --tokenizer");
  // `sentences(emit)` calls emit(sentence) for each training sentence (a line of text, without
  // its "\n"); it may throw, and the error goes on unchanged.
  static SentencePieceTokenizer train(
      const TokenizerTraining& options,
      const std::function<void(const std::function<void(std::string_view)>&)>& sentences);

  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer();

  // Appends the ids of `text` (one Encode call) to `ids`; empty string on success, else why.
  std::string encode(std::string_view text, std::vector<int32_t>& ids) const;
  // The text of `ids` (SentencePiece's Decode: pieces joined, the leading space of the first
  // dropped, byte pieces reassembled). Control pieces (<s>, </s>) give nothing; an id outside
  // the vocabulary gives "[id]" (a model's vocabulary may be larger than its tokenizer's).
  std::string decode(const std::vector<int64_t>& ids) const;
  int vocab_size() const;
  int eos_id() const;  // -1: the model has none
  int bos_id() const;
  // The model's bytes, as a .model file holds them.
  const std::string& serialized() const { return serialized_; }

 private:
  SentencePieceTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string serialized_;
};

}  // namespace stoker::data::detail
