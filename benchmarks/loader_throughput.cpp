// End-to-end loader throughput: LMDB → crop-before-decode → RandomResizedCrop(224) + flip →
// pinned batches of 256 → the GPU (when there is one; else the CPU) → normalized f32 NCHW, for a
// list of thread counts (and `auto`), against the crop-decode ceiling of the same data.
//
//   stoker_loader_throughput --db PATH              a database written by `stoker pack`
//   stoker_loader_throughput --folder DIR           packs DIR (class sub-folders of JPEGs) first
//   stoker_loader_throughput --synth N              packs N synthetic JPEGs first (temp folder)
//   common: --threads 1,4,16,auto --epochs 2 --warmup 1 --batch 256 --size 224
//           --device auto|cpu|cuda --dtype f32|bf16 --json FILE
// With no dataset flag it packs --synth 2560 (what scripts/gpu-check.sh runs); the
// --benchmark_* flags that script passes to every benchmark are accepted (--benchmark_out names
// the JSON file).
//
// What it prints (every column is defined in docs/benchmarks.md, "Loader throughput"):
//  1. context: CPU model and hardware threads, GPU, libjpeg-turbo and library versions, the
//     dataset (samples, mean JPEG bytes, mean image size);
//  2. the ceiling, per thread count: the RandomResizedCrop region of every image decoded by N
//     plain threads, no loader (`crop decode`: header + crop/skip/DCT-scaled decode, no resize;
//     `+ resize`: the whole per-sample call the loader makes, augment_into);
//  3. per loader run: img/s over the timed epochs (delivered batches / wall time, the device
//     synchronized at the end), % of the `+ resize` ceiling at the same thread count, the
//     consumer's wait share, the per-stage cost per image and per batch, and the autotuner's
//     choice.
// Correctness: the first batch of each run is checked against augment_into + normalization done
// by hand for its first sample; a mismatch exits with status 1.
#include <jconfig.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stoker/stoker.h"

namespace {

namespace fs = std::filesystem;
namespace data = stoker::data;
using stoker::Device;
using stoker::DType;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string libjpeg_turbo_version() {
  const int v = LIBJPEG_TURBO_VERSION_NUMBER;
  return std::to_string(v / 1000000) + "." + std::to_string(v / 1000 % 1000) + "." +
         std::to_string(v % 1000);
}

struct DatasetStats {
  int64_t samples = 0;
  double mean_bytes = 0, mean_width = 0, mean_height = 0;
  double scan_s = 0;  // one pass reading every value (warms the page cache)
};

DatasetStats scan(const data::LmdbImageDataset& ds) {
  DatasetStats st;
  st.samples = ds.size();
  const auto t0 = Clock::now();
  auto reader = ds.reader();
  data::JpegDecoder dec;
  double bytes = 0, w = 0, h = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    const data::SampleView s = reader.read(i);
    bytes += static_cast<double>(s.payload.size());
    const data::JpegInfo info = dec.read_header(s.payload, data::sample_key(i));
    w += info.width;
    h += info.height;
  }
  const double n = static_cast<double>(std::max<int64_t>(1, ds.size()));
  st.mean_bytes = bytes / n;
  st.mean_width = w / n;
  st.mean_height = h / n;
  st.scan_s = since(t0);
  return st;
}

