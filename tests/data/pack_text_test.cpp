// `stoker pack-text` (src/data/text): the ids written equal SentencePiece's own Encode of each
// document plus </s>; the .idx/.bin follow Megatron's layout (read here by a small reader written
// from megatron/core/datasets/indexed_dataset.py, independent of the library's readers); the
// bytes do not depend on the thread count; failed packs leave nothing; bad inputs are refused
// naming FILE:LINE and the flag that fixes them.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "data/indexed_dataset_writer.h"
#include "data/text/pack_text.h"
#include "data_test_util.h"
#include "stoker/core/error.h"
#include "util/checksum.h"

namespace stoker::data {
namespace {

namespace fs = std::filesystem;

const fs::path kKjv = fs::path(STOKER_SOURCE_DIR) / "examples/gpt/data/kjv-genesis-exodus.txt";

// Megatron's index, read from its specification.
struct MegatronIndex {
  uint64_t version = 0;
  uint8_t dtype = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers, doc_index;
};

MegatronIndex read_index(const fs::path& idx) {
  const std::vector<uint8_t> b = test::read_bytes(idx);
  MegatronIndex m;
  EXPECT_GE(b.size(), 34u);
  EXPECT_EQ(std::memcmp(b.data(), "MMIDIDX\0\0", 9), 0);
  uint64_t sequences = 0, documents = 0;
  std::memcpy(&m.version, b.data() + 9, 8);
  m.dtype = b[17];
  std::memcpy(&sequences, b.data() + 18, 8);
  std::memcpy(&documents, b.data() + 26, 8);
  EXPECT_EQ(b.size(), 34 + sequences * 12 + documents * 8);
  m.lengths.resize(sequences);
  m.pointers.resize(sequences);
  m.doc_index.resize(documents);
  std::memcpy(m.lengths.data(), b.data() + 34, sequences * 4);
  std::memcpy(m.pointers.data(), b.data() + 34 + sequences * 4, sequences * 8);
  std::memcpy(m.doc_index.data(), b.data() + 34 + sequences * 12, documents * 8);
  return m;
}

// The documents of a pack, as id lists.
std::vector<std::vector<int32_t>> read_documents(const fs::path& prefix) {
  const MegatronIndex m = read_index(prefix.string() + ".idx");
  const std::vector<uint8_t> bin = test::read_bytes(prefix.string() + ".bin");
  const size_t item = m.dtype == 8 ? 2 : 4;
  std::vector<std::vector<int32_t>> docs;
  for (size_t s = 0; s < m.lengths.size(); ++s) {
    std::vector<int32_t> ids(static_cast<size_t>(m.lengths[s]));
    for (size_t k = 0; k < ids.size(); ++k) {
      const uint8_t* p = bin.data() + m.pointers[s] + k * item;
      if (item == 2) {
        uint16_t v;
        std::memcpy(&v, p, 2);
        ids[k] = v;
      } else {
        std::memcpy(&ids[k], p, 4);
      }
    }
    docs.push_back(std::move(ids));
  }
  return docs;
}

void write_text(const fs::path& path, const std::string& text) {
  test::write_bytes(path, text.data(), text.size());
}

PackTextOptions quiet_options() {
  PackTextOptions o;
  o.progress = false;
  o.report = false;
  return o;
}

PackTextOptions trained(int vocab, int threads = 2) {
  PackTextOptions o = quiet_options();
  o.train = true;
  o.training.vocab_size = vocab;
  o.threads = threads;
  return o;
}

// The error message of `f`, or "" when it does not throw.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message() + " | hint: " + e.hint();
  }
  return "";
}

