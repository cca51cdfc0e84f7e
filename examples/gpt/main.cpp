// stoker_gpt: trains a GPT-2-style decoder (gpt_model.h) with the Trainer — AdamW, linear
// warmup + cosine decay, fp32/bf16/fp16, gradient accumulation, activation checkpointing of
// the blocks, data parallelism — and prints a text sample at the end.
//
// Data: by default the bundled public-domain text (data/kjv-genesis-exodus.txt) packed on the
// first run as `stoker pack-text --train-tokenizer` does (a SentencePiece BPE tokenizer of 1,024
// ids trained on it, --vocab to change; cached in --data-cache), each sequence once per epoch,
// the documents of its last 10 % of tokens for validation, samples decoded with its tokenizer;
// --byte-level: its bytes as ids (vocab 256, random windows, the last 10 % for validation); or
// --data FILE (raw uint16 token ids, random windows) with --vocab; or token corpora, each
// sequence once per epoch (token_data.h): --data PREFIX / .idx / pack-text folder (its recorded
// tokenizer decodes the samples; --tokenizer MODEL for others) / llm.c shards or a glob,
// --mix "a.idx:0.7,b:0.3"; or --synthetic: random tokens, one fixed
// batch per rank — the benchmark mode, timed like benchmarks/peers/torch_train.py's `gpt`
// (--bench-warmup untimed steps, a device sync, --steps timed steps, a device sync) and
// reported in its line format.
//
//   stoker_gpt                                                   # tiny model, the bundled text
//   stoker_gpt --preset gpt2-124m --synthetic --batch 16 --precision bf16
//   [--activation-checkpoint-every 1] stoker launch --nproc-per-node 8 stoker_gpt --preset
//   gpt2-124m --synthetic ... stoker launch --nproc-per-node 2 stoker_gpt --zero1 --optimizer-state
//   bf16 ...
// --zero1 shards AdamW's state over the ranks (ZeRO-1, dist/sharded_optimizer.h);
// --optimizer-state stores its moments in f32, bf16 or 8-bit blocks (optim::StateFormat);
// --optimizer-offload keeps them and the update on the CPU (optim/offloaded_optimizer.h);
// --optimizer-offload delayed (or --optimizer-offload-delayed) runs that update in the
// background during the next step, with weights one step stale (ZeRO-Offload's delayed
// parameter update).
//
// --synthetic is bench.cpp, --parity-dir parity.cpp (gpt_program.h); this file parses the flags
// and trains.
//
// --parity-dir DIR: a run to compare with PyTorch (benchmarks/peers/torch_gpt_parity.py DIR, issue
// #9). Training is made exact and simple: constant learning rate --lr (no warmup, no cosine),
// no clipping, no dropout, no accumulation, one rank, fp32 with TF32 off, AdamW (betas 0.9,
// 0.95, eps 1e-8, --weight-decay on every parameter, as torch.optim.AdamW over
// model.parameters()), a log line every step. Written into DIR:
//   config.json        the model, data and optimizer settings
//   init.safetensors   the initial weights, before any training, under the names of the peer
//                      model (benchmarks/peers/gpt_model.py's GPT: wte, wpe, blocks.N.ln1/qkv/
//                      proj/ln2/fc/fc2, lnf; the head is tied to wte.weight and not stored;
//                      layouts are nn.Embedding's [num, dim], nn.Linear's [out, in])
//   batches.i32        every optimizer step's batch, in step order, int32 little-endian: for
//                      step s (0-based) B*T input ids (row-major [B, T]) then B*T target ids
//                      (row-major [B, T], the inputs shifted by one), i.e. an array
//                      [steps, 2, B, T]; the file holds exactly `steps` batches
//   losses.json        {"steps": n, "losses": [...]}: the training loss of each optimizer
//                      step (the mean cross-entropy of its batch, before the update), one
//                      value per step
//   final.safetensors  the weights after training (same names as init.safetensors)
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/decoder_flags.h"
#include "common/program.h"
#include "common/token_data.h"
#include "data/text/pack_text.h"
#include "gpt_flops.h"
#include "gpt_program.h"
#include "stoker/core/output_path.h"
#include "stoker/diag/report.h"

