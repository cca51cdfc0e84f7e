// stoker_llm: trains a Llama-3-architecture decoder (llama_model.h) with the Trainer — AdamW,
// warmup + cosine, fp32/bf16/fp8, gradient accumulation, activation checkpointing, 8-bit
// optimizer state, ZeRO-1, data parallelism under `stoker launch` or torchrun — and generates a
// sample with a KV cache at the end (generate.h). docs/llm.md is its page.
//
// Data (common/token_data.h, as stoker_gpt's): by default the bundled text packed with a
// SentencePiece tokenizer of 1,024 ids (llama3-debug's vocabulary) into --data-cache, the
// documents of its last 10 % of tokens for validation; or --data / --mix token corpora (each
// sequence once per epoch), --val, --val-split. --document-mask: each token's RoPE position
// restarts at its document and attention stops at document starts.
// Model: --preset llama3-debug | llama3.2-1b | llama3.2-3b | llama3-8b, shape flags, or
// --init-from a transformers Llama folder (hf_llama.h); --save DIR writes one.
// Memory: the plan (memory_plan.h) is printed at the start; a run that cannot fit stops before
// allocating anything, naming the flags that would make it fit; --memory-plan prints the plan.
//
//   stoker_llm                                           # llama3-debug on the bundled text
//   stoker_llm --preset llama3-8b --memory-plan --precision bf16
//   stoker launch --nproc-per-node 8 stoker_llm --preset llama3.2-1b --data corpus/ --zero1 ...
//   stoker_llm --preset llama3.2-1b --synthetic --batch 4 --context 2048 --precision bf16
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/decoder_flags.h"
#include "common/program.h"
#include "common/token_data.h"
#include "data/text/pack_text.h"
#include "generate.h"
#include "hf_llama.h"
#include "llm_program.h"
#include "parity.h"
#include "stoker/core/output_path.h"
#include "stoker/diag/report.h"

namespace stoker::llm_program {

// Runs f(), an error of it restated as one of --init-from DIR (the flag the user gave).
template <typename F>
auto from_init_folder(const std::string& dir, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    STOKER_CHECK_HINT(false,
                      e.hint().empty() ? "give --init-from a transformers Llama folder" : e.hint(),
                      "--init-from ", dir, ": ", e.message());
    throw;  // not reached
  }
}

llm::LlamaConfig model_config(const Options& o) {
  const bool hf = !o.init_from.empty();
  llm::LlamaConfig c =
      hf ? from_init_folder(o.init_from, [&] { return llm::read_hf_config(o.init_from); })
         : llm::LlamaConfig::preset(o.preset);
  const auto shape = [&](const char* flag, int64_t value, int64_t& field) {
    if (value == 0) return;
    STOKER_CHECK_HINT(!hf || value == field,
                      fmt::format("leave {} out (the folder's config.json gives it)", flag), flag,
                      " ", value, " contradicts --init-from ", o.init_from, "'s config.json (",
                      field, "): its weights have that shape");
    field = value;
  };
  shape("--layers", o.layers, c.layers);
  shape("--heads", o.heads, c.heads);
  shape("--kv-heads", o.kv_heads, c.kv_heads);
  shape("--width", o.width, c.d_model);
  shape("--ffn", o.ffn, c.ffn);
  shape("--vocab", o.vocab, c.vocab);
  if (!hf && (o.width > 0 || o.heads > 0)) {  // transformers' default head_dim: C / H
    STOKER_CHECK_HINT(c.d_model % c.heads == 0, "give --width a multiple of --heads", "--width ",
                      c.d_model, " is not a multiple of --heads ", c.heads);
    c.head_dim = c.d_model / c.heads;
    c.rope.head_dim = c.head_dim;
  }
  STOKER_CHECK_HINT(c.heads % c.kv_heads == 0, "give --kv-heads a divisor of --heads",
                    "--kv-heads ", c.kv_heads, " does not divide --heads ", c.heads);
  return c;
}