TEST(PackText, KjvIdsEqualSentencePieceEncodeOfEachParagraph) {
  test::TempDir dir;
  const PackTextSummary s = pack_text({kKjv}, dir / "out", trained(2000));
  EXPECT_TRUE(s.trained);
  EXPECT_EQ(s.vocab_size, 2000);
  EXPECT_EQ(s.dtype, "uint16");
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((dir / "out/tokenizer.model").string()).ok());
  EXPECT_EQ(sp.GetPieceSize(), 2000);
  EXPECT_TRUE(sp.IsByte(sp.PieceToId("<0x0A>")));  // byte fallback
  // The paragraphs, split here independently: runs of non-blank lines joined with "\n".
  std::ifstream in(kKjv);
  std::vector<std::string> paragraphs;
  std::string line, cur;
  bool any = false;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (any) paragraphs.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += (any ? "\n" : "") + line;
      any = true;
    }
  }
  if (any) paragraphs.push_back(cur);
  const auto docs = read_documents(dir / "out/tokens");
  ASSERT_EQ(docs.size(), paragraphs.size());
  EXPECT_EQ(s.documents, static_cast<int64_t>(paragraphs.size()));
  int64_t tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<int> ids;
    ASSERT_TRUE(sp.Encode(paragraphs[d], &ids).ok());
    ids.push_back(sp.eos_id());
    ASSERT_EQ(docs[d], std::vector<int32_t>(ids.begin(), ids.end())) << "document " << d;
    tokens += static_cast<int64_t>(ids.size());
    // Identity normalization: the text round-trips (newlines through byte pieces).
    ids.pop_back();
    std::string back;
    ASSERT_TRUE(sp.Decode(ids, &back).ok());
    ASSERT_EQ(back, paragraphs[d]) << "document " << d;
  }
  EXPECT_EQ(s.tokens, tokens);
  const MegatronIndex m = read_index(dir / "out/tokens.idx");
  EXPECT_EQ(m.version, 1u);
  EXPECT_EQ(m.dtype, 8);
  ASSERT_EQ(m.doc_index.size(), docs.size() + 1);
  for (size_t d = 0; d < m.doc_index.size(); ++d) EXPECT_EQ(m.doc_index[d], int64_t(d));
}

TEST(PackText, ManifestChecksumsTheFiles) {
  test::TempDir dir;
  const PackTextSummary s = pack_text({kKjv}, dir / "out", trained(600));
  std::ifstream in(s.manifest);
  const nlohmann::json m = nlohmann::json::parse(in);
  EXPECT_EQ(m["format"], "stoker-pack-text");
  EXPECT_EQ(m["dataset"]["documents"], s.documents);
  EXPECT_EQ(m["dataset"]["tokens"], s.tokens);
  EXPECT_EQ(m["dataset"]["eos_id"], 2);
  ASSERT_EQ(m["files"].size(), 3u);
  for (const auto& [name, entry] : m["files"].items()) {
    const std::vector<uint8_t> bytes = test::read_bytes(dir / "out" / name);
    EXPECT_EQ(entry["bytes"], bytes.size()) << name;
    EXPECT_EQ(entry["xxh3_64"], util::checksum_hex(util::checksum64(bytes))) << name;
  }
  // Nothing else in the folder: no owner file, no temporary.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "out")) ++entries;
  EXPECT_EQ(entries, 4);
}

TEST(PackText, SameBytesWithOneOrFourThreads) {
  test::TempDir dir;
  // Many documents (lines), several inputs, so that batches really run in parallel.
  std::string text;
  std::ifstream in(kKjv);
  std::string line;
  while (std::getline(in, line)) text += line + "\n";
  for (int k = 0; k < 3; ++k) write_text(dir / ("in" + std::to_string(k) + ".txt"), text);
  const std::vector<fs::path> inputs = {dir / "in0.txt", dir / "in1.txt", dir / "in2.txt"};
  PackTextOptions one = trained(1000, 1), four = trained(1000, 4);
  one.split = four.split = detail::TextSplit::line;
  pack_text(inputs, dir / "one", one);
  pack_text(inputs, dir / "four", four);
  for (const char* name : {"tokens.bin", "tokens.idx", "tokenizer.model", "tokens.manifest.json"}) {
    EXPECT_EQ(test::read_bytes(dir / "one" / name), test::read_bytes(dir / "four" / name)) << name;
  }
  EXPECT_GT(read_documents(dir / "one/tokens").size(), 18000u);
}

TEST(PackText, JsonLinesWithTextKeyGivenTokenizerAndBos) {
  test::TempDir dir;
  pack_text({kKjv}, dir / "base", trained(800));
  write_text(dir / "docs.jsonl",
             "{\"id\": 1, \"content\": \"In the beginning\\nGod created\"}\n"
             "\n"
             "{\"id\": 2, \"content\": \"\\u00e9t\\u00e9 \\ud83d\\ude00 caf\\u00e9\"}\n"
             "{\"id\": 3, \"content\": \"\"}\n");
  PackTextOptions o = quiet_options();
  o.tokenizer = dir / "base/tokenizer.model";
  o.text_key = "content";
  o.bos = true;
  const PackTextSummary s = pack_text({dir / "docs.jsonl"}, dir / "out", o);
  EXPECT_EQ(s.documents, 2);
  EXPECT_EQ(s.empty_documents, 1);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(o.tokenizer.string()).ok());
  const auto docs = read_documents(dir / "out/tokens");
  ASSERT_EQ(docs.size(), 2u);
  const std::string texts[2] = {"In the beginning\nGod created",
                                "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 caf\xc3\xa9"};
  for (int d = 0; d < 2; ++d) {
    std::vector<int> ids;
    ASSERT_TRUE(sp.Encode(texts[d], &ids).ok());
    ids.insert(ids.begin(), sp.bos_id());
    ids.push_back(sp.eos_id());
    EXPECT_EQ(docs[static_cast<size_t>(d)], std::vector<int32_t>(ids.begin(), ids.end()));
  }
  // The given model is copied byte for byte.
  EXPECT_EQ(test::read_bytes(dir / "out/tokenizer.model"), test::read_bytes(o.tokenizer));
}