namespace {

using namespace stoker;
using gpt_program::Options;
using gpt_program::ParityRun;
using program::CorpusData;
using program::CorpusDataOptions;
using program::open_corpus_data;
using program::parse_mix;
using program::resolve_token_source;
using program::TokenSource;
using Tokenizer = data::detail::SentencePieceTokenizer;
namespace fs = std::filesystem;

optim::StateFormat parse_state(const std::string& s) {
  if (s == "f32") return {};
  if (s == "bf16") return {.dtype = optim::StateDType::bf16};
  if (s == "int8") return {.dtype = optim::StateDType::int8_blockwise};
  STOKER_THROW("--optimizer-state: '", s, "' is not f32, bf16 or int8");
}

// Byte-level tokens of `text` as two uint16 files (first 90 %: train, rest: validation) under
// `cache`, written once (temporary file + rename, so ranks racing on the first run agree).
// The token files encode_text writes for `text` into `cache`: training, validation.
std::pair<fs::path, fs::path> encoded_paths(const fs::path& text, const fs::path& cache) {
  const std::string stem = text.stem().string();
  return {cache / (stem + ".train.u16"), cache / (stem + ".val.u16")};
}

std::pair<fs::path, fs::path> encode_text(const fs::path& text, const fs::path& cache, int rank) {
  const auto [train, val] = encoded_paths(text, cache);
  if (fs::exists(train) && fs::exists(val)) return {train, val};
  core::check_input_file(text, "--text");  // a FIFO is refused, not read (it could block)
  std::ifstream in(text, std::ios::binary);
  STOKER_CHECK_HINT(in.good(), "pass --text FILE (any text file), or --data FILE with uint16 ids",
                    "stoker_gpt: cannot read the text ", text.string());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t split = bytes.size() * 9 / 10;
  core::check_output_dir(cache, "--data-cache");
  auto write = [&](const fs::path& path, size_t begin, size_t end) {
    std::vector<uint16_t> ids(end - begin);
    for (size_t i = begin; i < end; ++i) ids[i - begin] = static_cast<unsigned char>(bytes[i]);
    const fs::path tmp = path.string() + ".tmp" + std::to_string(rank);
    std::ofstream(tmp, std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()),
               static_cast<std::streamsize>(ids.size() * sizeof(uint16_t)));
    fs::rename(tmp, path);
  };
  write(train, 0, split);
  write(val, split, bytes.size());
  if (rank == 0)
    std::printf("encoded %s: %zu bytes -> %s (%zu tokens), %s (%zu tokens)\n",
                text.string().c_str(), bytes.size(), train.string().c_str(), split,
                val.string().c_str(), bytes.size() - split);
  return {train, val};
}

std::string printable(const std::vector<int64_t>& tokens, int64_t vocab) {
  std::string s;
  for (const int64_t t : tokens) {
    if (vocab <= 256) {
      s.push_back(static_cast<char>(t));
    } else {
      s += std::to_string(t) + " ";
    }
  }
  return s;
}

