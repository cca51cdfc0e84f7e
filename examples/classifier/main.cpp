// stoker_classifier: trains a ResNet-style CNN on an LMDB JPEG dataset with the stoker Loader
// and Trainer, and reports validation accuracy each epoch; or, with --synthetic,
// measures training throughput the way benchmarks/peers/torch_e2e.py does.
//
//   stoker_classifier                              small CNN on the synthetic shapes (packed
//                                                  into a cache folder on first run), GPU if any
//   stoker_classifier --data TRAIN --val VAL --arch resnet50 --precision bf16 --layout nhwc
//   stoker launch --nproc-per-node 8 stoker_classifier --data ... (or torchrun): data parallel
//   stoker_classifier --arch resnet50 --precision bf16 --layout nhwc --batch 256 --image-size 224
//                     --synthetic [--data DB --threads 16]     random batch [+ fed by the Loader]
//
// Training: the Trainer's log lines, and at each epoch's end "epoch E: train loss, val loss,
// val accuracy, img/s" and the loader line (delivered img/s, wait share, worker cost per image,
// the autotuner's state); at the end the diagnostics report over the whole run (step breakdown
// and verdict; --diagnostics) and the peak memory. --min-accuracy A exits with status 3 when the
// final validation accuracy is below A (the demo's check; it needs a validation set).
// Bad data: --on-corrupt fail (default) stops at the first bad sample with an error naming its
// key; --on-corrupt skip replaces bad samples and reports how many were skipped.
// Errors: every flag is checked before any work (ranges, the --classes and --val databases
// against --data, the --device, the --save path); an error prints "stoker_classifier: error:
// ..." (and a hint) and exits 1; CLI11's own exit codes for malformed arguments.
// Bench (--synthetic): `--warmup` untimed steps, then `--steps` steps between two device syncs
// on one random batch on the device ("synthetic"); with --data also `--bench-epochs` epochs fed
// by the Loader, every step after the first `--warmup` timed (the peer's DataLoader figure):
//   "<arch> <precision> <layout> B=<batch>: synthetic N img/s, peak X GiB ..."
//   "<arch> <precision> <layout> B=<batch>: fed by the stoker loader (T threads) N img/s
//    (P % of synthetic), peak X GiB ..."
// Optimizer: --optimizer sgd (default): SGD with momentum 0.9 (the peer's); --optimizer lars:
// LARS as in MLPerf's ResNet-50 runs (momentum 0.9, --lars-eta 0.001, weight decay 5e-5; biases
// and batch-norm parameters excluded from the trust ratio and the decay), for large batches.
// Training: weight decay, a linear warm-up, then --lr-schedule cosine (default) or poly
// (MLPerf's: (1 - t)^2 down to 1e-4), and optionally --label-smoothing (MLPerf uses 0.1).
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "classifier_program.h"
#include "common/program.h"
#include "resnet.h"
#include "stoker/core/output_path.h"
#include "stoker/stoker.h"