int64_t sequence_length(const Options& o, const llm::LlamaConfig& c) {
  if (o.context == 0) return std::min<int64_t>(c.context, 2048);
  STOKER_CHECK_HINT(o.context <= c.context, fmt::format("give --context {} or less", c.context),
                    "--context ", o.context, " is longer than the model's max_position_embeddings ",
                    c.context);
  return o.context;
}

llm::MemoryPlanInput plan_input(const Options& o, const llm::LlamaConfig& c, Device device,
                                int world) {
  return {.config = c,
          .batch = o.batch,
          .seq = sequence_length(o, c),
          .precision = amp::parse_precision(o.precision),
          .checkpoint_every = o.run.activation_checkpoint_every,
          .optimizer_state = o.optimizer_state,
          .zero1 = o.zero1,
          .world = world,
          .fused_attention = device.is_cuda()};
}

}  // namespace stoker::llm_program

namespace {

using namespace stoker;
using llm_program::Options;
using program::TokenSource;
using Tokenizer = data::detail::SentencePieceTokenizer;
namespace fs = std::filesystem;

optim::StateFormat parse_state(const std::string& s) {
  if (s == "bf16") return {.dtype = optim::StateDType::bf16};
  if (s == "int8") return {.dtype = optim::StateDType::int8_blockwise};
  return {};
}

bool text_run(const Options& o) { return !o.synthetic && o.data.empty() && o.mix.empty(); }

// The training data's argument (the bundled text packed on the first run, every rank: the first
// rename wins) and the tokenizer of the samples: --tokenizer, else the corpus's recorded one.
struct TextSetup {
  std::string data_arg;
  std::optional<Tokenizer> tokenizer;
};

TextSetup prepare_text(const Options& o, const llm::LlamaConfig& c, bool root) {
  TextSetup t{o.data, std::nullopt};
  if (text_run(o))
    t.data_arg = program::prepare_text_corpus(o.text, o.cache, program::kTextVocab, root).string();
  std::string path = o.tokenizer;
  if (path.empty() && !t.data_arg.empty() && !o.synthetic) {
    const TokenSource src = program::resolve_token_source("--data", t.data_arg);
    if (!src.raw && !src.glob)
      if (const auto recorded = data::recorded_tokenizer(src.path)) path = recorded->model.string();
  }
  if (!o.tokenizer.empty() || (!path.empty() && o.sample > 0)) {
    t.tokenizer =
        Tokenizer::load(path, o.tokenizer.empty() ? "the tokenizer of --data" : "--tokenizer");
    STOKER_CHECK_HINT(t.tokenizer->vocab_size() <= c.vocab,
                      "give a tokenizer of the model's vocabulary, or another --preset",
                      "the tokenizer ", path, " has ", t.tokenizer->vocab_size(),
                      " ids, more than the model's vocabulary of ", c.vocab);
  }
  return t;
}

// The memory plan: one line at the start; --memory-plan prints it whole and ends the program;
// a run that cannot fit stops here, before anything is allocated.
bool plan_memory(const Options& o, const llm::LlamaConfig& c, Device device, int world, bool root) {
  const llm::MemoryPlanInput in = llm_program::plan_input(o, c, device, world);
  const llm::MemoryPlan plan = llm::plan_memory(in);
  const int64_t free = llm::free_device_memory(device);
  const std::string advice = llm::advice_to_fit(in, free);
  if (o.memory_plan) {
    if (root)
      std::printf(
          "%s on %s, batch %lld x %lld tokens, %s, optimizer state %s%s:\n%s%s%s", c.str().c_str(),
          device.str().c_str(), static_cast<long long>(in.batch), static_cast<long long>(in.seq),
          o.precision.c_str(), o.optimizer_state.c_str(),
          o.zero1 ? fmt::format(", ZeRO-1 over {} ranks", world).c_str() : "", plan.table().c_str(),
          free >= 0 ? fmt::format("  free now    {:>10}  on {}\n",
                                  core::format_bytes(static_cast<size_t>(free)), device.str())
                          .c_str()
                    : "  free now    unknown\n",
          advice.c_str());
    return false;
  }
  if (root) std::printf("%s\n", plan.line().c_str());
  STOKER_CHECK_HINT(advice.empty(), "add the flags above (or run on a larger device)", "--preset ",
                    o.init_from.empty() ? o.preset : o.init_from, " does not fit on ", device.str(),
                    ": ", advice);
  return true;
}

std::vector<train::RunSetting> run_settings(const Options& o, const llm::LlamaConfig& c,
                                            int64_t t) {
  using train::SettingChange;
  const auto v = [](const auto& x) { return program::setting_text(x); };
  std::vector<train::RunSetting> settings{
      {"--layers", v(c.layers), SettingChange::model_shape},
      {"--heads", v(c.heads), SettingChange::model_shape},
      {"--kv-heads", v(c.kv_heads), SettingChange::model_shape},
      {"--width", v(c.d_model), SettingChange::model_shape},
      {"--ffn", v(c.ffn), SettingChange::model_shape},
      {"--vocab", v(c.vocab), SettingChange::model_shape},
      {"--context", v(t), SettingChange::refuse},
      {"--document-mask", o.document_mask ? "on" : "off", SettingChange::refuse}};
  for (train::RunSetting& s : program::optimization_settings(o)) settings.push_back(std::move(s));
  return settings;
}

// The optimizer (and the gradient sync it needs): ZeRO-1's sharded AdamW with --zero1, else
// AdamW with the replicated sync over several ranks.
struct Optimization {
  std::unique_ptr<dist::GradSync> sync;
  std::unique_ptr<optim::Optimizer> opt;
};

// AdamW with Llama's betas (0.9, 0.95), decay on every parameter.
optim::AdamWOptions adamw_options(const Options& o) {
  return {.lr = o.lr,
          .beta1 = 0.9f,
          .beta2 = 0.95f,
          .eps = 1e-8f,
          .weight_decay = o.weight_decay,
          .state = parse_state(o.optimizer_state)};
}

Optimization make_optimizer(const Options& o, dist::DistContext& ctx, llm::Llama& model) {
  const optim::AdamWOptions adamw = adamw_options(o);
  Optimization out;
  const auto make = [&](optim::NamedParameters p) {
    return std::make_unique<optim::AdamW>(std::move(p), adamw);
  };
  if (o.zero1) {
    auto sharded = std::make_unique<dist::ShardedGradSync>(*ctx.comm, model);
    out.opt = std::make_unique<dist::ShardedOptimizer>(*sharded, make);
    out.sync = std::move(sharded);
  } else {
    if (ctx.env.world_size > 1)
      out.sync = std::make_unique<dist::ReplicatedGradSync>(*ctx.comm, model);
    out.opt = make(model.named_parameters());
  }
  return out;
}

// Training and validation batches: token corpora served by SequenceBatches (the packed text's
// last 10 % of tokens for validation unless --val / --val-split).
std::unique_ptr<program::CorpusData> open_data(const Options& o, const std::string& data_arg,
                                               const llm::LlamaConfig& c, int64_t t, Device device,
                                               int rank, int world,
                                               std::unique_ptr<program::CorpusData>* val) {
  program::CorpusDataOptions co{.context = t,
                                .vocab = c.vocab,
                                .batches = {.batch_size = o.batch,
                                            .seed = o.seed,
                                            .document_masks = o.document_mask,
                                            .device = device,
                                            .rank = rank,
                                            .world_size = world}};
  co.val_split = o.val_split;
  if (text_run(o) && o.run.val.empty()) co.val_tail = 0.1;
  auto train = o.mix.empty() ? program::open_corpus_data("--data", {{data_arg, 1.0}}, co)
                             : program::open_corpus_data("--mix", program::parse_mix(o.mix), co);
  if (!o.run.val.empty()) {  // every rank evaluates the whole set, in corpus order
    co.batches.shuffle = false;
    co.batches.rank = 0;
    co.batches.world_size = 1;
    co.val_split = 0;
    co.val_tail = 0;
    *val = program::open_corpus_data("--val", {{o.run.val, 1.0}}, co);
  }
  return train;
}

std::string sample_text(const Options& o, llm::Llama& model, const std::optional<Tokenizer>& tok) {
  std::vector<int64_t> prompt;
  if (tok) {
    std::vector<int32_t> ids;
    const std::string why = tok->encode(o.prompt, ids);
    STOKER_CHECK_HINT(why.empty(), "pass another --prompt", "--prompt \"", o.prompt,
                      "\" could not be tokenized: ", why);
    prompt.assign(ids.begin(), ids.end());
  }
  if (prompt.empty())
    prompt.push_back(model.config().bos_id >= 0 && model.config().bos_id < model.config().vocab
                         ? model.config().bos_id
                         : 0);
  const int64_t room = model.config().context - static_cast<int64_t>(prompt.size());
  std::vector<int64_t> out =
      llm::generate(model, prompt, std::min(o.sample, room), o.top_k, o.temperature, o.seed);
  if (!tok) return o.prompt + " " + fmt::format("{}", fmt::join(out, " "));
  out.insert(out.begin(), prompt.begin(), prompt.end());
  return tok->decode(out);
}

// `done`: the steps this job ran (a resumed fit counts from the checkpoint's step).
void report_fit(const Options& o, const train::FitResult& fit, int64_t done,
                const llm::LlamaConfig& c, int64_t t, int world, Device device) {
  const double tokens = static_cast<double>(done * o.batch * t * o.accum * world);
  const double tok_s = fit.seconds > 0 ? tokens / fit.seconds : 0;
  std::printf(
      "trained %lld steps (to step %lld) in %.1f s: %.0f tok/s (job), %.1f ms/step, peak %.1f MiB "
      "on %s, final train loss %.4f\n",
      static_cast<long long>(done), static_cast<long long>(fit.steps), fit.seconds, tok_s,
      fit.seconds * 1e3 / std::max<int64_t>(1, done),
      static_cast<double>(core::memory_stats(device).peak_bytes) / (1024.0 * 1024.0),
      device.str().c_str(), fit.final_loss);
  // MFU over the whole fit (its time includes data, log lines and evaluation).
  const double per_token = llm_program::training_flops_per_token(c, t);
  const amp::Precision precision = amp::parse_precision(o.precision);
  const diag::DevicePeaks peaks = diag::device_peaks(device);
  const double peak = peaks.compute_tflops(
      precision == amp::Precision::fp32 ? DType::f32 : amp::compute_dtype(precision), o.tf32);
  std::printf(
      "model FLOPs: %.3f GFLOP per token (6 N' + 12 L H D T, docs/llm.md), %.2f TFLOP/s%s\n",
      per_token / 1e9, tok_s * per_token / 1e12,
      peak > 0 ? fmt::format(", MFU {:.1f} % of {:g} TFLOP/s ({})",
                             100 * tok_s * per_token / (peak * 1e12), peak, peaks.source)
                     .c_str()
               : "");
  if (!fit.evaluations.empty())
    std::printf("validation loss after training: %.4f (%lld sequences)\n",
                fit.evaluations.back().loss,
                static_cast<long long>(fit.evaluations.back().samples));
}

// The training run proper: its data, the Trainer (resumed when --checkpoint-dir holds a
// checkpoint), the report, --save and the sample. `b` is what run() built (bench.cpp's setup).
int train_on_data(const Options& o, const llm_program::BenchSetup& b,
                  const std::optional<Tokenizer>& tokenizer, const std::string& data_arg,
                  llm_program::ParityRun* parity) {
  const int rank = b.ctx.env.rank, world = b.ctx.env.world_size;
  const bool root = rank == 0;
  const Device device = b.device;
  const llm::LlamaConfig& config = b.config;
  const int64_t t = b.seq;
  llm::Llama& model = b.model;
  std::unique_ptr<program::CorpusData> val_corpus;
  const auto train_corpus = open_data(o, data_arg, config, t, device, rank, world, &val_corpus);
  data::BatchSource* train_data = train_corpus->batches.get();
  data::BatchSource* val_data =
      val_corpus ? val_corpus->batches.get() : train_corpus->validation.get();
  std::optional<llm::DocumentPositions> train_docs, val_docs;
  if (o.document_mask) {
    train_data = &train_docs.emplace(*train_data, model);
    if (val_data) val_data = &val_docs.emplace(*val_data, model);
  }
  if (parity) train_data = &parity->record(*train_data, adamw_options(o), t, device);
  if (root)
    std::printf(
        "data: %lld sequences of %lld tokens per epoch, each once (seed %llu)%s\n%s"
        "run: %lld steps of %lld sequences per step%s\n",
        static_cast<long long>(train_corpus->batches->sequences_per_epoch()),
        static_cast<long long>(t), static_cast<unsigned long long>(o.seed),
        o.document_mask ? ", document-masked" : "", train_corpus->summary.c_str(),
        static_cast<long long>(o.steps), static_cast<long long>(o.batch * o.accum * world),
        o.run.checkpoint_dir.empty() ? ", no checkpoints (--checkpoint-dir)"
                                     : (", checkpoints in " + o.run.checkpoint_dir).c_str());
  std::fflush(stdout);

  train::Trainer trainer(model, b.loss, b.opt, train::apply_environment(b.topts));
  o.run.resume_run(trainer, root);
  if (parity) parity->watch(trainer);
  if (val_data && trainer.step() == 0) {
    const double before = trainer.evaluate(*val_data, o.run.eval_subset).loss;
    if (root)
      std::printf("validation loss before training: %.4f (ln %lld = %.4f)\n", before,
                  static_cast<long long>(config.vocab), std::log(double(config.vocab)));
  }
  // Room for the weights at the end, checked before the first step (not after the whole run).
  if (root && !o.run.save.empty())
    train::check_space_for_weights(model, fs::path(o.run.save) / "model.safetensors", "--save");
  core::reset_peak_memory(device);
  const int64_t epochs = (o.steps * o.accum) / train_data->batches_per_epoch() + 1;
  const int64_t first_step = trainer.step();
  const train::FitResult fit = trainer.fit(*train_data, epochs, val_data);
  if (const int status = o.run.stopped(fit, "stoker_llm", root)) return status;
  if (!root) return 0;
  if (parity) parity->finish(fit);
  report_fit(o, fit, fit.steps - first_step, config, t, world, device);
  if (!o.run.save.empty()) {
    const std::string dt = !o.save_dtype.empty()
                               ? o.save_dtype
                               : (b.precision == amp::Precision::fp32 ? "f32" : "bf16");
    llm::save_hf(model, o.run.save, dt == "bf16" ? DType::bf16 : DType::f32);
    std::printf("weights written to %s (a transformers Llama folder, %s)\n", o.run.save.c_str(),
                dt.c_str());
  }
  if (o.sample > 0)
    std::printf("sample (%s, seed %llu):\n%s\n",
                o.top_k <= 1 ? "greedy" : fmt::format("top-{}", o.top_k).c_str(),
                static_cast<unsigned long long>(o.seed), sample_text(o, model, tokenizer).c_str());
  return 0;
}

int run(const Options& o) {
  dist::DistContext ctx = dist::init_from_env(
      {.backend = o.device == "cpu" ? dist::Backend::tcp : dist::Backend::automatic});
  const int rank = ctx.env.rank, world = ctx.env.world_size;
  const bool root = rank == 0;
  Device device = ctx.device;
  if (world == 1 && !o.device.empty()) device = program::device(o.device);
  const bool parity = !o.parity_dir.empty();
  if (parity) llm_program::ParityRun::check(o, world);
  ops::set_allow_tf32(o.tf32 && !parity);
  const llm::LlamaConfig config = llm_program::model_config(o);
  const int64_t t = llm_program::sequence_length(o, config);
  if (!plan_memory(o, config, device, world, root)) return 0;
  const TextSetup text = prepare_text(o, config, root);
  const amp::Precision precision = amp::parse_precision(o.precision);

  nn::manual_seed(o.seed);
  llm::Llama model(config);
  if (!o.init_from.empty())
    llm_program::from_init_folder(o.init_from, [&] { llm::load_hf(model, o.init_from); });
  model.to(device);
  // Written before anything trains: the initial weights as a transformers folder.
  const std::unique_ptr<llm_program::ParityRun> parity_run =
      parity ? std::make_unique<llm_program::ParityRun>(o, model) : nullptr;
  const int wrapped = o.run.activation_checkpoint_every > 0
                          ? model.checkpoint_blocks(o.run.activation_checkpoint_every)
                          : 0;
  model.set_head_in_loss(true);
  Optimization optimization = make_optimizer(o, ctx, model);
  optim::Optimizer& opt = *optimization.opt;
  const std::unique_ptr<nn::Loss> loss = model.make_loss();
  if (root)
    std::printf(
        "%s on %s x %d rank%s, %lld parameters%s, %s, batch %lld x %lld tokens x %d accumulation "
        "per rank%s\noptimizer %s: %.1f MiB of state per rank\n",
        model.describe().c_str(), device.str().c_str(), world, world == 1 ? "" : "s",
        static_cast<long long>(config.parameter_count()),
        o.init_from.empty() ? "" : (", from " + o.init_from).c_str(), o.precision.c_str(),
        static_cast<long long>(o.batch), static_cast<long long>(t), o.accum,
        wrapped > 0 ? fmt::format(", {} blocks checkpointed", wrapped).c_str() : "",
        opt.describe().c_str(), static_cast<double>(opt.state_bytes()) / (1 << 20));

  train::TrainerOptions topts{
      .precision = precision,
      .grad_accum_steps = o.accum,
      .clip_grad_norm = o.clip,
      .schedule =
          optim::cosine_with_warmup(o.lr, std::min(o.warmup, o.steps - 1), o.steps, o.min_lr),
      .log_interval = o.log_interval,
      .max_steps = o.steps,
      .grad_sync = optimization.sync.get(),
  };
  // Fast by default, as stoker_gpt: the step is a CUDA graph whenever it can run as one, except
  // with --document-mask (each batch's positions reach the model as it is fetched, which a
  // replayed step would not see).
  const std::string graph_blocker =
      o.document_mask ? std::string("--document-mask hands each batch's positions to the model")
                      : train::cuda_graph_blocker(opt, device, world);
  topts.cuda_graph = o.cuda_graph || (!o.no_cuda_graph && graph_blocker.empty());
  if (root && device.is_cuda())
    std::printf("step: %s\n", topts.cuda_graph
                                  ? "a CUDA graph after 2 eager steps (--no-cuda-graph: eager)"
                                  : (o.no_cuda_graph ? std::string("eager (--no-cuda-graph)")
                                                     : "eager: " + graph_blocker)
                                        .c_str());
  topts.diagnostics.enabled = o.diagnostics;
  o.run.apply(topts);
  topts.run_settings = run_settings(o, config, t);
  if (parity_run) parity_run->adjust(topts);  // exact and simple: constant lr, no clipping
  if (o.synthetic)
    return llm_program::run_bench(
        o, {ctx, device, config, t, model, *loss, opt, topts, precision, wrapped});

  return train_on_data(o, {ctx, device, config, t, model, *loss, opt, topts, precision, wrapped},
                       text.tokenizer, text.data_arg, parity_run.get());
}

void add_model_flags(CLI::App& app, Options& o) {
  using program::at_least;
  app.add_option("--preset", o.preset,
                 "model preset: llama3-debug | llama3.2-1b | llama3.2-3b | llama3-8b")
      ->check(CLI::IsMember(llm::LlamaConfig::preset_names()))
      ->capture_default_str();
  app.add_option("--init-from", o.init_from,
                 "start from a transformers Llama folder (config.json + model.safetensors); its "
                 "config.json gives the shape")
      ->check(program::non_empty_path());
  app.add_option("--layers", o.layers, "blocks (0: the preset's)")->check(at_least(0));
  app.add_option("--heads", o.heads, "query heads H (0: the preset's)")->check(at_least(0));
  app.add_option("--kv-heads", o.kv_heads, "key/value heads KV, dividing H (0: the preset's)")
      ->check(at_least(0));
  app.add_option("--width", o.width, "model width C (0: the preset's; head_dim = C / H)")
      ->check(at_least(0));
  app.add_option("--ffn", o.ffn, "MLP width F (0: the preset's)")->check(at_least(0));
  app.add_option("--vocab", o.vocab, "vocabulary V (0: the preset's)")->check(at_least(0));
  app.add_option("--context", o.context,
                 "tokens per training sequence T (0: max_position_embeddings, at most 2048)")
      ->check(at_least(0));
  app.add_option("--save-dtype", o.save_dtype,
                 "--save's weights: f32 | bf16 (default: bf16 "
                 "for bf16/fp8 runs, else f32)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--parity-dir", o.parity_dir,
                 "write a run to repeat with transformers (benchmarks/peers/"
                 "torch_llama_parity.py DIR): init/ and final/ folders, every batch, every loss; "
                 "constant --lr, no clipping, one rank")
      ->check(program::non_empty_path());
  app.add_flag("--memory-plan", o.memory_plan,
               "print what the run needs per device (and what would make it fit), then exit");
}

void add_training_flags(CLI::App& app, Options& o) {
  using program::at_least;
  using program::positive;
  program::add_schedule_flags(app, o);
  app.add_option("--precision", o.precision,
                 "fp32 | bf16 | fp8 (bf16 with the Linears' GEMMs in FP8: Ada, Hopper)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp8"}))
      ->capture_default_str();
  app.add_option("--optimizer-state", o.optimizer_state, "AdamW's moments: f32 | bf16 | int8")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}))
      ->capture_default_str();
  app.add_flag("--zero1", o.zero1, "shard AdamW's state over the data-parallel ranks (ZeRO-1)");
  app.add_option("--tf32", o.tf32, "fp32 GEMMs on TF32 tensor cores")->capture_default_str();
  app.add_option("--device", o.device, "auto | cpu | cuda | cuda:N (default: the best one)");
  app.add_option("--seed", o.seed, "initialization, data order and sampling seed")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "steps between log lines")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_flag("--cuda-graph", o.cuda_graph,
               "insist on capturing the training step as a CUDA graph (the default whenever it "
               "can: one GPU, AdamW with f32 state, no --document-mask); an error says why not");
  app.add_flag("--no-cuda-graph", o.no_cuda_graph,
               "run every step eagerly (default: a CUDA graph after 2 eager steps when it can)")
      ->excludes("--cuda-graph");
  app.add_flag("--diagnostics", o.diagnostics, "step breakdown and verdict reports");
  app.add_flag("--synthetic", o.synthetic, "random tokens, timed steps: the benchmark mode");
  app.add_option("--bench-warmup", o.bench_warmup, "synthetic: untimed steps first")
      ->check(at_least(0))
      ->capture_default_str();
}