int run(const Options& o) {
  const bool want_cpu = o.device == "cpu";
  dist::DistContext ctx =
      dist::init_from_env({.backend = want_cpu ? dist::Backend::tcp : dist::Backend::automatic});
  const int rank = ctx.env.rank, world = ctx.env.world_size;
  const bool root = rank == 0;
  Device device = ctx.device;
  if (world == 1 && !o.device.empty()) device = program::device(o.device);
  const bool parity = !o.parity_dir.empty();
  if (parity) ParityRun::check(o, world);
  ops::set_allow_tf32(o.tf32 && !parity);

  gpt::GptConfig config = gpt::GptConfig::preset(o.preset);
  if (o.layers > 0) config.layers = o.layers;
  if (o.heads > 0) config.heads = o.heads;
  if (o.width > 0) config.d_model = o.width;
  if (o.context > 0) config.context = o.context;
  if (o.vocab > 0) config.vocab = o.vocab;
  STOKER_CHECK_HINT(config.d_model % config.heads == 0,
                    "give --width a multiple of --heads (e.g. 64 per head)", "--width ",
                    config.d_model, " is not a multiple of --heads ", config.heads,
                    o.width > 0 && o.heads > 0 ? "" : " (the unset one is the preset's)");
  config.dropout = o.dropout;
  config.init = o.init == "gpt2" ? gpt::GptInit::gpt2 : gpt::GptInit::torch;
  config.fuse_gelu = o.fused_gelu;
  // The data's vocabulary unless --vocab: byte-level text needs 256 ids (a bigger vocabulary
  // only wastes the head); the default text's tokenizer is trained with kTextVocab; a pack-text
  // corpus or a --tokenizer says its own.
  const bool text_run = !o.synthetic && o.data.empty() && o.mix.empty();
  if (text_run && o.byte_level && o.vocab == 0) config.vocab = 256;
  if (text_run && !o.byte_level) config.vocab = o.vocab > 0 ? o.vocab : program::kTextVocab;
  // The default text packed (every rank: the first rename wins) and the tokenizer of samples.
  std::string data_arg = o.data;
  if (text_run && !o.byte_level)
    data_arg = program::prepare_text_corpus(o.text, o.cache, config.vocab, root).string();
  std::string tokenizer_path = o.tokenizer;
  if (tokenizer_path.empty() && !data_arg.empty() && !o.synthetic) {
    const TokenSource src = resolve_token_source("--data", data_arg);
    if (!src.raw && !src.glob)
      if (const auto recorded = data::recorded_tokenizer(src.path)) {
        tokenizer_path = recorded->model.string();
        if (o.vocab == 0) config.vocab = recorded->vocab_size;
      }
  }
  // Loaded when given, or when a sample needs it (a recorded one is not checked otherwise).
  std::optional<Tokenizer> tokenizer;
  if (!o.tokenizer.empty() || (!tokenizer_path.empty() && o.sample > 0)) {
    tokenizer = Tokenizer::load(tokenizer_path,
                                o.tokenizer.empty() ? "the tokenizer of --data" : "--tokenizer");
    if (o.vocab == 0 && !o.tokenizer.empty()) config.vocab = tokenizer->vocab_size();
    STOKER_CHECK_HINT(tokenizer->vocab_size() <= config.vocab,
                      fmt::format("pass --vocab {} (or more)", tokenizer->vocab_size()),
                      "the tokenizer ", tokenizer_path, " has ", tokenizer->vocab_size(),
                      " ids, more than the model's vocabulary of ", config.vocab,
                      ": its samples could not be decoded");
  }
  const amp::Precision precision = amp::parse_precision(o.precision);
  const int64_t t = config.context;

  nn::manual_seed(o.seed);
  gpt::Gpt model(config);
  model.to(device);
  std::unique_ptr<ParityRun> parity_run;  // writes the initial weights: before anything trains
  if (parity) parity_run = std::make_unique<ParityRun>(o, model);
  const int wrapped = o.run.activation_checkpoint_every > 0
                          ? model.checkpoint_blocks(o.run.activation_checkpoint_every)
                          : 0;
  if (o.selective) nn::set_selective_recompute(model, true);
  model.set_head_in_loss(o.fused_head);
  // Gradient synchronization: ZeRO-1's sharded one with --zero1 (even for one rank, so the
  // sharded path runs on one GPU too), the replicated one with more than one rank, else the
  // Trainer's own local one.
  std::unique_ptr<dist::GradSync> grad_sync;
  dist::ShardedGradSync* sharded_sync = nullptr;
  if (o.zero1) {
    auto sharded = std::make_unique<dist::ShardedGradSync>(*ctx.comm, model);
    sharded_sync = sharded.get();
    grad_sync = std::move(sharded);
  } else if (world > 1) {
    grad_sync = std::make_unique<dist::ReplicatedGradSync>(*ctx.comm, model);
  }

  const optim::AdamWOptions adamw{.lr = o.lr,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = o.weight_decay,
                                  .state = parse_state(o.optimizer_state)};
  std::unique_ptr<optim::Optimizer> opt_owner;
  STOKER_CHECK(!(o.zero1 && o.optimizer_offload),
               "--optimizer-offload with --zero1: not supported (offload keeps the whole state on "
               "each rank's CPU, ZeRO-1 shards it on the GPUs); choose one");
  if (o.optimizer_offload)
    opt_owner = std::make_unique<optim::OffloadedOptimizer>(
        model.named_parameters(),
        [&](optim::NamedParameters p) {
          return std::make_unique<optim::AdamW>(std::move(p), adamw);
        },
        optim::OffloadOptions{.delayed_update = o.optimizer_offload_delayed});
  else if (o.zero1)
    opt_owner =
        std::make_unique<dist::ShardedOptimizer>(*sharded_sync, [&](optim::NamedParameters p) {
          return std::make_unique<optim::AdamW>(std::move(p), adamw);
        });
  else
    opt_owner = std::make_unique<optim::AdamW>(model.named_parameters(), adamw);
  optim::Optimizer& opt = *opt_owner;
  const std::unique_ptr<nn::Loss> loss_owner = model.make_loss();
  nn::Loss& loss = *loss_owner;
  const int64_t params = model.parameter_count();
  if (root) {
    std::printf(
        "%s on %s x %d rank%s, %lld parameters (the tied head counted once), %s, "
        "batch %lld x %lld tokens x %d accumulation per rank%s\n"
        "optimizer %s: %.1f MiB of state per rank\n",
        model.describe().c_str(), device.str().c_str(), world, world == 1 ? "" : "s",
        static_cast<long long>(params), o.precision.c_str(), static_cast<long long>(o.batch),
        static_cast<long long>(t), o.accum,
        wrapped > 0 ? fmt::format(", {} blocks checkpointed", wrapped).c_str() : "",
        opt.describe().c_str(), static_cast<double>(opt.state_bytes()) / (1 << 20));
  }

  train::TrainerOptions topts{
      .precision = precision,
      .grad_accum_steps = o.accum,
      .clip_grad_norm = o.clip,
      .schedule = optim::cosine_with_warmup(o.lr, std::min(o.warmup, o.steps - 1), o.steps,
                                            o.min_lr),  // short runs: shorter warmup
      .log_interval = o.log_interval,
      .max_steps = o.steps,
      .grad_sync = grad_sync.get(),
  };
  topts.diagnostics.enabled = o.diagnostics;
  // Fast by default: the step is captured as a CUDA graph whenever it can run as one (one CUDA
  // device, one process, an optimizer that reads its learning rate on the device); --cuda-graph
  // insists (and fails naming why it cannot), --no-cuda-graph runs eagerly.
  const std::string graph_blocker = train::cuda_graph_blocker(opt, device, world);
  topts.cuda_graph = o.cuda_graph || (!o.no_cuda_graph && !parity && graph_blocker.empty());
  if (root && device.is_cuda() && !parity)
    std::printf("step: %s\n", topts.cuda_graph
                                  ? "a CUDA graph after 2 eager steps (--no-cuda-graph: eager)"
                                  : (o.no_cuda_graph ? std::string("eager (--no-cuda-graph)")
                                                     : "eager: " + graph_blocker)
                                        .c_str());
  o.run.apply(topts);  // checkpoints, metrics, evaluation (activation checkpointing: above)
  {
    // What defines the run, recorded in its checkpoints: a resume states each changed one and
    // refuses those that break the run (train/run_settings.h, docs/long_runs.md).
    using train::SettingChange;
    const auto v = [](const auto& x) { return program::setting_text(x); };
    topts.run_settings = {{"--layers", v(config.layers), SettingChange::model_shape},
                          {"--heads", v(config.heads), SettingChange::model_shape},
                          {"--width", v(config.d_model), SettingChange::model_shape},
                          {"--context", v(config.context), SettingChange::model_shape},
                          {"--vocab", v(config.vocab), SettingChange::model_shape},
                          {"--dropout", v(o.dropout), SettingChange::note}};
    for (train::RunSetting& s : program::optimization_settings(o))
      topts.run_settings.push_back(std::move(s));
  }
  if (parity_run) parity_run->adjust(topts);  // exact and simple: constant lr, no clipping

  if (o.synthetic)
    return gpt_program::run_bench(
        o, {ctx, device, config, model, loss, opt, topts, precision, params, wrapped});

  // Real data: the bundled text (packed above, or byte level), a raw token file (random windows:
  // TokenBatches), or token corpora and mixtures (each sequence once per epoch: SequenceBatches,
  // token_data.h); validation: --val, else the text's last 10 %.
  fs::path train_path, val_path = o.run.val;
  const bool corpus_run = !o.mix.empty() || o.val_split > 0 ||
                          (!data_arg.empty() && !resolve_token_source("--data", data_arg).raw) ||
                          (!o.run.val.empty() && !resolve_token_source("--val", o.run.val).raw);
  if (text_run && o.byte_level) {
    fs::path text_val;
    std::tie(train_path, text_val) = encode_text(o.text, o.cache, rank);
    if (val_path.empty()) val_path = text_val;
  } else {
    train_path = data_arg;
  }
  std::unique_ptr<data::TokenDataset> train_set, val_set;
  std::unique_ptr<data::TokenBatches> train_tokens, val_tokens;
  std::unique_ptr<CorpusData> train_corpus, val_corpus;
  if (corpus_run) {
    // Said, not ignored: the default data is a corpus now, and --on-corrupt skip was honoured
    // on the byte-level text.
    STOKER_CHECK_HINT(o.run.on_corrupt != "skip",
                      "leave --on-corrupt out, or train on the text's bytes with --byte-level (or "
                      "a raw uint16 file as --data), which can skip",
                      "--on-corrupt skip: token corpora have no skip policy; an id outside the "
                      "vocabulary stops the run naming its position");
    CorpusDataOptions co{.context = t,
                         .vocab = config.vocab,
                         .batches = {.batch_size = o.batch,
                                     .seed = o.seed,
                                     .device = device,
                                     .rank = rank,
                                     .world_size = world}};
    co.val_split = o.val_split;
    if (text_run && o.run.val.empty()) co.val_tail = 0.1;  // the text's end, as byte level
    train_corpus = o.mix.empty() ? open_corpus_data("--data", {{data_arg, 1.0}}, co)
                                 : open_corpus_data("--mix", parse_mix(o.mix), co);
    if (!val_path.empty()) {  // every rank evaluates the whole set, in corpus order
      co.batches.shuffle = false;
      co.batches.rank = 0;
      co.batches.world_size = 1;
      co.val_split = 0;
      co.val_tail = 0;
      val_corpus = open_corpus_data("--val", {{val_path.string(), 1.0}}, co);
    }
  } else {
    train_set = std::make_unique<data::TokenDataset>(
        train_path,
        data::TokenDatasetOptions{.context = t, .seed = o.seed, .vocab_size = config.vocab});
    train_tokens = std::make_unique<data::TokenBatches>(
        *train_set, data::TokenBatchesOptions{.batch_size = o.batch,
                                              .device = device,
                                              .rank = rank,
                                              .world_size = world,
                                              .on_corrupt = o.run.corrupt_policy()});
    if (!val_path.empty()) {
      val_set = std::make_unique<data::TokenDataset>(
          val_path,
          data::TokenDatasetOptions{.context = t, .seed = o.seed + 1, .vocab_size = config.vocab});
      val_tokens = std::make_unique<data::TokenBatches>(
          *val_set,
          data::TokenBatchesOptions{
              .batch_size = o.batch, .device = device, .on_corrupt = o.run.corrupt_policy()});
    }
  }
  data::BatchSource& train_data =
      corpus_run ? static_cast<data::BatchSource&>(*train_corpus->batches) : *train_tokens;
  data::BatchSource* val_data = val_tokens.get();
  if (val_corpus) val_data = val_corpus->batches.get();
  if (train_corpus && train_corpus->validation) val_data = train_corpus->validation.get();
  const int64_t epochs = (o.steps * o.accum) / train_data.batches_per_epoch() + 1;
  if (root && corpus_run) {
    std::printf("data: %s, %lld sequences per epoch, each once (seed %llu)\n%s",
                o.mix.empty() ? "token corpus" : "mixture",
                static_cast<long long>(train_corpus->batches->sequences_per_epoch()),
                static_cast<unsigned long long>(o.seed), train_corpus->summary.c_str());
    if (val_corpus) std::printf("validation:\n%s", val_corpus->summary.c_str());
  }
  if (root) {
    std::printf(
        "%s"
        "run: %lld steps of global batch %lld x %d accumulation x %d rank%s = %lld sequences "
        "(%s tokens)%s%s\n",
        corpus_run ? ""
                   : fmt::format("data: {} ({} tokens, {} windows of {}){}\n", train_path.string(),
                                 train_set->num_tokens(), train_set->size(), t + 1,
                                 val_set ? fmt::format(", validation {} ({} tokens)",
                                                       val_path.string(), val_set->num_tokens())
                                         : std::string(", no validation set"))
                         .c_str(),
        static_cast<long long>(o.steps), static_cast<long long>(o.batch), o.accum, world,
        world == 1 ? "" : "s", static_cast<long long>(o.batch * o.accum * world),
        fmt::format("{}", o.batch * o.accum * world * t).c_str(),
        o.run.checkpoint_dir.empty()
            ? ", no checkpoints (--checkpoint-dir)"
            : (", checkpoints in " + o.run.checkpoint_dir + " every " + o.run.checkpoint_interval)
                  .c_str(),
        o.run.metrics.empty() ? "" : (", metrics to " + o.run.metrics).c_str());
    std::fflush(stdout);
  }

  data::BatchSource& train_source =
      parity_run ? parity_run->record(train_data, config, adamw, device) : train_data;

  // `stoker doctor -- stoker_gpt ...` steers the run through STOKER_DIAG* (train/environment.h).
  train::Trainer trainer(model, loss, opt, train::apply_environment(topts));
  if (parity_run) parity_run->watch(trainer);
  o.run.resume_run(trainer, root);
  if (val_data && trainer.step() == 0) {
    const train::EvalResult before = trainer.evaluate(*val_data, o.run.eval_subset);
    if (root)
      std::printf("validation loss before training: %.4f (ln %lld = %.4f)\n", before.loss,
                  static_cast<long long>(config.vocab),
                  std::log(static_cast<double>(config.vocab)));
  }
  core::reset_peak_memory(device);
  const auto wall_start = std::chrono::steady_clock::now();
  // Room for the weights at the end, checked before the first step (not after the whole run).
  if (root && !o.run.save.empty()) train::check_space_for_weights(model, o.run.save, "--save");
  const train::FitResult fit = trainer.fit(train_source, epochs, parity ? nullptr : val_data);
  // Stopped by a signal (--stop-signals): where it stands and how to continue; no --save.
  if (const int status = o.run.stopped(fit, "stoker_gpt", root)) return status;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (parity_run) parity_run->finish(fit);
  const double tokens = static_cast<double>(fit.steps * o.batch * t * o.accum * world);
  if (root) {
    std::printf(
        "trained %lld steps in %.1f s: %.0f tok/s (job), %.1f ms/step, peak %.1f MiB on "
        "%s, final train loss %.4f\n",
        static_cast<long long>(fit.steps), fit.seconds, tokens / fit.seconds,
        fit.seconds * 1e3 / std::max<int64_t>(1, fit.steps),
        static_cast<double>(core::memory_stats(device).peak_bytes) / (1024.0 * 1024.0),
        device.str().c_str(), fit.final_loss);
    // MFU over the whole fit (its step time includes data and the log lines, not evaluation).
    const DType dtype =
        precision == amp::Precision::fp32 ? DType::f32 : amp::compute_dtype(precision);
    const diag::DevicePeaks peaks = diag::device_peaks(device);
    const double peak = peaks.compute_tflops(dtype, o.tf32);
    const double per_token = gpt::training_flops_per_token(config, model.parameter_count(), t);
    if (fit.seconds > 0 && peak > 0)
      std::printf(
          "model FLOPs: %.2f GFLOP per token (6 N + 12 L C T), %.0f TFLOP/s, MFU %.1f %% "
          "of %.0f TFLOP/s (%s)\n",
          per_token / 1e9, tokens / fit.seconds * per_token / 1e12,
          100 * gpt::mfu(tokens / fit.seconds, per_token, peak), peak, peaks.source.c_str());
    if (!fit.evaluations.empty())
      std::printf(
          "validation loss after training: %.4f (%lld sequences; evaluation took %.1f s, "
          "%.1f %% of the wall time)\n",
          fit.evaluations.back().loss, static_cast<long long>(fit.evaluations.back().samples),
          fit.eval_seconds, wall > 0 ? 100.0 * fit.eval_seconds / wall : 0.0);
    if (!fit.log.empty() && wall > 0 && fit.eval_seconds > 0.1 * wall)  // steps ran here
      std::printf(
          "evaluation took %.0f %% of the wall time: evaluate less often (--eval-every "
          "N steps) or on fewer sequences (--eval-subset K)\n",
          100.0 * fit.eval_seconds / wall);
    if (o.run.on_corrupt == "skip" && train_tokens)
      std::printf(
          "--on-corrupt skip: %lld bad windows replaced (%lld in training, %lld in "
          "validation)%s%s\n",
          static_cast<long long>(train_tokens->skipped() +
                                 (val_tokens ? val_tokens->skipped() : 0)),
          static_cast<long long>(train_tokens->skipped()),
          static_cast<long long>(val_tokens ? val_tokens->skipped() : 0),
          train_tokens->first_skipped().empty() ? "" : "; the first: ",
          train_tokens->first_skipped().c_str());
    if (corpus_run)
      std::printf("data sources at the end:\n%s", train_corpus->batches->report().c_str());
    if (!o.run.save.empty()) {
      // A failed write (disk full) puts the weights in a fallback file named in the error.
      train::save_weights_with_fallback(model, o.run.save, "--save", {o.run.checkpoint_dir});
      std::printf(
          "weights written to %s (safetensors; the names of PyTorch's GPT in "
          "benchmarks/peers/gpt_model.py)\n",
          o.run.save.c_str());
    }
    if (o.sample > 0) {
      // With a tokenizer the prompt is its ids and the sample its decoding; else bytes (a
      // vocabulary of 256) or ids.
      std::vector<int64_t> prompt;
      if (tokenizer) {
        std::vector<int32_t> ids;
        const std::string why = tokenizer->encode(o.prompt, ids);
        STOKER_CHECK_HINT(why.empty(), "pass another --prompt", "--prompt \"", o.prompt,
                          "\" could not be tokenized: ", why);
        prompt.assign(ids.begin(), ids.end());
      } else {
        for (const unsigned char ch : o.prompt) prompt.push_back(config.vocab <= 256 ? ch : 0);
      }
      std::vector<int64_t> out =
          gpt::generate(model, prompt, o.sample, o.top_k, o.temperature, o.seed);
      std::string text;
      if (tokenizer) {
        out.insert(out.begin(), prompt.begin(), prompt.end());
        text = tokenizer->decode(out);
      } else {
        text = o.prompt + printable(out, config.vocab);
      }
      std::printf("sample (%s, seed %llu%s):\n%s\n",
                  o.top_k <= 1 ? "greedy" : fmt::format("top-{}", o.top_k).c_str(),
                  static_cast<unsigned long long>(o.seed),
                  tokenizer ? fmt::format(", {} tokens", o.sample).c_str() : "", text.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using program::at_least;
  using program::in_range;
  using program::positive;
  Options o;
  o.run.eval_subset = 64;  // the bundled text's validation split is ~80 sequences: a quick look
  CLI::App app{
      "stoker_gpt: train a GPT-2-style decoder (the bundled text tokenized with SentencePiece, "
      "token corpora, or random tokens for benchmarking)"};
  app.add_option("--preset", o.preset,
                 "model preset: tiny | gpt2-124m | gpt2-350m | gpt2-774m | gpt2-1.5b")
      ->check(CLI::IsMember({"tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b"}))
      ->capture_default_str();
  app.add_option("--layers", o.layers, "transformer blocks (0: the preset's)")->check(at_least(0));
  app.add_option("--heads", o.heads, "attention heads (0: the preset's)")->check(at_least(0));
  app.add_option("--width", o.width, "model width C, a multiple of the heads (0: the preset's)")
      ->check(at_least(0));
  app.add_option("--context", o.context, "context length T (0: the preset's)")->check(at_least(0));
  app.add_option("--vocab", o.vocab,
                 "vocabulary size (0: the data's: 1024 for the text's trained tokenizer, 256 with "
                 "--byte-level, a pack-text corpus's or --tokenizer's; else the preset's)")
      ->check(at_least(0));
  app.add_option("--dropout", o.dropout, "dropout probability, in [0, 1)")
      ->check(in_range(0, 1))
      ->capture_default_str();
  app.add_option("--init", o.init, "gpt2 (N(0, 0.02)) | torch (PyTorch's defaults, the peer's)")
      ->check(CLI::IsMember({"gpt2", "torch"}))
      ->capture_default_str();
  program::add_schedule_flags(app, o);
  app.add_option("--precision", o.precision,
                 "fp32 | bf16 | fp16 | fp8 (bf16 with the block Linears in FP8: Ada, Hopper)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
      ->capture_default_str();
  app.add_flag("--selective", o.selective, "selective recomputation (GELU/LayerNorm outputs)");
  app.add_flag("--fused-head,!--no-fused-head", o.fused_head,
               "LM head and cross-entropy fused, a chunk of rows at a time (default on; "
               "--no-fused-head: whole logits, nn::CrossEntropyLoss)");
  app.add_flag("--cuda-graph", o.cuda_graph,
               "insist on capturing the training step as a CUDA graph (the default whenever it "
               "can: one GPU, AdamW with f32 state); an error says why it cannot");
  app.add_flag("--no-cuda-graph", o.no_cuda_graph,
               "run every step eagerly (default: a CUDA graph after 2 eager steps when it can)")
      ->excludes("--cuda-graph");
  app.add_flag("--fused-gelu,!--no-fused-gelu", o.fused_gelu,
               "the MLP's bias + GELU in the GEMMs' epilogues (default on; --no-fused-gelu: "
               "GELU as its own passes, to compare)");
  app.add_option("--data", o.data,
                 "token file of raw uint16 ids (random windows), or a token corpus, each sequence "
                 "once per epoch: Megatron PREFIX/.idx/.bin, a pack-text folder, llm.c shards or a "
                 "glob (default: the bundled text)")
      ->check(program::non_empty_path());
  app.add_option("--val-split", o.val_split,
                 "validation split of the --data corpus by document: a fraction in (0, 1) or a "
                 "count of documents, chosen by --seed and left out of training")
      ->check(CLI::PositiveNumber);
  app.add_option("--mix", o.mix,
                 "a weighted mixture of token corpora instead of --data: \"a.idx:0.7,b:0.3\"");
  app.add_option("--text", o.text,
                 "the text trained on without --data: packed with a SentencePiece tokenizer "
                 "trained on it (--vocab ids), or its bytes with --byte-level")
      ->check(program::non_empty_path())
      ->capture_default_str();
  app.add_option("--data-cache,--cache", o.cache,
                 "folder for the packed text (one pack-text folder per text and vocabulary, "
                 "reused by later runs)")
      ->check(program::non_empty_path())
      ->capture_default_str();
  app.add_flag("--byte-level", o.byte_level,
               "the text's bytes as token ids (vocabulary 256, random windows), not a tokenizer");
  app.add_option("--tokenizer", o.tokenizer,
                 "SentencePiece .model that encodes --prompt and decodes the sample (default: the "
                 "tokenizer a pack-text --data folder records)")
      ->check(program::non_empty_path());
  app.add_flag("--synthetic", o.synthetic, "random tokens, timed steps: the benchmark mode");
  app.add_option("--bench-warmup", o.bench_warmup, "synthetic: untimed steps first")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--device", o.device, "auto | cpu | cuda | cuda:N (default: the best one)");
  app.add_flag("--diagnostics", o.diagnostics, "step breakdown and verdict reports");
  app.add_option("--seed", o.seed, "initialization, data order and sampling seed")
      ->check(at_least(0))  // CLI11 would wrap a negative seed around
      ->capture_default_str();
  program::add_sampling_flags(app, o);
  app.add_option("--log-interval", o.log_interval, "steps between log lines")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_flag("--zero1", o.zero1, "shard AdamW's state over the data-parallel ranks (ZeRO-1)");
  app.add_option("--optimizer-state", o.optimizer_state, "AdamW state: f32 | bf16 | int8")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}))
      ->capture_default_str();
  std::string offload_mode;
  CLI::Option* offload =
      app.add_option("--optimizer-offload", offload_mode,
                     "AdamW's state and update on the CPU (gradients down, weights up each step); "
                     "'delayed': the update runs during the next step, weights one step stale")
          ->expected(0, 1)
          ->check(CLI::IsMember({"", "exact", "delayed"}));
  bool offload_delayed = false;
  app.add_flag("--optimizer-offload-delayed", offload_delayed,
               "--optimizer-offload delayed (ZeRO-Offload's delayed parameter update)");
  app.add_option("--tf32", o.tf32, "fp32 GEMMs on TF32 tensor cores (the peer allows TF32)")
      ->capture_default_str();
  app.add_option("--parity-dir", o.parity_dir,
                 "write init weights, config, batches and per-step losses here for "
                 "benchmarks/peers/torch_gpt_parity.py (constant lr, no clipping, fp32, TF32 off)")
      ->check(program::non_empty_path());
  o.run.add_to(app,
               "validation token file or corpus (like --data; default: the last 10 % of the "
               "bundled text, none with --data)");
  // The library's messages in this program's words (its flags, not the C++ options).
  program::FlagNames flag_names{{"enable clip_grad_norm", "enable gradient clipping (--clip)"}};
  for (auto& n : program::trainer_flag_names()) flag_names.push_back(std::move(n));
  return program::run("stoker_gpt", app, argc, argv, flag_names, [&] {
    if (o.synthetic)
      program::RunFlags::refuse_in(
          app, "a --synthetic bench",
          "it times steps on random tokens and trains no weights worth keeping");
    if (!o.parity_dir.empty())
      program::RunFlags::refuse_in(app, "a --parity-dir run",
                                   "it writes its own files for the comparison with PyTorch");
    // The inputs, which no output may touch: the token files, or the text and its encoding.
    STOKER_CHECK_HINT(o.mix.empty() || o.data.empty(), "give --data or --mix",
                      "--mix and --data both name the training data");
    STOKER_CHECK_HINT(o.val_split == 0 || (o.run.val.empty() && !o.data.empty()),
                      "split a --data corpus, or give --val",
                      "--val-split needs a --data corpus and no --val");
    // Token corpora are guarded by their index (a prefix or folder is no regular file).
    auto guarded = [](const std::string& flag, const std::string& arg) {
      if (arg.empty()) return program::RunFlags::Input{flag, arg};
      const TokenSource s = resolve_token_source(flag, arg);
      return program::RunFlags::Input{flag, s.path, false, /*exists=*/!s.glob};
    };
    std::vector<program::RunFlags::Input> inputs{guarded("--data", o.data),
                                                 guarded("--val", o.run.val)};
    if (!o.mix.empty())
      for (const auto& [source, weight] : parse_mix(o.mix))
        inputs.push_back(guarded("--mix", source));
    STOKER_CHECK_HINT(!o.byte_level || (o.data.empty() && o.mix.empty() && !o.synthetic),
                      "leave --byte-level out", "--byte-level reads --text, not --data or --mix");
    if (!o.tokenizer.empty()) inputs.push_back({"--tokenizer", o.tokenizer});
    if (o.data.empty() && o.mix.empty() && !o.synthetic) {
      inputs.push_back({"--text", o.text, false, /*exists=*/false});  // read when packing
      if (o.byte_level) {
        const auto [train, val] = encoded_paths(o.text, o.cache);
        inputs.push_back({"--data-cache", train, false, false});
        inputs.push_back({"--data-cache", val, false, false, /*trained_on=*/false});
      } else {  // the pack-text folder: nothing is written into it
        inputs.push_back({"--data-cache",
                          program::text_corpus_folder(o.text, o.cache,
                                                      o.vocab > 0 ? o.vocab : program::kTextVocab),
                          /*database=*/true, /*exists=*/false});
      }
    }
    o.run.check(app, (o.data.empty() && o.mix.empty()) || !o.run.val.empty() || o.val_split > 0,
                dist::read_env().rank == 0, inputs);
    o.optimizer_offload_delayed = offload_delayed || offload_mode == "delayed";
    o.optimizer_offload = offload->count() > 0 || o.optimizer_offload_delayed;
    STOKER_CHECK_HINT(o.sample == 0 || !o.prompt.empty(), "give --prompt TEXT, or --sample 0",
                      "--prompt is empty: --sample ", o.sample, " needs a text to continue");
    return run(o);
  });
}
