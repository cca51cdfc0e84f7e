// `stoker pack-text`: inputs -> (tokenizer trained on a sample) -> a oneTBB pipeline (serial
// reader, parallel SentencePiece encoders, serial writer in input order) -> PREFIX.bin/.idx,
// tokenizer.model and the manifest in "<out>.tmp-<pid>" -> renamed to <out>.
#include "data/text/pack_text.h"

#include <fcntl.h>
#include <unistd.h>

#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "data/indexed_dataset_writer.h"
#include "data/pack_interrupt.h"
#include "stoker/core/device.h"
#include "stoker/core/error.h"
#include "stoker/core/output_path.h"
#include "stoker/data/pack.h"
#include "util/atomic_file.h"
#include "util/checksum.h"
#include "util/progress_bar.h"

namespace stoker::data {

namespace fs = std::filesystem;
using detail::TextFormat;
using detail::TextRecord;
using detail::TextSplit;

namespace {

constexpr const char* kManifestFormat = "stoker-pack-text";
constexpr const char* kManifestSuffix = ".manifest.json";
constexpr const char* kTokenizerFile = "tokenizer.model";
constexpr size_t kListedBad = 100;
// A pipeline item: documents up to this many bytes of text (or kBatchDocuments documents).
constexpr size_t kBatchBytes = size_t{1} << 20;
constexpr size_t kBatchDocuments = 4096;

[[noreturn]] void throw_interrupted(int signal, const fs::path& out) {
  throw PackInterrupted(signal,
                        fmt::format("stoker pack-text: interrupted by {}: nothing written to {} "
                                    "(its temporary folder was removed)",
                                    detail::signal_name(signal), out.string()),
                        core::detail::where(__FILE__, __LINE__));
}

void check_interrupt(const fs::path& out) {
  if (const int sig = detail::InterruptGuard::signal()) throw_interrupted(sig, out);
}

void fsync_path(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Writes `bytes` to `path` (created), fsync'ed; the checksum of the bytes.
uint64_t write_small_file(const fs::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STOKER_CHECK_HINT(fd >= 0, "check free disk space and permissions of the --out folder",
                    "stoker pack-text: cannot create ", path.string(), ": ", std::strerror(errno));
  try {
    util::write_all(fd, bytes.data(), bytes.size(), path);
    STOKER_CHECK_HINT(::fsync(fd) == 0, "check free disk space of the --out folder",
                      "stoker pack-text: fsync of ", path.string(),
                      " failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return util::checksum64(bytes.data(), bytes.size());
}

// The output under construction: "<out>.tmp-<pid>", removed unless commit() renamed it.
class TempOutput {
 public:
  TempOutput(const fs::path& out, const PackTextOptions& options) : out_(out) {
    std::error_code ec;
    const fs::path parent = fs::absolute(out).parent_path();
    fs::create_directories(parent, ec);
    STOKER_CHECK_HINT(!ec && fs::is_directory(parent), "choose an --out inside a writable folder",
                      "stoker pack-text: cannot create the folder ", parent.string(), ": ",
                      ec.message());
    for (const std::string& line : detail::remove_stale_leftovers(out)) {
      if (options.report) std::fprintf(stderr, "stoker pack-text: %s\n", line.c_str());
    }
    tmp_ = out.string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp_, ec);
    fs::create_directory(tmp_, ec);
    STOKER_CHECK_HINT(!ec, "choose an --out inside a writable folder",
                      "stoker pack-text: cannot "
                      "create ",
                      tmp_.string(), ": ", ec.message());
    std::ofstream(tmp_ / detail::kPackOwnerFile) << detail::host_name() << '\n';
  }
  ~TempOutput() {
    if (!tmp_.empty()) {
      std::error_code ec;
      fs::remove_all(tmp_, ec);
    }
  }
  const fs::path& dir() const { return tmp_; }

  // Renames the folder to <out>, replacing what is there only when it is a pack-text output.
  void commit(bool overwrite) {
    std::error_code ec;
    fs::remove(tmp_ / detail::kPackOwnerFile, ec);
    fsync_path(tmp_, O_RDONLY | O_DIRECTORY);
    fs::path replaced;
    if (fs::symlink_status(out_, ec).type() != fs::file_type::not_found) {
      // Checked again now: the pack may have run for hours.
      detail::check_pack_text_replaceable(out_, overwrite);
      replaced = out_.string() + ".replaced-" + std::to_string(::getpid());
      fs::rename(out_, replaced, ec);
      STOKER_CHECK_HINT(!ec, "remove the existing output or choose another --out",
                        "stoker pack-text: cannot move the previous ", out_.string(),
                        " aside: ", ec.message());
    }
    fs::rename(tmp_, out_, ec);
    if (ec) {
      std::error_code back;
      if (!replaced.empty()) fs::rename(replaced, out_, back);
      core::detail::throw_error(__FILE__, __LINE__,
                                fmt::format("stoker pack-text: cannot rename {} to {}: {}",
                                            tmp_.string(), out_.string(), ec.message()),
                                "remove the existing output or choose another --out");
    }
    tmp_.clear();
    fsync_path(fs::absolute(out_).parent_path(), O_RDONLY | O_DIRECTORY);
    if (!replaced.empty()) fs::remove_all(replaced, ec);
  }

 private:
  fs::path out_, tmp_;
};

struct Encoded {
  std::vector<int32_t> ids;
  std::string error;  // non-empty: a bad document
  int64_t line = 0;   // where the error is
  bool empty = false;
};

struct Batch {
  std::vector<TextRecord> records;
  std::vector<Encoded> encoded;
};

const char* split_name(TextSplit s) {
  return s == TextSplit::paragraph ? "paragraph" : s == TextSplit::line ? "line" : "file";
}

std::string bad_hint(TextFormat format, const std::string& error) {
  if (error.find("UTF-8") != std::string::npos || error.find("NUL") != std::string::npos) {
    return "convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8`), or pass "
           "--skip-bad-documents to leave such documents out";
  }
  if (error.find("field") != std::string::npos) {
    return "name the field that holds the text with --text-key, or pass --skip-bad-documents "
           "to leave such lines out";
  }
  if (format == TextFormat::jsonl) {
    return "fix the line (JSON Lines: one JSON object per line), pass --format text to read the "
           "file as plain text, or --skip-bad-documents to leave such lines out";
  }
  return "pass --skip-bad-documents to leave such documents out";
}

}  // namespace

namespace detail {

void check_pack_text_replaceable(const fs::path& out, bool overwrite) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (st.type() == fs::file_type::not_found) return;
  const bool folder = fs::is_directory(st);
  // An empty folder (made beforehand for the output) holds nothing to lose.
  if (folder && fs::is_empty(out, ec) && !ec) return;
  STOKER_CHECK_HINT(overwrite,
                    "pass --overwrite to replace it (only a folder written by stoker pack-text is "
                    "replaced), or choose another --out",
                    "stoker pack-text: --out ", out.string(), " already exists");
  STOKER_CHECK_HINT(folder, "choose another --out", "stoker pack-text: --out ", out.string(),
                    " is ", fs::is_symlink(st) ? "a symbolic link" : "not a folder",
                    ": --overwrite replaces only a folder written by stoker pack-text");
  std::set<std::string> listed, manifests;
  std::vector<std::string> entries;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    entries.push_back(name);
    if (name.size() <= std::strlen(kManifestSuffix) ||
        name.compare(name.size() - std::strlen(kManifestSuffix), std::string::npos,
                     kManifestSuffix) != 0) {
      continue;
    }
    std::ifstream in(it->path());
    const nlohmann::json m = nlohmann::json::parse(in, nullptr, false);
    if (m.is_discarded() || !m.is_object() || m.value("format", "") != kManifestFormat ||
        !m.contains("files") || !m["files"].is_object()) {
      continue;
    }
    manifests.insert(name);
    for (const auto& item : m["files"].items()) listed.insert(item.key());
  }
  STOKER_CHECK_HINT(!ec, "check the folder's permissions", "stoker pack-text: cannot list ",
                    out.string(), ": ", ec.message());
  STOKER_CHECK_HINT(!manifests.empty(), "choose another --out, or remove the folder yourself",
                    "stoker pack-text: --out ", out.string(),
                    " was not written by stoker pack-text (no *", kManifestSuffix,
                    " of it inside): --overwrite does not replace it");
  std::sort(entries.begin(), entries.end());
  for (const std::string& name : entries) {
    STOKER_CHECK_HINT(manifests.count(name) || listed.count(name),
                      "choose another --out, or move that file away first",
                      "stoker pack-text: --out ", out.string(), " holds ", name,
                      ", which stoker pack-text did not write: --overwrite does not replace "
                      "the folder");
  }
}

}  // namespace detail

PackTextSummary pack_text(const std::vector<fs::path>& inputs, const fs::path& out_arg,
                          const PackTextOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  STOKER_CHECK_HINT(!out_arg.empty(), "pass --out DIR", "stoker pack-text: --out is empty");
  const fs::path out = out_arg.has_filename() ? out_arg : out_arg.parent_path();
  STOKER_CHECK_HINT(options.train != !options.tokenizer.empty(),
                    "pass --tokenizer FILE.model, or --train-tokenizer --vocab-size N",
                    options.train ? "stoker pack-text: --tokenizer and --train-tokenizer exclude "
                                    "each other"
                                  : "stoker pack-text: no tokenizer");
  STOKER_CHECK_HINT(!options.prefix.empty() && options.prefix.find('/') == std::string::npos &&
                        options.prefix != "." && options.prefix != "..",
                    "pass a plain file name, e.g. --prefix tokens", "stoker pack-text: --prefix '",
                    options.prefix, "' is not a file name");
  STOKER_CHECK_HINT(options.threads >= 0, "pass -j 0 for all cores", "stoker pack-text: --threads ",
                    options.threads, " is negative");
  // Before any work: no output onto an input, and what is at --out may be replaced.
  core::PathGuard guard;
  for (const fs::path& input : inputs) guard.input("INPUT", input);
  if (!options.train) {
    core::check_input_file(options.tokenizer, "--tokenizer");
    guard.input("--tokenizer", options.tokenizer);
  }
  guard.output("--out", out, core::PathGuard::Kind::folder);
  detail::check_pack_text_replaceable(out, options.overwrite);
  detail::TextReader reader(inputs, {.format = options.format,
                                     .split = options.split,
                                     .max_document_bytes = options.max_document_bytes});
  PackTextSummary summary;
  summary.output = out;
  summary.input_bytes = reader.total_bytes();
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  // Installed before the temporary folder exists and removed after it is gone or renamed.
  detail::InterruptGuard interrupt_guard;
  TempOutput tmp(out, options);

  // The tokenizer: given, or trained on a sample of the inputs' lines.
  std::optional<detail::SentencePieceTokenizer> tokenizer;
  util::ProgressBar progress(options.progress);
  if (options.train) {
    const auto train_start = std::chrono::steady_clock::now();
    tokenizer = detail::SentencePieceTokenizer::train(options.training, [&](const auto& emit) {
      TextRecord record;
      std::string text, error;
      int64_t line = 0;
      while (reader.next(record)) {
        check_interrupt(out);
        // Bad documents are left out here; the encoding pass reports them in order.
        if (!detail::document_text(record, reader.format_of(record.input), options.text_key, text,
                                   error, line)) {
          continue;
        }
        size_t begin = 0;
        while (begin <= text.size()) {
          size_t end = text.find('\n', begin);
          if (end == std::string::npos) end = text.size();
          emit(std::string_view(text).substr(begin, end - begin));
          begin = end + 1;
        }
        progress.draw("reading for the tokenizer", static_cast<int64_t>(reader.bytes_read()),
                      static_cast<int64_t>(reader.total_bytes()));
      }
      progress.clear();
    });
    check_interrupt(out);
    reader.rewind();
    summary.trained = true;
    summary.train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
  } else {
    tokenizer = detail::SentencePieceTokenizer::load(options.tokenizer.string());
  }
  const int eos = tokenizer->eos_id(), bos = tokenizer->bos_id();
  STOKER_CHECK_HINT(!options.eos || eos >= 0,
                    "pass --no-eos to write documents without an end-of-document id",
                    "stoker pack-text: the tokenizer ", options.tokenizer.string(),
                    " has no end-of-sequence piece (</s>)");
  STOKER_CHECK_HINT(!options.bos || bos >= 0, "leave --bos out", "stoker pack-text: the tokenizer ",
                    options.tokenizer.string(), " has no beginning-of-sequence piece (<s>)");
  summary.vocab_size = tokenizer->vocab_size();
  const uint8_t dtype = detail::megatron_dtype_for_vocab(summary.vocab_size);
  summary.dtype = dtype == detail::kMegatronDtypeUint16 ? "uint16" : "int32";
  const uint64_t tokenizer_checksum =
      write_small_file(tmp.dir() / kTokenizerFile, tokenizer->serialized());

  // The documents: read in order, encoded in parallel, written in order.
  detail::IndexedDatasetWriter writer(tmp.dir() / options.prefix, dtype);
  std::vector<int64_t> input_documents(inputs.size(), 0);
  const auto encode_start = std::chrono::steady_clock::now();
  bool done = false;
  // An error inside the pipeline is kept and rethrown after it: an exception thrown through
  // oneTBB's pipeline leaks the batches in flight, so the stages stop taking work instead and
  // the pipeline drains.
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const auto keep_error = [&] {
    const std::lock_guard<std::mutex> lock(error_mutex);
    if (!first_error) first_error = std::current_exception();
    failed = true;
  };
  // -j N means N threads, also above the cores (oneTBB would cap the arena and warn).
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism,
                                  static_cast<size_t>(threads));
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        static_cast<size_t>(threads) * 4,
        tbb::make_filter<void, std::shared_ptr<Batch>>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> std::shared_ptr<Batch> {
              if (done || failed || detail::InterruptGuard::signal() != 0) {
                fc.stop();
                return nullptr;
              }
              auto batch = std::make_shared<Batch>();
              size_t bytes = 0;
              TextRecord record;
              try {
                while (bytes < kBatchBytes && batch->records.size() < kBatchDocuments) {
                  if (!reader.next(record)) {
                    done = true;
                    break;
                  }
                  bytes += record.raw.size();
                  batch->records.push_back(std::move(record));
                }
              } catch (...) {
                keep_error();
                fc.stop();
                return nullptr;
              }
              if (batch->records.empty()) {
                fc.stop();
                return nullptr;
              }
              return batch;
            }) &
            tbb::make_filter<std::shared_ptr<Batch>, std::shared_ptr<Batch>>(
                tbb::filter_mode::parallel,
                [&](std::shared_ptr<Batch> batch) {
                  if (failed) return batch;
                  batch->encoded.resize(batch->records.size());
                  std::string text;
                  try {
                    for (size_t i = 0; i < batch->records.size(); ++i) {
                      if (detail::InterruptGuard::signal() != 0) break;
                      const TextRecord& r = batch->records[i];
                      Encoded& e = batch->encoded[i];
                      if (!detail::document_text(r, reader.format_of(r.input), options.text_key,
                                                 text, e.error, e.line)) {
                        continue;
                      }
                      if (options.bos) e.ids.push_back(bos);
                      e.error = tokenizer->encode(text, e.ids);
                      const size_t base = options.bos ? 1 : 0;
                      if (e.error.empty() && e.ids.size() == base) {
                        e.empty = true;  // nothing to encode: left out, counted
                        e.ids.clear();
                        continue;
                      }
                      if (!e.error.empty()) e.error = "SentencePiece cannot encode it: " + e.error;
                      if (options.eos) e.ids.push_back(eos);
                      std::string().swap(batch->records[i].raw);
                    }
                  } catch (...) {
                    keep_error();
                  }
                  return batch;
                }) &
            tbb::make_filter<std::shared_ptr<Batch>, void>(
                tbb::filter_mode::serial_in_order, [&](std::shared_ptr<Batch> batch) {
                  if (failed || detail::InterruptGuard::signal() != 0) return;
                  try {
                    for (size_t i = 0; i < batch->records.size(); ++i) {
                      const TextRecord& r = batch->records[i];
                      Encoded& e = batch->encoded[i];
                      if (e.empty) {
                        ++summary.empty_documents;
                        continue;
                      }
                      if (!e.error.empty()) {
                        const TextFormat format = reader.format_of(r.input);
                        const std::string where = fmt::format(
                            "{}:{}", reader.inputs()[static_cast<size_t>(r.input)].string(),
                            e.line);
                        STOKER_CHECK_HINT(options.skip_bad_documents, bad_hint(format, e.error),
                                          "stoker pack-text: ", where, ": ", e.error);
                        ++summary.bad_documents;
                        if (summary.bad.size() < kListedBad) {
                          summary.bad.push_back(fmt::format("{}: {}", where, e.error));
                          if (options.report) {
                            std::fprintf(stderr, "%sskipped %s\n", progress.enabled() ? "\n" : "",
                                         summary.bad.back().c_str());
                          }
                        }
                        continue;
                      }
                      writer.add_document(e.ids);
                      ++input_documents[static_cast<size_t>(r.input)];
                      ++summary.documents;
                      summary.tokens += static_cast<int64_t>(e.ids.size());
                      std::vector<int32_t>().swap(e.ids);
                      if (options.fail_after_documents >= 0 &&
                          summary.documents >= options.fail_after_documents) {
                        STOKER_THROW("stoker pack-text: injected failure after ", summary.documents,
                                     " documents");
                      }
                    }
                  } catch (...) {
                    keep_error();
                    return;
                  }
                  const double s =
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - encode_start)
                          .count();
                  progress.draw("tokenizing", static_cast<int64_t>(reader.bytes_read()),
                                static_cast<int64_t>(reader.total_bytes()),
                                fmt::format(" {} documents {} tokens/s", summary.documents,
                                            static_cast<int64_t>(s > 0 ? summary.tokens / s : 0)));
                }));
  });
  if (first_error) std::rethrow_exception(first_error);
  check_interrupt(out);
  progress.finish();
  STOKER_CHECK_HINT(summary.documents > 0, "pass inputs that hold text",
                    "stoker pack-text: no document to write among ", inputs.size(), " inputs (",
                    summary.empty_documents, " empty, ", summary.bad_documents,
                    " bad); nothing written to ", out.string());
  const detail::IndexedDatasetFiles files = writer.finish();
  check_interrupt(out);

  // The manifest, last: it lists and checksums the other files.
  nlohmann::json m;
  m["format"] = kManifestFormat;
  m["version"] = 1;
  m["stoker_version"] = core::version();
  const std::string bin = options.prefix + ".bin", idx = options.prefix + ".idx";
  m["dataset"] = {{"type", "megatron-indexed"},
                  {"prefix", options.prefix},
                  {"bin", bin},
                  {"idx", idx},
                  {"dtype", summary.dtype},
                  {"dtype_code", dtype},
                  {"documents", files.documents},
                  {"sequences", files.documents},
                  {"tokens", files.tokens},
                  {"vocab_size", summary.vocab_size},
                  {"eos_id", options.eos ? nlohmann::json(eos) : nlohmann::json(nullptr)},
                  {"bos_id", options.bos ? nlohmann::json(bos) : nlohmann::json(nullptr)}};
  m["files"] = {
      {bin, {{"bytes", files.bin_bytes}, {"xxh3_64", util::checksum_hex(files.bin_checksum)}}},
      {idx, {{"bytes", files.idx_bytes}, {"xxh3_64", util::checksum_hex(files.idx_checksum)}}},
      {kTokenizerFile,
       {{"bytes", tokenizer->serialized().size()},
        {"xxh3_64", util::checksum_hex(tokenizer_checksum)}}}};
  nlohmann::json tok = {
      {"file", kTokenizerFile}, {"trained", options.train}, {"vocab_size", summary.vocab_size}};
  if (options.train) {
    tok["model_type"] = options.training.model_type;
    tok["sample_sentences"] = options.training.sample_sentences;
    tok["seed"] = options.training.seed;
  } else {
    tok["source"] = fs::weakly_canonical(options.tokenizer).string();
  }
  m["tokenizer"] = tok;
  m["inputs"] = nlohmann::json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::error_code ec;
    m["inputs"].push_back(
        {{"path", fs::weakly_canonical(inputs[i], ec).string()},
         {"bytes", fs::file_size(inputs[i], ec)},
         {"format", reader.format_of(static_cast<int>(i)) == TextFormat::jsonl ? "jsonl" : "text"},
         {"documents", input_documents[i]}});
  }
  m["options"] = {{"split", split_name(options.split)},
                  {"text_key", options.text_key},
                  {"eos", options.eos},
                  {"bos", options.bos},
                  {"skip_bad_documents", options.skip_bad_documents}};
  m["skipped"] = {{"empty_documents", summary.empty_documents},
                  {"bad_documents", summary.bad_documents}};
  const std::string manifest_name = options.prefix + kManifestSuffix;
  write_small_file(tmp.dir() / manifest_name, m.dump(2) + "\n");
  check_interrupt(out);
  tmp.commit(options.overwrite);

  summary.bin = out / bin;
  summary.idx = out / idx;
  summary.manifest = out / manifest_name;
  summary.tokenizer = out / kTokenizerFile;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