void add_data_flags(CLI::App& app, Options& o) {
  using program::at_least;
  using program::positive;
  app.add_option("--data", o.data,
                 "a token corpus, each sequence once per epoch: Megatron PREFIX/.idx/.bin, a "
                 "pack-text folder, llm.c shards or a glob (default: the bundled text)")
      ->check(program::non_empty_path());
  app.add_option("--val-split", o.val_split,
                 "validation split of the --data corpus by document: a fraction in (0, 1) or a "
                 "count of documents")
      ->check(CLI::PositiveNumber);
  app.add_option("--mix", o.mix,
                 "a weighted mixture of corpora instead of --data: "
                 "\"a.idx:0.7,b:0.3\"");
  app.add_option("--text", o.text,
                 "the text trained on without --data (packed with a "
                 "SentencePiece tokenizer of 1024 ids trained on it)")
      ->check(program::non_empty_path())
      ->capture_default_str();
  app.add_option("--data-cache", o.cache, "folder for the packed text, reused by later runs")
      ->check(program::non_empty_path())
      ->capture_default_str();
  app.add_option("--tokenizer", o.tokenizer,
                 "SentencePiece .model of the prompt and the sample (default: --data's recorded "
                 "one)")
      ->check(program::non_empty_path());
  app.add_flag("--document-mask", o.document_mask,
               "RoPE positions restart at each document and attention stops at its start");
  program::add_sampling_flags(app, o);
  o.run.add_to(app, "validation token corpus (default: the last 10 % of the bundled text)");
  app.get_option("--save")->description(
      "write the trained model here as a transformers Llama folder (config.json + "
      "model.safetensors); checked before training");
}

