// Token loader throughput: tokens per second that data::SequenceBatches delivers into host
// batches (pinned when the device is a GPU) from a corpus in the page cache, for each context and
// thread count: the number to compare with benchmarks/peers/torch_token_loader.py (a numpy memmap
// dataset behind torch.utils.data.DataLoader with pin_memory) on the same file.
//
//   stoker_token_loader_bench [--file F.bin] [--tokens N] --context 1024,8192 --batch 16
//                             --threads 0,1,2 --seconds 3 [--device cpu|cuda]
// Without --file it writes N random uint16 ids (default 2^28: 512 MiB) to a temporary raw file,
// reads it once to put it in the page cache and removes it at the end. Each run: shuffled order,
// packed sequences of T + 1 tokens, i64 batches [16, T] + targets; tokens/s counts input tokens
// (B T per batch) over the timed batches after one untimed epoch start and 3 batches of warm-up.
// Correctness: each run's first batch is compared with TokenSequences::tokens of its sequences
// (exit status 1 on a mismatch).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "stoker/stoker.h"

namespace {

using namespace stoker;
namespace fs = std::filesystem;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"token loader throughput (SequenceBatches)"};
  std::string file, contexts = "1024,8192", threads = "0,1,2", device_name = "cpu";
  int64_t tokens = int64_t{1} << 28, batch = 16;
  double seconds = 3;
  app.add_option("--file", file, "raw uint16 token file (default: a temporary random one)");
  app.add_option("--tokens", tokens, "tokens of the temporary file")->capture_default_str();
  app.add_option("--context", contexts, "contexts T, comma-separated")->capture_default_str();
  app.add_option("--batch", batch, "sequences per batch")->capture_default_str();
  app.add_option("--threads", threads, "worker thread counts (0: in next())")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "timed seconds per run")->capture_default_str();
  app.add_option("--device", device_name, "cpu or cuda (pinned host batches copied)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  fs::path path = file;
  bool temporary = false;
  if (path.empty()) {
    path =
        fs::temp_directory_path() / ("stoker_token_bench_" + std::to_string(::getpid()) + ".bin");
    temporary = true;
    std::vector<uint16_t> chunk(1 << 20);
    std::mt19937 rng(1);
    std::ofstream out(path, std::ios::binary);
    for (int64_t done = 0; done < tokens; done += static_cast<int64_t>(chunk.size())) {
      for (auto& x : chunk) x = static_cast<uint16_t>(rng() % 50257);
      const int64_t n = std::min<int64_t>(tokens - done, static_cast<int64_t>(chunk.size()));
      out.write(reinterpret_cast<const char*>(chunk.data()), n * 2);
    }
  }
  int status = 0;
  {
    const data::TokenCorpus corpus(path.string(),
                                   {.format = data::TokenFormat::raw, .token_bytes = 2});
    const data::TokenScanResult scan = corpus.scan();  // reads every page: the page cache is warm
    std::printf(
        "corpus: %s, %lld uint16 tokens (%.0f MiB), scanned in %.2f s; %ld hardware "
        "threads; device %s\n",
        path.string().c_str(), static_cast<long long>(corpus.num_tokens()),
        corpus.num_tokens() * 2.0 / (1 << 20), scan.seconds, sysconf(_SC_NPROCESSORS_ONLN),
        device_name.c_str());
    const Device device = core::parse_device(device_name);
    for (const int64_t t : parse_list(contexts)) {
      const data::TokenSequences seq(corpus, {.context = t});
      for (const int64_t th : parse_list(threads)) {
        data::SequenceBatches source({{&seq, 1, ""}}, {.batch_size = batch,
                                                       .seed = 7,
                                                       .device = device,
                                                       .threads = static_cast<int>(th),
                                                       .prefetch = 4});
        source.start_epoch(0);
        data::Batch b;
        // Correctness of the first batch (on the host).
        source.next(b);
        const Tensor host = b.input.to(Device::cpu());
        const auto slots = source.batch_slots(0, 0);
        for (int64_t j = 0; j < batch && status == 0; ++j) {
          const auto ids = seq.tokens(source.slot(slots[static_cast<size_t>(j)]).sequence);
          for (int64_t k = 0; k < t; ++k)
            if (host.data<int64_t>()[j * t + k] != ids[static_cast<size_t>(k)]) {
              std::fprintf(stderr, "MISMATCH: batch 0 row %lld token %lld\n",
                           static_cast<long long>(j), static_cast<long long>(k));
              status = 1;
              break;
            }
        }
        for (int w = 0; w < 3; ++w) source.next(b);
        int64_t batches = 0;
        const auto start = std::chrono::steady_clock::now();
        double elapsed = 0;
        while (elapsed < seconds) {
          if (!source.next(b)) {
            source.start_epoch(source.epoch() + 1);
            continue;
          }
          ++batches;
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        if (device.is_cuda()) core::synchronize_device(device);
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double tok_s = static_cast<double>(batches * batch * t) / elapsed;
        std::printf(
            "T=%-5lld batch %lld threads %-2lld: %8.1f M tokens/s  (%7.0f batches/s, %.2f "
            "GB/s of i64 inputs + targets)\n",
            static_cast<long long>(t), static_cast<long long>(batch), static_cast<long long>(th),
            tok_s / 1e6, batches / elapsed, tok_s * 16 / 1e9);
        std::fflush(stdout);
      }
    }
  }
  if (temporary) fs::remove(path);
  return status;
}