std::optional<RecordedTokenizer> recorded_tokenizer(const fs::path& idx) {
  fs::path manifest = idx;
  manifest.replace_extension(kManifestSuffix);
  std::error_code ec;
  if (!fs::exists(manifest, ec)) return std::nullopt;
  core::check_input_file(manifest, "the manifest");  // a FIFO is refused, not read
  std::ifstream in(manifest);
  const nlohmann::json m = nlohmann::json::parse(in, nullptr, false);
  const bool ours = !m.is_discarded() && m.is_object() && m.value("format", "") == kManifestFormat;
  const nlohmann::json* tok = ours && m.contains("tokenizer") ? &m["tokenizer"] : nullptr;
  STOKER_CHECK_HINT(tok && tok->is_object() && (*tok)["file"].is_string() &&
                        (*tok)["vocab_size"].is_number_integer(),
                    "repack the text with stoker pack-text, or remove the file", manifest.string(),
                    " is not a stoker pack-text manifest naming a tokenizer");
  RecordedTokenizer r{manifest.parent_path() / (*tok)["file"].get<std::string>(),
                      (*tok)["vocab_size"].get<int64_t>()};
  STOKER_CHECK_HINT(fs::is_regular_file(r.model, ec),
                    "repack the text with stoker pack-text (the dataset and its tokenizer travel "
                    "together)",
                    manifest.string(), " names the tokenizer ", r.model.string(),
                    ", which is not there");
  return r;
}