// The checks before any work: modes, the data flags, and no output on an input.
int check_and_run(const CLI::App& app, Options& o) {
  if (o.synthetic || o.memory_plan)
    program::RunFlags::refuse_in(app, o.synthetic ? "a --synthetic bench" : "--memory-plan",
                                 "it trains no weights worth keeping");
  STOKER_CHECK_HINT(o.mix.empty() || o.data.empty(), "give --data or --mix",
                    "--mix and --data both name the training data");
  STOKER_CHECK_HINT(o.val_split == 0 || (o.run.val.empty() && !o.data.empty()),
                    "split a --data corpus, or give --val",
                    "--val-split needs a --data corpus and no --val");
  STOKER_CHECK_HINT(o.run.on_corrupt != "skip", "leave --on-corrupt out",
                    "--on-corrupt skip: token corpora have no skip policy; an id outside the "
                    "vocabulary stops the run naming its position");
  auto guarded = [](const std::string& flag, const std::string& arg) {
    if (arg.empty()) return program::RunFlags::Input{flag, arg};
    const TokenSource s = program::resolve_token_source(flag, arg);
    return program::RunFlags::Input{flag, s.path, false, /*exists=*/!s.glob};
  };
  std::vector<program::RunFlags::Input> inputs{guarded("--data", o.data),
                                               guarded("--val", o.run.val)};
  if (o.document_mask)
    for (const std::string& arg : {o.data, o.run.val})
      STOKER_CHECK_HINT(arg.empty() || !program::resolve_token_source("--data", arg).raw,
                        "pack the text with `stoker pack-text` (documents), or leave "
                        "--document-mask out",
                        "--document-mask: ", arg,
                        " is a raw file of token ids: it has no document boundaries to mask");
  // A graph replays its captured step on the batches it holds: the positions handed to the
  // model as each batch is fetched would all be the last batch's.
  STOKER_CHECK_HINT(!(o.cuda_graph && o.document_mask), "leave --cuda-graph out",
                    "--cuda-graph with --document-mask: the captured step cannot take each "
                    "batch's document positions");
  if (!o.mix.empty())
    for (const auto& [source, weight] : program::parse_mix(o.mix))
      inputs.push_back(guarded("--mix", source));
  if (!o.tokenizer.empty()) inputs.push_back({"--tokenizer", o.tokenizer});
  if (!o.init_from.empty()) inputs.push_back({"--init-from", o.init_from, /*database=*/true});
  if (text_run(o)) {
    inputs.push_back({"--text", o.text, false, /*exists=*/false});
    inputs.push_back({"--data-cache",
                      program::text_corpus_folder(o.text, o.cache, program::kTextVocab),
                      /*database=*/true, /*exists=*/false});
  }
  o.run.save_folder = true;
  o.run.check(app, text_run(o) || !o.run.val.empty() || o.val_split > 0, dist::read_env().rank == 0,
              inputs);
  if (!o.parity_dir.empty()) {
    program::RunFlags::refuse_in(app, "a --parity-dir run",
                                 "it writes its own files for the comparison with transformers");
    core::PathGuard guard;  // its folders are written: none may touch an input
    for (const program::RunFlags::Input& in : inputs) guard.input(in.flag, in.path);
    guard.output("--parity-dir", o.parity_dir, core::PathGuard::Kind::folder);
  }
  STOKER_CHECK_HINT(o.sample == 0 || !o.prompt.empty(), "give --prompt TEXT, or --sample 0",
                    "--prompt is empty: --sample ", o.sample, " needs a text to continue");
  return run(o);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.run.eval_subset = 64;
  CLI::App app{
      "stoker_llm: train a Llama-3-architecture decoder (the bundled text, token corpora, a "
      "transformers folder to continue from, or random tokens for benchmarking)"};
  add_model_flags(app, o);
  add_training_flags(app, o);
  add_data_flags(app, o);
  program::FlagNames flag_names{{"enable clip_grad_norm", "enable gradient clipping (--clip)"}};
  for (auto& n : program::trainer_flag_names()) flag_names.push_back(std::move(n));
  return program::run("stoker_llm", app, argc, argv, flag_names,
                      [&] { return check_and_run(app, o); });
}