TEST(PackText, DtypeFollowsMegatronsOptimalDtype) {
  EXPECT_EQ(detail::megatron_dtype_for_vocab(32000), 8);
  EXPECT_EQ(detail::megatron_dtype_for_vocab(65499), 8);
  EXPECT_EQ(detail::megatron_dtype_for_vocab(65500), 4);  // not 65536: Megatron's rule
  EXPECT_EQ(detail::megatron_dtype_for_vocab(128256), 4);
  test::TempDir dir;
  detail::IndexedDatasetWriter w(dir / "x", detail::kMegatronDtypeInt32);
  const std::vector<int32_t> a = {100000, 7}, b = {128000};
  w.add_document(a);
  w.add_document(b);
  const detail::IndexedDatasetFiles f = w.finish();
  EXPECT_EQ(f.tokens, 3);
  const MegatronIndex m = read_index(dir / "x.idx");
  EXPECT_EQ(m.dtype, 4);
  EXPECT_EQ(m.lengths, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(m.pointers, (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(read_documents(dir / "x"), (std::vector<std::vector<int32_t>>{a, b}));
  detail::IndexedDatasetWriter narrow(dir / "y", detail::kMegatronDtypeUint16);
  EXPECT_THROW(narrow.add_document(a), Error);  // 100000 does not fit uint16
}

TEST(PackText, FailedPackLeavesNothing) {
  test::TempDir dir;
  PackTextOptions o = trained(600);
  o.split = detail::TextSplit::line;
  o.fail_after_documents = 100;
  EXPECT_THROW(pack_text({kKjv}, dir / "out", o), Error);
  EXPECT_TRUE(fs::is_empty(dir.path()));  // neither out nor out.tmp-PID
}

TEST(PackText, BadDocumentsNameFileAndLine) {
  test::TempDir dir;
  pack_text({kKjv}, dir / "base", trained(600));
  PackTextOptions o = quiet_options();
  o.tokenizer = dir / "base/tokenizer.model";
  write_text(dir / "latin1.txt", "first paragraph\n\nsecond line ok\ncaf\xe9 au lait\n");
  std::string e = error_of([&] { pack_text({dir / "latin1.txt"}, dir / "o1", o); });
  EXPECT_NE(e.find("latin1.txt:4: invalid UTF-8"), std::string::npos) << e;
  EXPECT_NE(e.find("--skip-bad-documents"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "o1"));
  // Training leaves the bad paragraph out; encoding names it.
  std::string big;
  for (int k = 0; k < 50; ++k) big += "paragraph number " + std::to_string(k) + " of the text\n\n";
  write_text(dir / "latin1b.txt", big + "caf\xe9\n");
  e = error_of([&] { pack_text({dir / "latin1b.txt"}, dir / "o1", trained(300)); });
  EXPECT_NE(e.find("latin1b.txt:101: invalid UTF-8: byte 0xE9"), std::string::npos) << e;
  write_text(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"cut\n{\"text\": \"ok\"}\n");
  e = error_of([&] { pack_text({dir / "bad.jsonl"}, dir / "o2", o); });
  EXPECT_NE(e.find("bad.jsonl:2: not JSON"), std::string::npos) << e;
  write_text(dir / "key.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  e = error_of([&] { pack_text({dir / "key.jsonl"}, dir / "o3", o); });
  EXPECT_NE(e.find("key.jsonl:2: has no \"text\" field (its fields: \"body\")"), std::string::npos)
      << e;
  EXPECT_NE(e.find("--text-key"), std::string::npos) << e;
  write_text(dir / "num.jsonl", "{\"text\": 5}\n");
  e = error_of([&] { pack_text({dir / "num.jsonl"}, dir / "o4", o); });
  EXPECT_NE(e.find("num.jsonl:1: its \"text\" field is number"), std::string::npos) << e;

  // --skip-bad-documents: left out, counted, listed.
  o.skip_bad_documents = true;
  const PackTextSummary s = pack_text({dir / "bad.jsonl", dir / "key.jsonl"}, dir / "o5", o);
  EXPECT_EQ(s.documents, 3);
  EXPECT_EQ(s.bad_documents, 2);
  ASSERT_EQ(s.bad.size(), 2u);
  EXPECT_NE(s.bad[0].find("bad.jsonl:2"), std::string::npos);
  EXPECT_NE(s.bad[1].find("key.jsonl:2"), std::string::npos);
  for (const char* out : {"o2", "o3", "o4"}) EXPECT_FALSE(fs::exists(dir / out)) << out;
}

TEST(PackText, BadInputsAndOutputsAreRefusedBeforeAnyWork) {
  test::TempDir dir;
  write_text(dir / "a.txt", "some text\n");
  write_text(dir / "empty.txt", "");
  std::string e = error_of([&] { pack_text({dir / "empty.txt"}, dir / "o", trained(50)); });
  EXPECT_NE(e.find("empty.txt is empty"), std::string::npos) << e;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  e = error_of([&] { pack_text({dir / "fifo"}, dir / "o", trained(50)); });  // no hang
  EXPECT_NE(e.find("fifo"), std::string::npos) << e;
  const std::string gz = std::string("\x1f\x8b\x08\x00", 4) + "rest";
  write_text(dir / "c.txt.gz", gz);
  e = error_of([&] { pack_text({dir / "c.txt.gz"}, dir / "o", trained(50)); });
  EXPECT_NE(e.find("gzip-compressed"), std::string::npos) << e;
  // --out onto an input, or around one.
  e = error_of([&] { pack_text({dir / "a.txt"}, dir / "a.txt", trained(50)); });
  EXPECT_NE(e.find("--out"), std::string::npos) << e;
  e = error_of([&] { pack_text({dir / "a.txt"}, dir.path(), trained(50)); });
  EXPECT_NE(e.find("--out"), std::string::npos) << e;
  EXPECT_EQ(test::read_bytes(dir / "a.txt").size(), 10u);
  // A vocabulary the text cannot fill.
  e = error_of([&] { pack_text({dir / "a.txt"}, dir / "o", trained(5000)); });
  EXPECT_NE(e.find("--vocab-size"), std::string::npos) << e;
  EXPECT_NE(e.find("smaller --vocab-size"), std::string::npos) << e;
  e = error_of([&] { pack_text({kKjv}, dir / "o", trained(100)); });  // < 256 byte pieces
  EXPECT_NE(e.find("larger --vocab-size"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "o"));
  // A document longer than --max-document-bytes.
  PackTextOptions small = trained(300);
  small.max_document_bytes = 100;
  e = error_of([&] { pack_text({kKjv}, dir / "o", small); });
  EXPECT_NE(e.find("kjv-genesis-exodus.txt:3: a document longer than 100 bytes"), std::string::npos)
      << e;
  EXPECT_NE(e.find("--max-document-bytes"), std::string::npos) << e;
  // A model without </s> (trained here by SentencePiece itself).
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train(
                  "--input=" + kKjv.string() + " --model_prefix=" + (dir / "noeos").string() +
                  " --vocab_size=300 --eos_id=-1 --minloglevel=2")
                  .ok());
  PackTextOptions noeos = quiet_options();
  noeos.tokenizer = dir / "noeos.model";
  e = error_of([&] { pack_text({dir / "a.txt"}, dir / "o", noeos); });
  EXPECT_NE(e.find("has no end-of-sequence piece"), std::string::npos) << e;
  EXPECT_NE(e.find("--no-eos"), std::string::npos) << e;
  noeos.eos = false;
  EXPECT_EQ(pack_text({dir / "a.txt"}, dir / "o", noeos).documents, 1);
  fs::remove_all(dir / "o");
  // A tokenizer that is not a model.
  PackTextOptions o = quiet_options();
  o.tokenizer = dir / "a.txt";
  e = error_of([&] { pack_text({kKjv}, dir / "o", o); });
  EXPECT_NE(e.find("is not a SentencePiece model"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir / "o"));
}

TEST(PackText, OverwriteReplacesOnlyAPackTextOutput) {
  test::TempDir dir;
  const PackTextOptions o = trained(600);
  pack_text({kKjv}, dir / "out", o);
  std::string e = error_of([&] { pack_text({kKjv}, dir / "out", o); });
  EXPECT_NE(e.find("already exists"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  PackTextOptions over = o;
  over.overwrite = true;
  over.training.vocab_size = 700;
  EXPECT_EQ(pack_text({kKjv}, dir / "out", over).vocab_size, 700);
  // A file the pack did not write makes the folder foreign: kept whole.
  write_text(dir / "out/notes.txt", "mine");
  e = error_of([&] { pack_text({kKjv}, dir / "out", over); });
  EXPECT_NE(e.find("holds notes.txt"), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(dir / "out/tokens.bin"));
  // Any other folder or file is never replaced.
  write_text(dir / "photos/cat.jpg", "jpeg");
  e = error_of([&] { pack_text({kKjv}, dir / "photos", over); });
  EXPECT_NE(e.find("was not written by stoker pack-text"), std::string::npos) << e;
  EXPECT_TRUE(fs::exists(dir / "photos/cat.jpg"));
  write_text(dir / "file", "data");
  e = error_of([&] { pack_text({kKjv}, dir / "file", over); });
  EXPECT_NE(e.find("not a folder"), std::string::npos) << e;
  EXPECT_EQ(test::read_bytes(dir / "file").size(), 4u);
  // An empty folder made beforehand is simply filled.
  fs::create_directory(dir / "made");
  EXPECT_GT(pack_text({kKjv}, dir / "made", o).documents, 0);
}

// What stoker_gpt decodes its samples with: the trained tokenizer's decode() inverts its encode()
// and equals SentencePiece's own Decode; ids beyond its vocabulary are named, not dropped.
TEST(PackText, TokenizerDecodeInvertsEncodeAndNamesUnknownIds) {
  test::TempDir dir;
  pack_text({kKjv}, dir / "out", trained(600));
  const std::string model = (dir / "out/tokenizer.model").string();
  const auto tok = detail::SentencePieceTokenizer::load(model);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model).ok());
  for (const std::string text :
       {std::string("And God said, Let there be light: and there was light."),
        std::string("  10 And God called the dry land Earth;\nand the gathering together"),
        std::string("caf\xc3\xa9 \xe2\x80\x94 1611")}) {
    std::vector<int32_t> ids;
    ASSERT_EQ(tok.encode(text, ids), "");
    ASSERT_FALSE(ids.empty());
    const std::vector<int64_t> wide(ids.begin(), ids.end());
    EXPECT_EQ(tok.decode(wide), text);
    std::string theirs;
    ASSERT_TRUE(sp.Decode(std::vector<int>(ids.begin(), ids.end()), &theirs).ok());
    EXPECT_EQ(tok.decode(wide), theirs);
  }
  std::vector<int32_t> god;
  ASSERT_EQ(tok.encode("God", god), "");
  std::vector<int64_t> ids(god.begin(), god.end());
  ids.push_back(600);
  ids.push_back(-1);
  EXPECT_EQ(tok.decode(ids), "God[600][-1]");
  EXPECT_EQ(tok.decode({tok.eos_id()}), "");
  // The manifest records it: what stoker_gpt --data FOLDER decodes its samples with.
  const auto recorded = recorded_tokenizer(dir / "out/tokens.idx");
  ASSERT_TRUE(recorded.has_value());
  EXPECT_TRUE(fs::equivalent(recorded->model, model));
  EXPECT_EQ(recorded->vocab_size, 600);
  EXPECT_FALSE(recorded_tokenizer(dir / "elsewhere/tokens.idx").has_value());
  write_text(dir / "other/tokens.manifest.json", "{\"format\": \"something else\"}");
  EXPECT_NE(error_of([&] {
              recorded_tokenizer(dir / "other/tokens.idx");
            }).find("is not a stoker pack-text manifest naming a tokenizer"),
            std::string::npos);
  fs::remove(dir / "out/tokenizer.model");
  EXPECT_NE(
      error_of([&] { recorded_tokenizer(dir / "out/tokens.idx"); }).find("which is not there"),
      std::string::npos);
  // A file that is no model is refused naming the flag the caller gives.
  write_text(dir / "not.model", "hello");
  const std::string e = error_of(
      [&] { detail::SentencePieceTokenizer::load((dir / "not.model").string(), "--tokenizer"); });
  EXPECT_EQ(e.rfind("--tokenizer " + (dir / "not.model").string() + " is not a SentencePiece", 0),
            0u)
      << e;
}

}  // namespace
}  // namespace stoker::data