std::string format_summary(const PackTextSummary& s) {
  char buf[768];
  const double encode_s = s.seconds - s.train_seconds;
  std::snprintf(
      buf, sizeof buf,
      "packed %lld documents, %lld tokens (%s ids, vocabulary %lld) into %s\n"
      "  %s and %s; %.2f MiB of text in %.2f s (%.0f tokens/s)\n"
      "  tokenizer: %s (%s)\n",
      static_cast<long long>(s.documents), static_cast<long long>(s.tokens), s.dtype.c_str(),
      static_cast<long long>(s.vocab_size), s.output.string().c_str(),
      s.bin.filename().string().c_str(), s.idx.filename().string().c_str(),
      static_cast<double>(s.input_bytes) / 1048576.0, s.seconds,
      encode_s > 0 ? static_cast<double>(s.tokens) / encode_s : 0.0, s.tokenizer.string().c_str(),
      s.trained
          ? fmt::format("trained in {} ms", static_cast<int64_t>(s.train_seconds * 1000)).c_str()
          : "given");
  std::string text = buf;
  if (s.empty_documents > 0 || s.bad_documents > 0) {
    text += fmt::format("  left out: {} empty documents, {} bad documents\n", s.empty_documents,
                        s.bad_documents);
  }
  text += fmt::format("  checksums: {}\n", s.manifest.string());
  return text;
}

}  // namespace stoker::data