namespace stoker::classifier_program {

Layout parse_layout(const std::string& s) {
  if (s == "nchw") return Layout::nchw;
  if (s == "nhwc") return Layout::nhwc;
  STOKER_THROW("--layout '", s, "': use nchw or nhwc");
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::unique_ptr<nn::Sequential> build_model(const Args& a, int64_t classes, Layout layout,
                                            Device device) {
  nn::manual_seed(a.seed);
  auto m = classifier::make_model(a.arch, {.num_classes = classes,
                                           .layout = layout,
                                           .zero_init_residual = a.arch != "small",
                                           .fuse_bn_relu = a.fuse_bn_relu,
                                           .fuse_block_tail = a.fuse_bn_relu,
                                           .small_width = a.width});
  m->to(device);
  return m;
}

// The optimizer of --optimizer, with momentum 0.9: SGD (the peer's), or LARS with MLPerf's
// settings (--lars-eta; biases and batch-norm gamma/beta excluded: optim::one_dimensional).
std::unique_ptr<optim::Optimizer> make_optimizer(const Args& a, nn::Module& model, float lr,
                                                 float weight_decay) {
  if (a.optimizer == "lars")
    return std::make_unique<stoker::optim::LARS>(
        model.named_parameters(),
        stoker::optim::LarsOptions{
            .lr = lr, .momentum = 0.9f, .weight_decay = weight_decay, .eta = a.lars_eta});
  return std::make_unique<stoker::optim::SGD>(
      model.named_parameters(),
      stoker::optim::SgdOptions{.lr = lr, .momentum = 0.9f, .weight_decay = weight_decay});
}

bool use_cuda_graph(const Args& a, Device device, int world) {
  return a.cuda_graph || (!a.no_cuda_graph && device.is_cuda() && world == 1);
}

data::LoaderOptions loader_options(const Args& a, Device device, Layout layout, DType dtype,
                                   int rank, int world, bool train_split) {
  data::LoaderOptions o;
  o.batch_size = a.batch;
  o.threads = a.threads;
  o.stall_timeout_s = a.stall_timeout;
  o.transform.train = train_split;
  o.transform.output_size = a.image_size;
  o.transform.seed = a.seed;
  o.transform.scale_min = a.crop_scale;
  o.transform.eval_resize = a.eval_resize;
  o.shuffle = train_split;
  o.seed = a.seed;
  o.rank = rank;
  o.world_size = world;
  o.drop_last = train_split;
  o.device = device;
  o.dtype = dtype;
  o.layout = layout;
  o.on_corrupt = a.run.corrupt_policy();
  return o;
}

// --classes against the dataset: fewer outputs than its classes leave labels out of range.
int64_t checked_classes(const Args& a, const data::LmdbImageDataset& ds, int64_t fallback) {
  if (a.classes == 0) return fallback;
  STOKER_CHECK_HINT(
      a.classes >= ds.num_classes(),
      fmt::format("leave --classes out (then the dataset's {} are used) or give at least {}",
                  ds.num_classes(), ds.num_classes()),
      "--classes ", a.classes, " is below the ", ds.num_classes(), " classes of ",
      ds.path().string());
  return a.classes;
}

namespace {

// Where the synthetic shapes are packed: --cache, $STOKER_CACHE_DIR, $XDG_CACHE_HOME/stoker,
// ~/.cache/stoker, else the system's temp folder.
fs::path cache_root(const Args& a) {
  if (!a.cache.empty()) return a.cache;
  if (const char* d = std::getenv("STOKER_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "stoker";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "stoker";
  return fs::temp_directory_path() / "stoker-cache";
}

// The synthetic shapes' training and validation databases under the cache folder.
std::pair<fs::path, fs::path> synth_dirs(const Args& a) {
  const fs::path dir = cache_root(a) / ("synth-" + std::to_string(a.synth_classes) + "c-" +
                                        std::to_string(a.image_size) + "px");
  return {dir / ("train-" + std::to_string(a.synth_train)),
          dir / ("val-" + std::to_string(a.synth_val))};
}

// Packs the synthetic shapes into `out` unless a database is already there. Concurrent ranks
// may race: the pack is atomic (temp folder + rename), so the loser finds the winner's.
fs::path ensure_synth(const data::SynthOptions& s, const fs::path& out, bool print) {
  std::error_code ec;
  if (fs::exists(out / "data.mdb", ec)) return out;
  stoker::core::check_output_dir(out.parent_path(), "--cache");
  if (print)
    std::printf("packing %lld synthetic %dx%d images (%d classes) into %s\n",
                static_cast<long long>(s.samples), s.size, s.size, s.classes, out.c_str());
  try {
    data::pack_synth(s, out, {.progress = false});
  } catch (const stoker::Error&) {
    if (!fs::exists(out / "data.mdb", ec)) throw;
  }
  return out;
}

// What the startup line says of the optimizer: "SGD lr 0.1 (momentum 0.9, weight decay 5e-05"
// and the like (the caller closes the parenthesis after the schedule).
std::string describe_optimizer(const Args& a, const stoker::optim::Optimizer& opt, float lr,
                               float weight_decay) {
  const std::string common =
      fmt::format(" lr {:g} (momentum 0.9, weight decay {:g}", lr, weight_decay);
  if (const auto* lars = dynamic_cast<const stoker::optim::LARS*>(&opt))
    return fmt::format("LARS{}, eta {:g}, {} of {} parameters adapted", common, a.lars_eta,
                       lars->adapted_count(), lars->trainable_count());
  return "SGD" + common;
}

// The validation set's classes are the training set's, in the same order (a label is an index).
void check_same_classes(const data::LmdbImageDataset& train, const data::LmdbImageDataset& val) {
  const auto& t = train.class_names();
  const auto& v = val.class_names();
  const std::string both = " (labels are class indices, so both must list the same classes)";
  STOKER_CHECK_HINT(t.size() == v.size(), "pack --val from the same class folders as --data",
                    "--val ", val.path().string(), " has ", v.size(), " classes but --data ",
                    train.path().string(), " has ", t.size(), both);
  for (size_t c = 0; c < t.size(); ++c)
    STOKER_CHECK_HINT(t[c] == v[c], "pack --val from the same class folders as --data", "class ", c,
                      " is '", t[c], "' in --data ", train.path().string(), " but '", v[c],
                      "' in --val ", val.path().string(), both);
}

// The cross-flag checks (each flag's own range is checked by CLI11), before any work.
void check_args(const Args& a) {
  STOKER_CHECK_HINT(a.eval_resize == 0 || a.eval_resize >= a.image_size,
                    "use --eval-resize >= --image-size (e.g. 256 and 224)", "--eval-resize ",
                    a.eval_resize, " is smaller than the --image-size ", a.image_size,
                    " crop taken from it");
  STOKER_CHECK(a.run.val.empty() || !a.data.empty(),
               "--val needs --data (the synthetic set brings its own split)");
  STOKER_CHECK_HINT(a.min_accuracy == 0 || a.synthetic || a.data.empty() || !a.run.val.empty(),
                    "give --val VAL, or leave --min-accuracy out", "--min-accuracy ",
                    a.min_accuracy, " needs a validation set: there is no --val");
}

// Flags that belong to an optimizer other than the one chosen are errors, not ignored.
void check_optimizer_flags(const CLI::App& app, const Args& a) {
  STOKER_CHECK_HINT(app.count("--lars-eta") == 0 || a.optimizer == "lars",
                    "add --optimizer lars, or leave --lars-eta out",
                    "--lars-eta applies to --optimizer lars, not --optimizer ", a.optimizer);
}

int run_train(const Args& a_in, Device device, dist::DistContext* ctx) {
  Args a = a_in;
  const int rank = ctx ? ctx->comm->rank() : 0;
  const int world = ctx ? ctx->comm->world_size() : 1;
  const bool main_rank = rank == 0;
  const Precision p = parse_precision(a.precision);
  const Layout layout = parse_layout(a.layout);
  const DType dtype = stoker::amp::compute_dtype(p);
  fs::path train_db = a.data, val_db = a.run.val;
  const bool synth = a.data.empty();
  if (synth) {
    const auto [train_dir, val_dir] = synth_dirs(a);
    data::SynthOptions so{
        .samples = a.synth_train, .classes = a.synth_classes, .size = a.image_size, .seed = 1};
    train_db = ensure_synth(so, train_dir, main_rank);
    so.samples = a.synth_val;
    so.seed = 2;  // other images than the training ones
    val_db = ensure_synth(so, val_dir, main_rank);
    if (a.crop_scale < 0) a.crop_scale = 0.35;  // keep most of each shape in the crop
    if (a.eval_resize <= 0) a.eval_resize = a.image_size;
  } else {
    if (a.crop_scale < 0) a.crop_scale = 0.08;
    if (a.eval_resize <= 0) a.eval_resize = a.image_size * 8 / 7;
  }
  data::LmdbImageDataset train_ds(train_db);
  std::unique_ptr<data::LmdbImageDataset> val_ds;
  if (!val_db.empty()) {
    val_ds = std::make_unique<data::LmdbImageDataset>(val_db);
    check_same_classes(train_ds, *val_ds);
  }
  const int64_t classes = checked_classes(a, train_ds, train_ds.num_classes());

  data::Loader train_loader(train_ds, loader_options(a, device, layout, dtype, rank, world, true));
  std::unique_ptr<data::Loader> val_loader;
  // Every rank evaluates the whole validation set (same numbers everywhere, no reduction).
  if (val_ds)
    val_loader = std::make_unique<data::Loader>(
        *val_ds, loader_options(a, device, layout, dtype, 0, 1, false));

  auto model = build_model(a, classes, layout, device);
  const float global_batch = static_cast<float>(a.batch * a.accum * world);
  const float lr = a.lr > 0                ? a.lr
                   : a.optimizer == "lars" ? 10.5f * global_batch / 3264.0f
                                           : 0.1f * global_batch / 256.0f;
  const auto opt = make_optimizer(a, *model, lr, a.weight_decay);
  nn::CrossEntropyLoss loss({.label_smoothing = a.label_smoothing});
  std::unique_ptr<dist::ReplicatedGradSync> grad_sync;
  if (ctx && world > 1) grad_sync = std::make_unique<dist::ReplicatedGradSync>(*ctx->comm, *model);
  const int64_t steps_per_epoch = train_loader.batches_per_epoch() / a.accum;
  STOKER_CHECK(steps_per_epoch > 0, train_db.string(), ": ", train_ds.size(),
               " samples make no full step of --batch ", a.batch, " x --accum ", a.accum, " x ",
               world, " ranks");
  train::TrainerOptions to;
  to.precision = p;
  to.grad_accum_steps = a.accum;
  // Warm-up epochs leave at least one epoch of decay.
  const int64_t warmup_epochs = std::clamp<int64_t>(a.warmup_epochs, 0, a.epochs - 1);
  // poly: MLPerf's end rate 1e-4 and power 2 (the end rate no higher than the peak).
  const float poly_end = std::min(1e-4f, lr);
  to.schedule = a.lr_schedule == "poly"
                    ? stoker::optim::polynomial_with_warmup(lr, warmup_epochs * steps_per_epoch,
                                                            a.epochs * steps_per_epoch, poly_end)
                    : stoker::optim::cosine_with_warmup(lr, warmup_epochs * steps_per_epoch,
                                                        a.epochs * steps_per_epoch);
  to.log_interval = a.log_interval;
  to.log_grad_norm = false;
  to.grad_sync = grad_sync.get();
  to.diagnostics.enabled = a.diagnostics;
  to.diagnostics.print = false;  // the final report is printed below, once
  to.activation_checkpoint_every = a.run.activation_checkpoint_every;
  to.cuda_graph = use_cuda_graph(a, device, world);
  a.run.apply(to);  // checkpoints, metrics, evaluation
  {
    // What defines the run, recorded in its checkpoints: a resume states each changed one and
    // refuses those that break the run (train/run_settings.h, docs/long_runs.md).
    using train::SettingChange;
    // Floats as a stream writes them (6 significant digits): a resumed run compares these
    // texts with the ones its checkpoint recorded.
    const auto v = [](const auto& x) {
      if constexpr (std::is_floating_point_v<std::decay_t<decltype(x)>>) {
        return fmt::format("{:g}", x);
      } else {
        return fmt::format("{}", x);
      }
    };
    to.run_settings = {{"--arch", a.arch, SettingChange::model_shape},
                       {"--classes", v(classes), SettingChange::model_shape},
                       {"--accum", v(a.accum), SettingChange::global_batch},
                       {"--optimizer", a.optimizer, SettingChange::refuse},
                       {"--lr", v(lr), SettingChange::note},
                       {"--lr-schedule", a.lr_schedule, SettingChange::note},
                       {"--warmup-epochs", v(a.warmup_epochs), SettingChange::note},
                       {"--epochs", v(a.epochs), SettingChange::note},
                       {"--weight-decay", v(a.weight_decay), SettingChange::note},
                       {"--label-smoothing", v(a.label_smoothing), SettingChange::note},
                       {"--image-size", v(a.image_size), SettingChange::note},
                       {"--precision", a.precision, SettingChange::note},
                       {"--layout", a.layout, SettingChange::note}};
    if (a.arch == "small")
      to.run_settings.push_back({"--width", v(a.width), SettingChange::model_shape});
  }
  // `stoker doctor -- stoker_classifier ...` steers the run through STOKER_DIAG*.
  train::Trainer trainer(*model, loss, *opt, train::apply_environment(to));
  const int64_t total_steps = a.epochs * steps_per_epoch;

  if (main_rank) {
    std::printf("%s: %s, %lld parameters, %s, %s, on %s x %d rank%s\n", a.arch.c_str(),
                model->describe().substr(0, 60).append("...").c_str(),
                static_cast<long long>(model->parameter_count()), a.precision.c_str(),
                std::string(layout_name(layout)).c_str(), device.str().c_str(), world,
                world > 1 ? "s" : "");
    std::printf(
        "data: %s (%lld images, %lld classes)%s; %dx%d crops, batch %lld x accum %d x %d "
        "rank%s = global batch %lld, %s; %s, %lld warm-up epoch%s)%s\n",
        train_db.c_str(), static_cast<long long>(train_ds.size()), static_cast<long long>(classes),
        val_ds ? (", val " + std::to_string(val_ds->size()) + " images").c_str() : ", no --val",
        a.image_size, a.image_size, static_cast<long long>(a.batch), a.accum, world,
        world > 1 ? "s" : "", static_cast<long long>(a.batch * a.accum * world),
        describe_optimizer(a, *opt, lr, a.weight_decay).c_str(),
        a.lr_schedule == "poly" ? fmt::format("poly (power 2, down to {:g})", poly_end).c_str()
                                : "cosine",
        static_cast<long long>(warmup_epochs), warmup_epochs == 1 ? "" : "s",
        a.label_smoothing > 0 ? fmt::format(", label smoothing {:g}", a.label_smoothing).c_str()
                              : "");
    std::printf("run: %lld steps (%lld epochs of %lld)%s%s\n", static_cast<long long>(total_steps),
                static_cast<long long>(a.epochs), static_cast<long long>(steps_per_epoch),
                a.run.checkpoint_dir.empty() ? ", no checkpoints (--checkpoint-dir)"
                                             : (", checkpoints in " + a.run.checkpoint_dir +
                                                " every " + a.run.checkpoint_interval)
                                                   .c_str(),
                a.run.metrics.empty() ? "" : (", metrics to " + a.run.metrics).c_str());
    std::fflush(stdout);
  }
  a.run.resume_run(trainer, main_rank);

  // Per epoch: the training loss and rate, then the validation numbers of the evaluation that
  // follows the epoch's last step (--eval-every 0), and the loader's line.
  struct EpochState {
    int64_t last_step = 0, steps = 0;
    double loss_sum = 0;
    Clock::time_point start = Clock::now();
    data::LoaderCounters c0;
    size_t peak = 0;
    std::string pending;  // the epoch line, waiting for its evaluation
    double acc = -1;
  } es;
  es.last_step = trainer.step();
  const int64_t bpe = train_loader.batches_per_epoch();
  const bool eval_at_epoch_end = val_loader && a.run.eval_every == 0;
  const auto print_epoch = [&](const std::string& val) {
    if (!main_rank) return;
    std::printf("%s, %s\n", es.pending.c_str(), val.c_str());
    es.pending.clear();
    std::fflush(stdout);
  };
  trainer.add_log_callback([&](const train::StepStats& st) {
    es.loss_sum += st.loss * static_cast<double>(st.step - es.last_step);
    es.steps += st.step - es.last_step;
    es.last_step = st.step;
    es.peak = std::max(es.peak, stoker::core::memory_stats(device).peak_bytes);
    // An epoch has ended when the loader has no full step left in it.
    if (train_loader.batch_index() + a.accum <= bpe) return;
    const double train_s = since(es.start);
    const data::LoaderCounters c = train_loader.counters();
    const double img_s = static_cast<double>(c.samples - es.c0.samples) / train_s;
    const double made = static_cast<double>(c.samples_decoded - es.c0.samples_decoded);
    const double cost = made > 0 ? (c.worker_s - es.c0.worker_s) / made : 0.0;
    es.pending =
        fmt::format("epoch {}/{}: train loss {}, {} img/s", st.epoch + 1, a.epochs,
                    fixed(es.loss_sum / static_cast<double>(std::max<int64_t>(1, es.steps)), 4),
                    static_cast<long long>(img_s * world));
    if (main_rank) {
      std::printf(
          "  loader: %.0f img/s delivered, waited %.1f %% of the epoch, %.3f ms/img of "
          "worker time (%.0f img/s on its %d threads); %s\n",
          img_s, 100.0 * (c.consumer_wait_s - es.c0.consumer_wait_s) / train_s, cost * 1e3,
          cost > 0 ? train_loader.threads() / cost : 0.0, train_loader.threads(),
          train_loader.summary().c_str());
    }
    if (!eval_at_epoch_end)
      print_epoch(val_loader
                      ? (es.acc >= 0 ? fmt::format("last val accuracy {} %", fixed(es.acc * 100, 2))
                                     : std::string("not evaluated yet"))
                      : std::string("no validation set"));
    es.loss_sum = 0;
    es.steps = 0;
    es.c0 = train_loader.counters();
    es.start = Clock::now();
  });
  trainer.add_eval_callback([&](const train::EvalRecord& r) {
    es.acc = r.accuracy;
    if (!es.pending.empty())
      print_epoch(fmt::format("val loss {}, val accuracy {} % ({} images, {} s)", fixed(r.loss, 4),
                              fixed(r.accuracy * 100, 2), r.samples, fixed(r.seconds, 1)));
  });
  const auto start = Clock::now();
  // Room for the weights at the end, checked before the first step (not after the whole run).
  if (main_rank && !a.run.save.empty())
    train::check_space_for_weights(*model, a.run.save, "--save");
  const train::FitResult fit = trainer.fit(train_loader, a.epochs, val_loader.get());
  // Stopped by a signal (--stop-signals): where it stands and how to continue; no --save.
  if (const int status = a.run.stopped(fit, "stoker_classifier", main_rank)) return status;
  const double acc = es.acc;
  const size_t peak = std::max(es.peak, stoker::core::memory_stats(device).peak_bytes);
  if (main_rank) {
    if (trainer.diagnostics()) std::printf("\n%s", fit.diagnosis.text().c_str());
    char final_val[64] = "no validation set";
    if (val_loader)
      std::snprintf(final_val, sizeof(final_val), "final val accuracy %.2f %%", acc * 100);
    const double wall = since(start);
    std::printf(
        "\npeak memory %s (%s); %lld steps in %.1f s (%.1f s of it evaluation, %.1f %%); "
        "%s\n",
        stoker::core::format_bytes(peak).c_str(), device.str().c_str(),
        static_cast<long long>(fit.steps), wall, fit.eval_seconds,
        wall > 0 ? 100.0 * fit.eval_seconds / wall : 0.0, final_val);
    if (!fit.log.empty() && wall > 0 && fit.eval_seconds > 0.1 * wall)  // steps ran here
      std::printf(
          "evaluation took %.0f %% of the wall time: evaluate less often (--eval-every "
          "N steps) or on fewer images (--eval-subset K)\n",
          100.0 * fit.eval_seconds / wall);
    if (a.run.on_corrupt == "skip") {
      const int64_t train_skipped = train_loader.counters().skipped;
      const int64_t val_skipped = val_loader ? val_loader->counters().skipped : 0;
      std::printf(
          "--on-corrupt skip: %lld bad samples skipped (%lld in training, %lld in "
          "validation; a bad sample counts once per epoch)\n",
          static_cast<long long>(train_skipped + val_skipped),
          static_cast<long long>(train_skipped), static_cast<long long>(val_skipped));
    }
    if (!a.run.save.empty()) {
      // A failed write (disk full) puts the weights in a fallback file named in the error.
      train::save_weights_with_fallback(*model, a.run.save, "--save", {a.run.checkpoint_dir});
      std::printf("weights written to %s (torchvision names)\n", a.run.save.c_str());
    }
    if (a.min_accuracy > 0 && acc < a.min_accuracy) {
      std::printf("FAILED: val accuracy %.2f %% is below --min-accuracy %.2f %%\n", acc * 100,
                  a.min_accuracy * 100);
      return 3;
    }
  }
  return 0;
}

}  // namespace

}  // namespace stoker::classifier_program

int main(int argc, char** argv) {
  using stoker::program::at_least;
  using stoker::program::in_range;
  using stoker::program::positive;
  using namespace stoker::classifier_program;  // Args, the checks and the two runs
  namespace dist = stoker::dist;
  using stoker::Device;
  Args a;
  CLI::App app{"stoker_classifier: ResNet-18/50 or a small CNN trained on an LMDB JPEG dataset"};
  app.add_option("--arch", a.arch, "small, resnet18 or resnet50")
      ->check(CLI::IsMember({"small", "resnet18", "resnet50"}))
      ->capture_default_str();
  app.add_option("--data", a.data,
                 "training LMDB from `stoker pack` (default: the synthetic shapes, packed into a "
                 "cache folder on first run)")
      ->check(stoker::program::non_empty_path());
  app.add_option("--image-size", a.image_size, "crop side (resnet18/50: 224 by default)")
      ->check(in_range(8, 4096))
      ->capture_default_str();
  app.add_option("--epochs", a.epochs, "training epochs")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--batch", a.batch, "samples per micro-batch and rank")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--accum", a.accum, "micro-batches per optimizer step")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--optimizer", a.optimizer,
                 "sgd (momentum 0.9) or lars (MLPerf's large-batch recipe: layer-wise trust "
                 "ratio; biases and batch-norm parameters plain SGD without decay)")
      ->check(CLI::IsMember({"sgd", "lars"}))
      ->capture_default_str();
  app.add_option("--lr", a.lr,
                 "peak learning rate (default: sgd 0.1 x global batch / 256, lars 10.5 x global "
                 "batch / 3264)")
      ->check(positive());
  app.add_option("--weight-decay", a.weight_decay,
                 "weight decay (lars: of the adapted weights only; MLPerf's 5e-5)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--lars-eta", a.lars_eta, "lars: trust coefficient eta (MLPerf's 0.001)")
      ->check(positive())
      ->capture_default_str();
  app.add_option("--warmup-epochs", a.warmup_epochs,
                 "linear lr warm-up (at most --epochs - 1 are used)")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--lr-schedule", a.lr_schedule,
                 "decay after the warm-up: cosine (to 0) or poly (MLPerf's: (1 - t)^2 down to "
                 "1e-4)")
      ->check(CLI::IsMember({"cosine", "poly"}))
      ->capture_default_str();
  app.add_option("--label-smoothing", a.label_smoothing,
                 "cross-entropy label smoothing, 0..1 (MLPerf's 0.1; the val loss includes it)")
      ->check(in_range(0, 1))
      ->capture_default_str();
  app.add_option("--precision", a.precision,
                 "fp32, bf16, fp16 or fp8 (bf16 with the Linear layers in FP8)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
      ->capture_default_str();
  app.add_option("--layout", a.layout, "nchw or nhwc (channels-last)")
      ->check(CLI::IsMember({"nchw", "nhwc"}))
      ->capture_default_str();
  app.add_option("--threads", a.threads, "loader decode threads (0 = autotuned)")
      ->check(in_range(0, 1024))
      ->capture_default_str();
  app.add_option("--stall-timeout", a.stall_timeout,
                 "seconds the loader may go without a batch before it stops the run (slow storage)")
      ->check(positive())
      ->capture_default_str();
  app.add_flag("--diagnostics", a.diagnostics, "time step phases; print breakdown and verdict");
  app.add_flag("--fuse-bn-relu,!--no-fuse-bn-relu", a.fuse_bn_relu,
               "fuse each batch norm with the ReLU after it, and each residual block's tail "
               "relu(bn + shortcut), into one batch-norm op (default: on; the same results, "
               "fewer passes over the activations; --no-fuse-bn-relu runs torchvision's "
               "separate modules)");
  app.add_flag("--cuda-graph", a.cuda_graph,
               "insist on capturing the training step as a CUDA graph (the default whenever it "
               "can: one GPU, one process); an error says why it cannot");
  app.add_flag("--no-cuda-graph", a.no_cuda_graph,
               "run every step eagerly (default: a CUDA graph after 2 eager steps when it can)")
      ->excludes("--cuda-graph");
  app.add_flag("--conv-autotune", a.conv_autotune,
               "time cuDNN's convolution algorithms on each shape's first call and keep the "
               "fastest (PyTorch's cudnn.benchmark; also STOKER_CONV_AUTOTUNE=1)");
  app.add_option("--device", a.device, "auto, cpu or cuda[:N]")->capture_default_str();
  app.add_flag("--synthetic", a.synthetic,
               "benchmark: steps on a random batch held on the device, then (with --data) "
               "steps fed by the loader");
  app.add_option("--steps", a.steps, "bench: timed steps on the random batch")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--warmup", a.warmup, "bench: untimed steps")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--bench-epochs", a.bench_epochs, "bench: epochs fed by the loader")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--seed", a.seed, "initialization, order and augmentation seed")
      ->check(at_least(0))  // CLI11 would wrap a negative seed around
      ->capture_default_str();
  app.add_option("--classes", a.classes,
                 "output classes, at least the dataset's (default: the dataset's; bench 1000)")
      ->check(at_least(1));
  app.add_option("--width", a.width, "small CNN: channels of its first stage")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--crop-scale", a.crop_scale,
                 "RandomResizedCrop's smallest area share (default 0.08; synthetic 0.35)")
      ->check(positive(1));
  app.add_option("--eval-resize", a.eval_resize,
                 "validation: resize the shorter side to this (>= --image-size), then "
                 "centre-crop")
      ->check(at_least(8));
  app.add_option("--synth-train", a.synth_train, "synthetic set: training images")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--synth-val", a.synth_val, "synthetic set: validation images")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--synth-classes", a.synth_classes, "synthetic set: classes (2..8)")
      ->check(in_range(2, 8))
      ->capture_default_str();
  app.add_option("--cache", a.cache,
                 "folder for the synthetic set (default $XDG_CACHE_HOME/stoker)")
      ->check(stoker::program::non_empty_path());
  app.add_option("--log-interval", a.log_interval, "steps between log lines")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--min-accuracy", a.min_accuracy,
                 "exit with status 3 if the final validation accuracy (0..1) is below this")
      ->check(in_range(0, 1))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // scripts/demo.sh sets 0.8
  a.run.add_to(app, "validation LMDB (with --data; the same classes)");
  // The library's messages in this program's words (its flags, not the C++ options).
  stoker::program::FlagNames flag_names{{", enable clip_grad_norm", ""},
                                        {"LoaderOptions::threads (`--threads`)", "--threads"},
                                        {"LoaderOptions::threads", "--threads"},
                                        {"LoaderOptions::stall_timeout_s", "--stall-timeout"}};
  for (auto& n : stoker::program::trainer_flag_names()) flag_names.push_back(std::move(n));
  return stoker::program::run("stoker_classifier", app, argc, argv, flag_names, [&] {
    // The ResNets are ImageNet models: 224x224 crops unless told otherwise.
    if (app.count("--image-size") == 0 && a.arch != "small") a.image_size = 224;
    check_args(a);
    check_optimizer_flags(app, a);
    if (a.conv_autotune) stoker::ops::set_conv_autotune(true);
    if (a.synthetic)
      stoker::program::RunFlags::refuse_in(
          app, "a --synthetic bench",
          "it times steps on random batches and trains no weights worth keeping");
    const dist::DistEnv env = dist::read_env();
    // The synthetic shapes bring their own validation split.
    // The inputs, which no output may touch: the databases (the synthetic ones when packed).
    std::vector<stoker::program::RunFlags::Input> inputs{{"--data", a.data, true},
                                                         {"--val", a.run.val, true}};
    if (a.data.empty() && !a.synthetic) {
      const auto [train_dir, val_dir] = synth_dirs(a);
      inputs.push_back({"--cache", train_dir, true, /*exists=*/false});
      inputs.push_back({"--cache", val_dir, true, false, /*trained_on=*/false});
    }
    a.run.check(app, a.data.empty() || !a.run.val.empty(), env.rank == 0, inputs);
    STOKER_CHECK(!a.cuda_graph || env.world_size == 1, "--cuda-graph: this job has ",
                 env.world_size,
                 " ranks; the graph step is for one process (drop --cuda-graph under a "
                 "launcher)");
    if (env.world_size > 1) {  // under a launcher: cuda:LOCAL_RANK (or the CPU over TCP)
      dist::DistContext ctx = dist::init_from_env();
      return a.synthetic ? run_bench(a, ctx.device, &ctx) : run_train(a, ctx.device, &ctx);
    }
    const Device device = stoker::program::device(a.device);
    STOKER_CHECK(!a.cuda_graph || device.is_cuda(), "--cuda-graph: the run is on ", device.str(),
                 "; CUDA graphs need a GPU (drop --cuda-graph for a CPU run)");
    return a.synthetic ? run_bench(a, device) : run_train(a, device, nullptr);
  });
}
