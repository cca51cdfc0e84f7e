// JPEG decode and augment throughput, one thread: full decode vs crop-before-decode (with and
// without DCT scaling, with and without the resize) vs DCT-scaled full decode (1/2, 1/4, 1/8)
// vs the resize alone, on RandomResizedCrop(224) regions.
//
// Input: every *.jpg / *.jpeg under $STOKER_BENCH_JPEG_DIR if set (cycled), otherwise one
// synthetic photo-like 500x375 q90 4:2:0 JPEG (gradients, shapes, texture and noise; ImageNet's
// typical size). Crops are the RandomResizedCrop draws for sample indices 0, 1, 2, ... (seed 0).
// Counter: img/s = images per CPU-second of the benchmark thread (Google Benchmark divides rate
// counters by CPU time), so a busy shared machine distorts it less than wall time; scaled% =
// share of crops decoded at a DCT scale below 8/8 (needs a crop >= 2x the output both ways,
// which a 500x375 image never gives at 224 output, hence the 128 variant). Each benchmark
// checks what it timed once (the crop path against full decode -> same resize) and stops with
// an error on a mismatch.
#include <benchmark/benchmark.h>
#include <jconfig.h>
#include <turbojpeg.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_context.h"
#include "data/jpeg_restart.h"
#include "data/resize.h"
#include "stoker/data/decode.h"

namespace {

namespace data = stoker::data;
constexpr int kOut = 224;

std::vector<uint8_t> photo_like(int w, int h) {
  std::vector<uint8_t> img(static_cast<size_t>(w) * h * 3);
  uint32_t s = 12345;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      s = s * 1664525u + 1013904223u;
      const double noise = static_cast<double>((s >> 24) & 31) - 15.5;  // sensor-like noise
      const double tex = 30 * std::sin(0.21 * x + 0.5 * std::sin(0.05 * y)) *
                         std::cos(0.17 * y + 0.3 * std::sin(0.07 * x));
      double v[3] = {90 + 120.0 * x / w + tex, 60 + 150.0 * y / h - tex,
                     140 + 60 * std::sin(0.013 * (x + y))};
      const double dx = x - 0.6 * w, dy = y - 0.4 * h;
      if (dx * dx + dy * dy < 0.04 * w * w) v[0] = 220, v[1] = 60 + tex, v[2] = 40;
      if ((x / 40 + y / 40) % 7 == 0) v[2] = 30 + tex;
      for (int c = 0; c < 3; ++c) {
        img[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v[c] + noise, 0.0, 255.0));
      }
    }
  }
  return img;
}

std::vector<uint8_t> encode(const std::vector<uint8_t>& rgb, int w, int h, int quality) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_420, quality, 0) != 0) {
    std::fprintf(stderr, "tjCompress2: %s\n", tjGetErrorStr2(tj));
    std::exit(1);
  }
  std::vector<uint8_t> jpeg(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return jpeg;
}

struct Corpus {
  std::vector<std::vector<uint8_t>> files;
  std::vector<data::JpegInfo> info;
  std::vector<std::vector<uint8_t>> tiled;  // the same files as `stoker pack` stores them
  std::string description;
  const std::vector<uint8_t>& file(size_t i, bool tiles) const {
    return tiles ? tiled[i] : files[i];
  }
};

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus c;
    if (const char* dir = std::getenv("STOKER_BENCH_JPEG_DIR")) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        const std::string ext = e.path().extension().string();
        if (!e.is_regular_file() || (ext != ".jpg" && ext != ".jpeg" && ext != ".JPEG")) continue;
        std::ifstream in(e.path(), std::ios::binary);
        c.files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (c.files.size() >= 2000) break;
      }
      c.description = std::string("JPEGs under ") + dir;
    }
    if (c.files.empty()) {
      c.files.push_back(encode(photo_like(500, 375), 500, 375, 90));
      c.description = "synthetic photo-like 500x375 q90 4:2:0";
    }
    data::JpegDecoder dec;
    size_t bytes = 0, tiled_bytes = 0;
    for (const auto& f : c.files) {
      c.info.push_back(dec.read_header(f));
      bytes += f.size();
      c.tiled.emplace_back();
      if (!stoker::data::detail::add_restart_markers(f, c.tiled.back()).empty()) c.tiled.back() = f;
      tiled_bytes += c.tiled.back().size();
    }
    c.description += " (" + std::to_string(c.files.size()) + " files, mean " +
                     std::to_string(bytes / c.files.size() / 1024) + " KiB; with restart markers " +
                     std::to_string(tiled_bytes / c.files.size() / 1024) + " KiB)";
    return c;
  }();
  return c;
}

