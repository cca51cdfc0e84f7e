// Private to stoker_classifier: its flags (main.cpp parses them and trains), the --synthetic
// benchmark (bench.cpp), and the helpers both build their runs with (defined in main.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/run_flags.h"
#include "stoker/stoker.h"

namespace stoker::classifier_program {

namespace fs = std::filesystem;
using amp::parse_precision;
using amp::Precision;
using ops::Layout;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string arch = "small";
  std::string data;  // empty: the synthetic shapes
  // Checkpoints and resume, --val and evaluation, --save, --metrics, --on-corrupt, activation
  // checkpointing (common/run_flags.h: the same as stoker_gpt's).
  program::RunFlags run;
  int image_size = 32;
  int64_t epochs = 3;
  int64_t batch = 64;
  int accum = 1;
  // < 0: SGD 0.1 * global batch / 256 (Goyal et al.'s rule); LARS 10.5 * global batch / 3264
  // (NVIDIA's MLPerf ResNet-50 setting at batch 3264, scaled linearly).
  float lr = -1;
  float weight_decay = 5e-5f;
  int warmup_epochs = 1;
  std::string optimizer = "sgd";
  std::string lr_schedule = "cosine";
  float label_smoothing = 0.0f;
  float lars_eta = 0.001f;
  std::string precision = "fp32";
  // Channels-last: tensor cores on the GPU; on the CPU one large GEMM per conv chunk.
  std::string layout = "nhwc";
  int threads = 0;
  double stall_timeout = 300;  // seconds without a batch before the loader gives up
  bool diagnostics = false;
  std::string device = "auto";
  bool synthetic = false;
  bool fuse_bn_relu = true;    // --fuse-bn-relu / --no-fuse-bn-relu
  bool cuda_graph = false;     // --cuda-graph: insisted on
  bool no_cuda_graph = false;  // --no-cuda-graph (default: the graph whenever it can run)
  bool conv_autotune = false;  // --conv-autotune
  int steps = 20;
  int warmup = 5;
  int64_t bench_epochs = 2;
  uint64_t seed = 0;
  int64_t classes = 0;     // 0: the dataset's (synthetic bench: 1000)
  int width = 16;          // small CNN width
  double crop_scale = -1;  // RandomResizedCrop's smallest area (< 0: 0.08; synthetic: 0.35)
  int eval_resize = 0;     // 0: image_size * 8 / 7 (synthetic: image_size)
  int64_t synth_train = 4000;
  int64_t synth_val = 1000;
  int synth_classes = 8;
  std::string cache;
  int log_interval = 50;
  double min_accuracy = 0;
};

// ---- shared by the training run and the bench (main.cpp)

Layout parse_layout(const std::string& s);
double since(Clock::time_point t);
std::string fixed(double v, int digits);
// The model of --arch on `device`, initialized from --seed.
std::unique_ptr<nn::Sequential> build_model(const Args& a, int64_t classes, Layout layout,
                                            Device device);
std::unique_ptr<optim::Optimizer> make_optimizer(const Args& a, nn::Module& model, float lr,
                                                 float weight_decay);
data::LoaderOptions loader_options(const Args& a, Device device, Layout layout, DType dtype,
                                   int rank, int world, bool train_split);
// The step as a CUDA graph: --cuda-graph insists, --no-cuda-graph runs eagerly, and by default
// the step is captured whenever it can run as one (a CUDA device, one process; SGD and LARS
// read their learning rate on the device).
bool use_cuda_graph(const Args& a, Device device, int world);
// --classes against the dataset (`fallback` when --classes is not given).
int64_t checked_classes(const Args& a, const data::LmdbImageDataset& ds, int64_t fallback);

// ---- --synthetic (bench.cpp)

// Steps on one random batch held on the device, then (with --data) steps fed by the Loader;
// data parallel under a launcher (`ctx`). Exit status 0.
int run_bench(const Args& a, Device device, dist::DistContext* ctx = nullptr);

}  // namespace stoker::classifier_program