// The ceiling: `threads` plain threads, one decoder and reader each, take the images of epoch 0
// in the loader's order and decode their RandomResizedCrop region (resize = false: decode only;
// true: the loader's whole per-sample call). Returns images per second.
double ceiling(const data::LmdbImageDataset& ds, const data::Sampler& order, int threads,
               const data::TransformOptions& transform, bool resize) {
  const auto indices = order.indices();
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  const int n = transform.output_size;
  auto work = [&] {
    data::JpegDecoder dec;
    auto reader = ds.reader();
    std::vector<uint8_t> out(static_cast<size_t>(n) * n * 3);
    for (size_t k; (k = next.fetch_add(1)) < indices.size();) {
      const int64_t idx = indices[k];
      const data::SampleView s = reader.read(idx);
      try {
        if (resize) {
          data::augment_into(dec, s.payload, {}, 0, static_cast<uint64_t>(idx), transform,
                             out.data());
        } else {
          const data::JpegInfo info = dec.read_header(s.payload);
          const data::CropParams p = data::random_resized_crop(
              info.width, info.height, 0, static_cast<uint64_t>(idx), transform);
          dec.decode_crop_window(s.payload, p.rect, n, n);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ceiling: sample %lld: %s\n", static_cast<long long>(idx), e.what());
        failed = true;
      }
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  const double s = since(t0);
  if (failed) throw std::runtime_error("the ceiling run could not decode every sample");
  return static_cast<double>(indices.size()) / s;
}

// Sample 0 of the first batch of epoch `epoch`, made by hand, against the loader's output.
bool check_first_sample(const data::LmdbImageDataset& ds, const data::LoaderOptions& o,
                        const data::Batch& batch, int64_t epoch, std::string* why) {
  data::Sampler order(ds.size(), {.shuffle = o.shuffle,
                                  .seed = o.seed,
                                  .rank = o.rank,
                                  .world_size = o.world_size,
                                  .batch_size = o.batch_size,
                                  .drop_last = o.drop_last});
  order.set_epoch(epoch);
  const int64_t idx = order.batch(0)[0];
  auto reader = ds.reader();
  const data::SampleView s = reader.read(idx);
  data::JpegDecoder dec;
  const int n = o.transform.output_size;
  std::vector<uint8_t> px(static_cast<size_t>(n) * n * 3);
  data::augment_into(dec, s.payload, data::sample_key(idx), static_cast<uint64_t>(epoch),
                     static_cast<uint64_t>(idx), o.transform, px.data());
  const stoker::Tensor first = batch.input.slice(0, 1).to(Device::cpu());
  const std::vector<float> got = first.to_floats();
  const float tol = o.dtype == DType::f32 ? 1e-5f : 2e-2f;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < n; ++y) {
      for (int x = 0; x < n; ++x) {
        const float v = px[(static_cast<size_t>(y) * n + x) * 3 + c];
        const float want = (v / 255.0f - o.mean[c]) / o.std[c];
        const float have = got[(static_cast<size_t>(c) * n + y) * n + x];
        if (std::abs(have - want) > tol * std::max(1.0f, std::abs(want))) {
          *why = fmt::format("sample {} channel {} ({}, {}): loader {:g}, by hand {:g}", idx, c, y,
                             x, have, want);
          return false;
        }
      }
    }
  }
  const int64_t label = batch.target.slice(0, 1).to(Device::cpu()).to_vector<int64_t>()[0];
  if (label != s.label) {
    *why = fmt::format("sample {}: label {}, expected {}", idx, label, s.label);
    return false;
  }
  return true;
}

struct RunResult {
  std::string requested;
  data::LoaderTuning tuning;
  int max_threads = 0;
  double img_s = 0, seconds = 0;
  int64_t samples = 0;
  data::LoaderCounters stages;  // over the timed epochs
  std::string summary;
};

data::LoaderCounters minus(const data::LoaderCounters& a, const data::LoaderCounters& b) {
  data::LoaderCounters d;
  d.read_s = a.read_s - b.read_s;
  d.header_s = a.header_s - b.header_s;
  d.decode_s = a.decode_s - b.decode_s;
  d.resize_s = a.resize_s - b.resize_s;
  d.worker_s = a.worker_s - b.worker_s;
  d.copy_s = a.copy_s - b.copy_s;
  d.copy_device_s = a.copy_device_s - b.copy_device_s;
  d.slot_wait_s = a.slot_wait_s - b.slot_wait_s;
  d.normalize_s = a.normalize_s - b.normalize_s;
  d.consumer_wait_s = a.consumer_wait_s - b.consumer_wait_s;
  d.batches = a.batches - b.batches;
  d.samples = a.samples - b.samples;
  d.samples_decoded = a.samples_decoded - b.samples_decoded;
  d.skipped = a.skipped - b.skipped;
  d.early_batches = a.early_batches - b.early_batches;
  d.discarded_batches = a.discarded_batches - b.discarded_batches;
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoker loader throughput: LMDB JPEGs -> RandomResizedCrop+flip+normalize batches"};
  std::string db, folder, json_path, threads_list = "1,4,16,auto", device_name = "auto",
                                     dtype_name = "f32", workdir;
  int64_t synth = 0;
  int synth_size = 400, batch = 256, size = 224, epochs = 2, warmup = 1, pack_threads = 0;
  bool keep = false, no_ceiling = false, verbose = false;
  std::string bm_out, bm_ignored;
  app.add_option("--db", db, "LMDB database written by `stoker pack`");
  app.add_option("--folder", folder, "folder of class sub-folders of JPEGs: packed first");
  app.add_option("--synth", synth, "pack N synthetic JPEGs first");
  app.add_option("--synth-size", synth_size, "side of the synthetic images")->capture_default_str();
  app.add_option("--workdir", workdir, "where --folder/--synth databases go (default: a temp dir)");
  app.add_flag("--keep", keep, "keep the packed database");
  app.add_option("--pack-threads", pack_threads, "threads for packing (0: all)");
  bool restart_markers = true;
  app.add_flag("!--no-restart-markers", restart_markers,
               "pack the JPEGs' bytes as given (crops decode through the whole-image path)");
  app.add_option("--threads", threads_list, "comma-separated thread counts; `auto` = autotuned")
      ->capture_default_str();
  app.add_option("--batch", batch, "batch size")->capture_default_str();
  app.add_option("--size", size, "output side (RandomResizedCrop size)")->capture_default_str();
  app.add_option("--epochs", epochs, "timed epochs per run")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed epochs before them")->capture_default_str();
  app.add_option("--device", device_name, "auto (the GPU when there is one), cpu or cuda[:N]")
      ->capture_default_str();
  app.add_option("--dtype", dtype_name, "output dtype: f32 or bf16")->capture_default_str();
  app.add_option("--json", json_path, "also write the results as JSON to this file");
  app.add_flag("--no-ceiling", no_ceiling, "skip the crop-decode ceiling");
  app.add_flag("--verbose", verbose, "the loader's autotuning decisions on stderr");
  app.add_option("--benchmark_out", bm_out, "(scripts/gpu-check.sh) same as --json");
  for (const char* f : {"--benchmark_format", "--benchmark_out_format", "--benchmark_filter"})
    app.add_option(f, bm_ignored, "(accepted and ignored: scripts/gpu-check.sh passes it)");
  CLI11_PARSE(app, argc, argv);
  if (json_path.empty()) json_path = bm_out;

  try {
    // ---- the dataset
    fs::path tmp, remove_at_end;  // what this run packed, removed unless --keep
    if (db.empty()) {
      tmp = workdir.empty() ? fs::temp_directory_path() /
                                  ("stoker_loader_throughput_" + std::to_string(::getpid()))
                            : fs::path(workdir);
      fs::create_directories(tmp);
      remove_at_end = workdir.empty() ? tmp : fs::path();
      const data::PackOptions po{.threads = pack_threads,
                                 .restart_markers = restart_markers,
                                 .overwrite = true,
                                 .progress = false};
      const auto t0 = Clock::now();
      if (!folder.empty()) {
        db = (tmp / "db").string();
        if (!workdir.empty()) remove_at_end = db;
        std::printf("packing %s into %s ...\n", folder.c_str(), db.c_str());
        const data::PackSummary ps = data::pack_folder(folder, db, po);
        std::printf("%s", data::format_summary(ps).c_str());
      } else {
        if (synth <= 0) synth = 2560;
        db = (tmp / "synth").string();
        if (!workdir.empty()) remove_at_end = db;
        std::printf("packing %lld synthetic %dx%d JPEGs into %s ...\n",
                    static_cast<long long>(synth), synth_size, synth_size, db.c_str());
        data::pack_synth({.samples = synth, .classes = 8, .size = synth_size, .seed = 1}, db, po);
      }
      std::printf("packed in %.1f s\n", since(t0));
    }
    const data::LmdbImageDataset ds{fs::path(db)};
    const DatasetStats st = scan(ds);

    Device device = Device::cpu();
    if (device_name == "auto") {
      if (stoker::core::cuda_device_count() > 0) device = Device::cuda(0);
    } else {
      device = stoker::core::parse_device(device_name);
    }
    const DType dtype = dtype_name == "bf16" ? DType::bf16 : DType::f32;
    const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

    // ---- context
    json out;
    out["context"]["cpu"] = stoker::core::describe_device(Device::cpu());
    out["context"]["hardware_threads"] = hw;
    out["context"]["device"] = device.is_cuda() ? stoker::core::describe_device(device) : "cpu";
    out["context"]["libjpeg-turbo"] = libjpeg_turbo_version();
    for (const auto& lib : stoker::core::library_versions())
      out["context"]["libraries"][lib.name] = lib.version;
    out["dataset"] = {{"path", db},
                      {"samples", st.samples},
                      {"mean_jpeg_bytes", st.mean_bytes},
                      {"mean_width", st.mean_width},
                      {"mean_height", st.mean_height},
                      {"scan_s", st.scan_s}};
    out["config"] = {{"batch", batch},
                     {"size", size},
                     {"epochs", epochs},
                     {"warmup", warmup},
                     {"dtype", dtype_name},
                     {"transform", "RandomResizedCrop + horizontal flip + normalize, NCHW"}};
    std::printf("cpu: %s\n", out["context"]["cpu"].get<std::string>().c_str());
    std::printf("device: %s (batches delivered there)\n",
                out["context"]["device"].get<std::string>().c_str());
    std::printf("libjpeg-turbo: %s", libjpeg_turbo_version().c_str());
    for (const auto& lib : stoker::core::library_versions())
      std::printf("; %s %s", lib.name.c_str(), lib.version.c_str());
    std::printf(
        "\ndataset: %s: %lld samples, mean %.1f KiB per JPEG, mean %.0fx%.0f px "
        "(read once in %.2f s)\n",
        db.c_str(), static_cast<long long>(st.samples), st.mean_bytes / 1024, st.mean_width,
        st.mean_height, st.scan_s);
    std::printf(
        "batch %d, %dx%d RandomResizedCrop + flip + normalize (%s, NCHW); %d warm-up + "
        "%d timed epochs per run\n",
        batch, size, size, dtype_name.c_str(), warmup, epochs);

    // ---- thread counts
    std::vector<std::string> requested;
    {
      std::stringstream ss(threads_list);
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) requested.push_back(item);
    }
    auto count_of = [&](const std::string& r) { return r == "auto" ? hw : std::stoi(r); };

    data::TransformOptions transform;
    transform.output_size = size;
    const data::LoaderOptions base{.batch_size = batch,
                                   .transform = transform,
                                   .device = device,
                                   .dtype = dtype,
                                   .verbose = verbose};

    // ---- ceiling
    std::vector<std::pair<int, std::pair<double, double>>> ceilings;  // threads -> (crop, +resize)
    auto ceiling_at = [&](int t) -> const std::pair<double, double>* {
      for (const auto& c : ceilings)
        if (c.first == t) return &c.second;
      return nullptr;
    };
    if (!no_ceiling) {
      data::Sampler order(ds.size(), {.shuffle = true, .seed = base.seed});
      order.set_epoch(0);
      std::printf(
          "\nceiling: every image's RandomResizedCrop region decoded by N plain threads "
          "(no loader), img/s\n");
      std::printf("%8s %14s %14s\n", "threads", "crop decode", "+ resize");
      for (const auto& r : requested) {
        const int t = count_of(r);
        if (ceiling_at(t)) continue;
        const double crop = ceiling(ds, order, t, transform, false);
        const double full = ceiling(ds, order, t, transform, true);
        ceilings.push_back({t, {crop, full}});
        std::printf("%8d %14.0f %14.0f\n", t, crop, full);
        out["ceiling"].push_back(
            {{"threads", t}, {"crop_decode_img_s", crop}, {"augment_img_s", full}});
      }
    }

    // ---- loader runs
    std::printf(
        "\nloader: per-image stage costs are thread-microseconds; per-batch ones "
        "milliseconds\n");
    std::printf("%-8s %7s %8s %9s %6s %6s %6s %7s %7s %7s %7s %6s %7s %7s %7s\n", "threads",
                "active", "prefetch", "img/s", "%ceil", "wait%", "read", "header", "decode",
                "resize", "sample", "util%", "copy", "h2d", "norm");
    std::vector<RunResult> runs;
    for (const auto& r : requested) {
      data::LoaderOptions o = base;
      if (r != "auto") o.threads = count_of(r);
      data::Loader loader(ds, o);
      RunResult res;
      res.requested = r;
      data::Batch b;
      for (int e = 0; e < warmup; ++e) {
        loader.start_epoch(e);
        bool first = true;
        while (loader.next(b)) {
          if (first && e == 0) {
            std::string why;
            if (!check_first_sample(ds, o, b, e, &why)) {
              std::fprintf(stderr, "loader_throughput: WRONG OUTPUT: %s\n", why.c_str());
              return 1;
            }
          }
          first = false;
        }
      }
      stoker::core::synchronize_device(device);
      const data::LoaderCounters before = loader.counters();
      const auto t0 = Clock::now();
      for (int e = warmup; e < warmup + epochs; ++e) {
        loader.start_epoch(e);
        while (loader.next(b)) {
        }
      }
      stoker::core::synchronize_device(device);
      res.seconds = since(t0);
      res.stages = minus(loader.counters(), before);
      res.samples = res.stages.samples;
      res.img_s = static_cast<double>(res.samples) / res.seconds;
      res.tuning = loader.tuning();
      res.max_threads = loader.max_threads();
      res.summary = loader.summary();
      const data::LoaderCounters& c = res.stages;
      const double made = static_cast<double>(std::max<int64_t>(1, c.samples_decoded));
      const double nb = static_cast<double>(std::max<int64_t>(1, c.batches));
      const auto* ceil_t = ceiling_at(res.tuning.threads);
      const double pct = ceil_t ? 100.0 * res.img_s / ceil_t->second : -1.0;
      const double util = 100.0 * c.worker_s / (res.seconds * res.tuning.threads);
      const double us = 1e6 / made;
      std::printf(
          "%-8s %7d %8d %9.0f %6s %6.1f %6.0f %7.1f %7.0f %7.0f %7.0f %6.0f %7.2f %7.2f %7.2f\n",
          r.c_str(), res.tuning.threads, res.tuning.prefetch, res.img_s,
          pct >= 0 ? fmt::format("{:.0f}", pct).c_str() : "-",
          100.0 * c.consumer_wait_s / res.seconds, c.read_s * us, c.header_s * us, c.decode_s * us,
          c.resize_s * us, c.worker_s * us, util, 1e3 * c.copy_s / nb, 1e3 * c.copy_device_s / nb,
          1e3 * c.normalize_s / nb);
      std::printf("         %s\n", res.summary.c_str());
      out["runs"].push_back({{"threads_requested", r},
                             {"threads", res.tuning.threads},
                             {"max_threads", res.max_threads},
                             {"prefetch", res.tuning.prefetch},
                             {"img_s", res.img_s},
                             {"seconds", res.seconds},
                             {"samples", res.samples},
                             {"pct_of_ceiling", pct},
                             {"consumer_wait_share", c.consumer_wait_s / res.seconds},
                             {"worker_utilization", util / 100.0},
                             {"per_image_us",
                              {{"read", c.read_s * us},
                               {"header", c.header_s * us},
                               {"decode", c.decode_s * us},
                               {"resize", c.resize_s * us},
                               {"sample", c.worker_s * us}}},
                             {"per_batch_ms",
                              {{"copy_enqueue", 1e3 * c.copy_s / nb},
                               {"copy_device", 1e3 * c.copy_device_s / nb},
                               {"slot_wait", 1e3 * c.slot_wait_s / nb},
                               {"normalize", 1e3 * c.normalize_s / nb},
                               {"consumer_wait", 1e3 * c.consumer_wait_s / nb}}},
                             {"early_batches", c.early_batches},
                             {"discarded_batches", c.discarded_batches},
                             {"summary", res.summary}});
      runs.push_back(res);
    }

    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << out.dump(2) << "\n";
      if (!f.good()) throw std::runtime_error("could not write " + json_path);
      std::printf("\nJSON: %s\n", json_path.c_str());
    }
    if (!remove_at_end.empty() && !keep) fs::remove_all(remove_at_end);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