void set_rate(benchmark::State& state) {
  state.counters["img/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Crop path vs full decode -> same resize on one sample; errors out on mismatch.
bool check_crop(benchmark::State& state, data::JpegDecoder& dec, size_t i, uint64_t index) {
  const Corpus& c = corpus();
  const data::CropParams p =
      data::random_resized_crop(c.info[i].width, c.info[i].height, 0, index, {});
  std::vector<uint8_t> got(kOut * kOut * 3), ref(got.size());
  dec.decode_crop(c.files[i], p.rect, kOut, kOut, got.data(), "check", p.flip);
  const int scale = dec.last_scale_num();
  data::JpegDecoder plain;
  const data::Image full = plain.decode_full(c.files[i]);
  data::resize_rgb({full.pixels.data(), full.width, full.height, size_t(full.width) * 3}, p.rect.x,
                   p.rect.y, p.rect.width, p.rect.height, kOut, kOut, ref.data(), p.flip);
  double sum = 0;
  for (size_t k = 0; k < got.size(); ++k) sum += std::abs(int(got[k]) - int(ref[k]));
  const double mean = sum / got.size();
  if ((scale == 8 && mean != 0.0) || mean > 2.0) {
    state.SkipWithError(
        ("crop decode differs from full decode + resize: mean abs " + std::to_string(mean))
            .c_str());
    return false;
  }
  return true;
}

void BM_DecodeFull(benchmark::State& state) {
  const Corpus& c = corpus();
  data::JpegDecoder dec;
  data::Image img;
  size_t i = 0;
  for (auto _ : state) {
    dec.decode_full_into(c.files[i], img);
    benchmark::DoNotOptimize(img.pixels.data());
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
}

// Full decode, then crop + resize of the RandomResizedCrop region (no crop-before-decode).
void BM_DecodeFullThenResize(benchmark::State& state) {
  const Corpus& c = corpus();
  data::JpegDecoder dec;
  data::Resizer resizer;
  data::Image img;
  std::vector<uint8_t> out(kOut * kOut * 3);
  size_t i = 0;
  uint64_t index = 0;
  for (auto _ : state) {
    dec.decode_full_into(c.files[i], img);
    const data::CropParams p = data::random_resized_crop(img.width, img.height, 0, index++, {});
    resizer.resize({img.pixels.data(), img.width, img.height, size_t(img.width) * 3}, img.width,
                   img.height, p.rect.x, p.rect.y, p.rect.width, p.rect.height, kOut, kOut,
                   out.data(), p.flip);
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
}

// Crop-before-decode (+ resize, + flip): args (DCT scaling off/on, output size).
void BM_DecodeCrop(benchmark::State& state) {
  const Corpus& c = corpus();
  data::JpegDecoder dec({.dct_scaling = state.range(0) != 0});
  const int out_size = static_cast<int>(state.range(1));
  if (!check_crop(state, dec, 0, 3)) return;
  std::vector<uint8_t> out(out_size * out_size * 3);
  size_t i = 0;
  uint64_t index = 0, scaled = 0;
  for (auto _ : state) {
    const data::CropParams p =
        data::random_resized_crop(c.info[i].width, c.info[i].height, 0, index++, {});
    dec.decode_crop(c.files[i], p.rect, out_size, out_size, out.data(), {}, p.flip);
    scaled += dec.last_scale_num() != 8;
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
  state.counters["scaled%"] = 100.0 * scaled / std::max<uint64_t>(1, index);
}

// Crop-before-decode without the resize: only the rows/columns of the RandomResizedCrop region
// (and the DCT scale) decode_crop would use, then stop — the decode share of the crop path and
// the per-image cost behind stoker_loader_throughput's `crop decode` ceiling. Args: DCT scaling;
// tiles (the files as `stoker pack` stores them, with restart markers, decoded from the tiles
// the crop covers) or the files as given.
void BM_DecodeCropWindow(benchmark::State& state) {
  const Corpus& c = corpus();
  const bool tiles = state.range(1) != 0;
  data::JpegDecoder dec({.dct_scaling = state.range(0) != 0});
  size_t i = 0;
  uint64_t index = 0, scaled = 0;
  for (auto _ : state) {
    const data::CropParams p =
        data::random_resized_crop(c.info[i].width, c.info[i].height, 0, index++, {});
    benchmark::DoNotOptimize(dec.decode_crop_window(c.file(i, tiles), p.rect, kOut, kOut));
    scaled += dec.last_scale_num() != 8;
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
  state.counters["scaled%"] = 100.0 * scaled / std::max<uint64_t>(1, index);
}

// The whole image decoded at DCT scale M/8 (libjpeg's scaled IDCT; no crop, no resize). Arg: M
// (8 = full size, as BM_DecodeFull). Checks the decoder chose M.
void BM_DecodeScaled(benchmark::State& state) {
  const Corpus& c = corpus();
  const int m = static_cast<int>(state.range(0));
  data::JpegDecoder dec;
  size_t i = 0;
  for (auto _ : state) {
    const data::JpegInfo& info = c.info[i];
    const data::CropRect all{0, 0, double(info.width), double(info.height)};
    // An output of exactly M/8 of the image makes decode_crop pick scale M (when M <= 4).
    const int ow = std::max(1, info.width * m / 8), oh = std::max(1, info.height * m / 8);
    const auto window = dec.decode_crop_window(c.files[i], all, ow, oh);
    if (dec.last_scale_num() != m) {
      state.SkipWithError(("decoder chose scale " + std::to_string(dec.last_scale_num()) +
                           "/8, not " + std::to_string(m) + "/8")
                              .c_str());
      return;
    }
    benchmark::DoNotOptimize(window);
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
}

// The whole per-sample call the loader makes (header read + RRC draw + crop decode + flip), with
// the decoder's own stage split (µs per image: header, decode, resize). Arg: tiles, as above.
void BM_AugmentTrain(benchmark::State& state) {
  const Corpus& c = corpus();
  const bool tiles = state.range(0) != 0;
  data::JpegDecoder dec;
  std::vector<uint8_t> out(kOut * kOut * 3);
  const data::TransformOptions o;
  size_t i = 0;
  uint64_t index = 0;
  for (auto _ : state) {
    data::augment_into(dec, c.file(i, tiles), {}, 0, index++, o, out.data());
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
  const data::DecodeStageTimes& t = dec.stage_times();
  state.counters["tiled%"] = 100.0 * t.tiled / std::max<int64_t>(1, t.images);
  const double n = static_cast<double>(std::max<int64_t>(1, t.images));
  state.counters["header_us"] = 1e6 * t.header_s / n;
  state.counters["decode_us"] = 1e6 * t.decode_s / n;
  state.counters["resize_us"] = 1e6 * t.resize_s / n;
}

void BM_AugmentEval(benchmark::State& state) {
  const Corpus& c = corpus();
  data::JpegDecoder dec;
  std::vector<uint8_t> out(kOut * kOut * 3);
  data::TransformOptions o;
  o.train = false;
  size_t i = 0;
  for (auto _ : state) {
    data::augment_into(dec, c.files[i], {}, 0, 0, o, out.data());
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
}

// The resize alone: RandomResizedCrop regions of a decoded image to 224x224 (+ flip). Arg:
// avx512 (0: the AVX2 passes even where the CPU has AVX-512; 1: the widest the CPU has).
void BM_Resize(benchmark::State& state) {
  const Corpus& c = corpus();
  data::JpegDecoder dec;
  const data::Image img = dec.decode_full(c.files[0]);
  data::Resizer resizer(true, state.range(0) != 0);
  std::vector<uint8_t> out(kOut * kOut * 3);
  uint64_t index = 0;
  for (auto _ : state) {
    const data::CropParams p = data::random_resized_crop(img.width, img.height, 0, index++, {});
    resizer.resize({img.pixels.data(), img.width, img.height, size_t(img.width) * 3}, img.width,
                   img.height, p.rect.x, p.rect.y, p.rect.width, p.rect.height, kOut, kOut,
                   out.data(), p.flip);
    benchmark::DoNotOptimize(out.data());
  }
  set_rate(state);
}

// The header alone (augment_into reads it once to draw the crop, decode_crop again).
void BM_ReadHeader(benchmark::State& state) {
  const Corpus& c = corpus();
  data::JpegDecoder dec;
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(dec.read_header(c.files[i]).width);
    if (++i == c.files.size()) i = 0;
  }
  set_rate(state);
}

BENCHMARK(BM_ReadHeader)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeFull)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeFullThenResize)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeCrop)
    ->ArgNames({"dct_scaling", "out"})
    ->Args({0, 224})
    ->Args({1, 224})
    ->Args({0, 128})
    ->Args({1, 128})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeCropWindow)
    ->ArgNames({"dct_scaling", "tiles"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeScaled)->ArgNames({"M"})->Arg(4)->Arg(2)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AugmentTrain)->ArgNames({"tiles"})->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AugmentEval)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Resize)->ArgNames({"avx512"})->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::fputs(stoker::bench::add_context().c_str(), stdout);
  const std::string jpeg_version = std::to_string(LIBJPEG_TURBO_VERSION_NUMBER / 1000000) + "." +
                                   std::to_string(LIBJPEG_TURBO_VERSION_NUMBER / 1000 % 1000) +
                                   "." + std::to_string(LIBJPEG_TURBO_VERSION_NUMBER % 1000);
  benchmark::AddCustomContext("libjpeg-turbo", jpeg_version);
  benchmark::AddCustomContext("input", corpus().description);
  std::printf("libjpeg-turbo: %s\ninput: %s\n", jpeg_version.c_str(), corpus().description.c_str());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
