// The ablations of `stoker doctor` on its bundled model, which separate the causes of a slow
// step:
//
//   real vs synthetic data   the model on the Loader over an LMDB (--data, or a synthetic set
//                            packed for the occasion), then the same Loader's first batch
//                            replayed (diag::ReplaySource wraps the Loader)
//   batch-size sweep         the model alone (a batch held on the device) at several sizes
//   CUDA graph               the model alone at --batch with the step captured and replayed as
//                            a CUDA graph (GPU only), against the sweep's eager run at that size
//   1 vs N GPUs              the model alone under `stoker launch` with 1 and N ranks
//                            (worker.cpp)
#include <cstdio>

#include "diag/replay_source.h"
#include "parts.h"
#include "stoker/core/error.h"
#include "stoker/data/loader.h"
#include "stoker/data/pack.h"

namespace stoker::cli::doctor {

std::vector<Measurement> run_bundled_ablations(const DoctorOptions& o, const Setup& s, int ranks,
                                               const fs::path& tmp, diag::HtmlReport* html) {
  std::vector<Measurement> ms;
  auto add = [&](Measurement m) {
    ms.push_back(std::move(m));
    print_measurement(ms.back());
  };
  std::printf(
      "\n== ablations: bundled %s (width %lld) on %s, %s, images %dx%d, batch %lld, "
      "%lld + %lld steps each ==\n",
      o.model.c_str(), static_cast<long long>(s.width), s.device.str().c_str(), o.precision.c_str(),
      o.size, o.size, static_cast<long long>(o.batch), static_cast<long long>(o.warmup),
      static_cast<long long>(o.steps));
  // Real data through the Loader, then the same Loader's first batch replayed.
  fs::path db = o.data;
  if (db.empty()) {
    db = tmp / "synth";
    std::printf("  packing %lld synthetic %dx%d JPEGs into %s (use --data for your own)\n",
                static_cast<long long>(o.synth_images), o.synth_image_size, o.synth_image_size,
                db.c_str());
    std::fflush(stdout);
    data::pack_synth(
        {.samples = o.synth_images, .classes = kClasses, .size = o.synth_image_size, .seed = 1}, db,
        {.progress = false});
  }
  data::LmdbImageDataset ds(db);
  data::LoaderOptions lo{
      .batch_size = o.batch,
      .threads = o.threads,
      .prefetch = o.prefetch,
      .transform = {.output_size = o.size},
      .seed = 1,
      .device = s.device,
      .dtype = amp::compute_dtype(s.precision),
      .on_corrupt = o.on_corrupt == "skip" ? data::CorruptPolicy::skip : data::CorruptPolicy::fail};
  {
    data::Loader loader(ds, lo);
    diag::DiagnosticsOptions d;
    d.trace_path = o.trace;
    d.baseline_save = o.save_baseline;
    d.baseline_compare = o.compare_baseline;
    const diag::Report real = train(o, s, loader, d, nullptr, nullptr, html);
    std::fputs(real.text().c_str(), stdout);
    add(to_measurement("real data", "real", o.batch, real));
    if (lo.on_corrupt == data::CorruptPolicy::skip)
      std::printf("  --on-corrupt skip: %lld bad samples of %s skipped\n",
                  static_cast<long long>(loader.counters().skipped), db.c_str());
    diag::ReplaySource replay(loader);
    add(to_measurement("synthetic data", "synthetic", o.batch, train(o, s, replay, {})));
  }
  // The model alone at several batch sizes.
  for (int64_t b : sweep_sizes(o)) {
    const std::string name = "batch " + std::to_string(b);
    try {
      FixedBatches src(random_batch(o, s, b), o.warmup + o.steps + 1);
      add(to_measurement(name, "sweep", b, train(o, s, src, {})));
    } catch (const Error& e) {  // e.g. out of memory at the largest size
      add(failed_measurement(name, "sweep", b, 1, e.message()));
    }
  }
  // The same step as a CUDA graph.
  if (s.device.is_cuda()) {
    try {
      FixedBatches src(random_batch(o, s, o.batch), o.warmup + o.steps + 1);
      add(to_measurement("CUDA graph", "graph", o.batch,
                         train(o, s, src, {}, nullptr, nullptr, nullptr, /*cuda_graph=*/true)));
    } catch (const Error& e) {
      add(failed_measurement("CUDA graph", "graph", o.batch, 1, e.message()));
    }
  } else {
    std::printf("  (CUDA graph: needs a GPU, skipped)\n");
  }
  // 1 vs N ranks.
  if (ranks > 1) {
    for (int n : {1, ranks}) add(run_ranks(o, s, n, tmp));
  } else {
    std::printf("  (1 vs N GPUs: one GPU visible, skipped; --gpus N forces it)\n");
  }
  return ms;
}

}  // namespace stoker::cli::doctor
