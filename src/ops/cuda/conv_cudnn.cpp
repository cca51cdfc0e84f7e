// CUDA convolution through cuDNN's legacy convolution API (cudnnConvolutionForward /
// BackwardData / BackwardFilter; deprecated in cuDNN 9 but present in every 9.x, see
// cudnn_util.h).
//
// Kept off the per-call path: a plan per problem (device, dtype, layout, math mode, algorithm
// search, shapes, stride/padding/dilation/groups) holding the four descriptors and, chosen
// lazily on first use of each pass, the algorithm and its workspace size. By default the
// algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7): no device time, the same
// pick on every run. With ops::set_conv_autotune(true) (PyTorch's cudnn.benchmark) the first
// call of each pass times cuDNN's candidates on the call's own buffers (cudnnFind*AlgorithmEx:
// a host sync and a scratch workspace once per problem, the warm-up step) and keeps the fastest
// that meets the same preferences; a pass first met while its stream is capturing a CUDA graph
// takes the heuristic's pick (Find synchronizes, which a capture cannot hold). Backward passes
// prefer deterministic algorithms (same gradients run to run, as the rest of stoker); the
// workspace of the chosen algorithm is capped (kMaxWorkspace) and comes from the
// stream-ordered pool per call.
//
// Math: fp32 convolutions run with CUDNN_FMA_MATH (true fp32, matches the CPU reference) unless
// ops::allow_tf32() — then CUDNN_DEFAULT_MATH, which lets cuDNN use TF32 tensor cores. f16/bf16
// run with CUDNN_TENSOR_OP_MATH and fp32 accumulation (compute type float).
#include <cudnn.h>

#include <fmt/format.h>
#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ops/conv_stubs.h"
#include "ops/copy_stubs.h"
#include "ops/cuda/conv_problem.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/elementwise_stubs.h"
#include "ops/geometry.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops::cuda {

namespace {

using detail::ConvGeometry;

constexpr size_t kMaxWorkspace = size_t{1} << 30;  // 1 GiB: larger algorithms are skipped

struct ConvKey {
  ConvProblem problem;
  int math;
  int measure;  // ops::conv_autotune() when the plan was made
  auto operator<=>(const ConvKey&) const = default;
};

struct Choice {
  bool chosen = false;
  int algo = 0;
  size_t workspace = 0;
};

struct ConvPlan {
  TensorDesc x, y;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool measure = false;  // time the candidates (cudnnFind*Ex) rather than trust the heuristics
  Choice fwd, bwd_data, bwd_filter;
  std::string what;  // describes the problem for messages
};

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_FMA_MATH:
      return "FMA (fp32, no TF32)";
    case CUDNN_DEFAULT_MATH:
      return "default (TF32 allowed)";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor ops";
    default:
      return "other";
  }
}

cudnnMathType_t math_for(DType t) {
  if (t == DType::f32) return allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

std::unique_ptr<ConvPlan> make_plan(const ConvKey& key, DType t, const ConvGeometry& g) {
  auto plan = std::make_unique<ConvPlan>();
  plan->x.set(t, g.layout, g.n, g.c, g.h, g.w);
  plan->y.set(t, g.layout, g.n, g.k, g.oh, g.ow);
  STOKER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  STOKER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, cudnn_dtype(t), cudnn_format(g.layout),
                                                cudnn_int(g.k, "K"), cudnn_int(g.cg, "C/groups"),
                                                cudnn_int(g.r, "R"), cudnn_int(g.s, "S")));
  STOKER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  STOKER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      plan->conv, cudnn_int(g.ph, "pad"), cudnn_int(g.pw, "pad"), cudnn_int(g.sh, "stride"),
      cudnn_int(g.sw, "stride"), cudnn_int(g.dh, "dilation"), cudnn_int(g.dw, "dilation"),
      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  STOKER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, cudnn_int(g.groups, "groups")));
  plan->math = static_cast<cudnnMathType_t>(key.math);
  plan->measure = key.measure != 0;
  STOKER_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, plan->math));
  plan->what = fmt::format(
      "{} {} x [N={}, C={}, H={}, W={}], filter [K={}, C/g={}, R={}, S={}], stride ({}, {}), "
      "padding ({}, {}), dilation ({}, {}), groups {}, math {}{}",
      dtype_name(t), layout_name(g.layout), g.n, g.c, g.h, g.w, g.k, g.cg, g.r, g.s, g.sh, g.sw,
      g.ph, g.pw, g.dh, g.dw, g.groups, math_name(plan->math),
      plan->measure ? ", algorithms timed" : "");
  return plan;
}

class PlanCache {
 public:
  // The plan for x/w shapes and params on device `device`. The returned reference stays valid
  // (plans are never evicted); its lazily chosen algorithms are only touched under the device's
  // CudnnLease.
  ConvPlan& get(int device, DType t, const ConvGeometry& g) {
    const ConvKey key{ConvProblem::of(device, t, g), static_cast<int>(math_for(t)),
                      conv_autotune() ? 1 : 0};
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<ConvPlan>& p = plans_[key];
    if (!p) p = make_plan(key, t, g);
    return *p;
  }

 private:
  std::mutex mu_;
  std::map<ConvKey, std::unique_ptr<ConvPlan>> plans_;
};

PlanCache& plan_cache() {
  static auto* c = new PlanCache();  // never destroyed: descriptors outlive static teardown
  return *c;
}

// The best of cuDNN's heuristic results: succeeded, fits kMaxWorkspace, uses the plan's math
// type and (when asked) is deterministic; relaxing determinism, then the math type, in turn.
template <typename Perf>
Choice pick(const std::vector<Perf>& perfs, cudnnMathType_t math, bool prefer_deterministic,
            const char* pass, const ConvPlan& plan) {
  const Perf* best = nullptr;
  for (int round = 0; round < 3 && !best; ++round) {
    for (const Perf& p : perfs) {
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
      if (round < 2 && p.mathType != math) continue;
      if (round == 0 && prefer_deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      best = &p;
      break;
    }
  }
  STOKER_CHECK(best != nullptr, "ops::", pass, ": cuDNN has no algorithm for ", plan.what,
               " within a ", kMaxWorkspace >> 20, " MiB workspace (", perfs.size(), " candidates)");
  Choice c;
  c.chosen = true;
  c.algo = static_cast<int>(best->algo);
  c.workspace = best->memory;
  return c;
}

void check_call(cudnnStatus_t status, const char* pass, const char* call, const ConvPlan& plan) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  STOKER_THROW("ops::", pass, ": ", call, " failed with ", cudnnGetErrorString(status), " for ",
               plan.what);
}

// Scratch memory from the stream-ordered pool, freed (stream-ordered) when it goes out of scope
// after the call that uses it has been enqueued.
Tensor workspace(size_t bytes, Device d) {
  if (bytes == 0) return {};
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, d);
}

void* ptr(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

// A pass's algorithm, chosen on its first use and kept in `slot`: the pick among cuDNN's
// ranking of `count` candidates, with the workspace that cuDNN asks for the picked algorithm
// (`workspace_size(algo, &bytes)`, named size_call in errors) when that is more than the
// ranking said. The ranking is the heuristic's (`rank(count, &n, perfs)` fills n <= count
// results) or, when `measure`, cuDNN's timing of every candidate on the call's buffers
// (`find(count, &n, perfs, workspace bytes)`, fastest first) with a workspace as large as the
// largest candidate within kMaxWorkspace asks for.
template <typename Perf, typename Rank, typename Find, typename WorkspaceSize>
const Choice& choose(Choice& slot, const ConvPlan& plan, const char* pass, int count,
                     bool prefer_deterministic, bool measure, Rank rank, Find find,
                     const char* size_call, WorkspaceSize workspace_size) {
  if (slot.chosen) return slot;
  using Algo = decltype(Perf::algo);
  std::vector<Perf> perfs(static_cast<size_t>(count));
  int n = 0;
  if (measure) {
    size_t largest = 0;
    for (int a = 0; a < count; ++a) {
      size_t bytes = 0;
      if (workspace_size(static_cast<Algo>(a), &bytes) == CUDNN_STATUS_SUCCESS &&
          bytes <= kMaxWorkspace)
        largest = std::max(largest, bytes);
    }
    find(static_cast<int>(perfs.size()), &n, perfs.data(), largest);
  } else {
    rank(static_cast<int>(perfs.size()), &n, perfs.data());
  }
  perfs.resize(static_cast<size_t>(n));
  Choice c = pick(perfs, plan.math, prefer_deterministic, pass, plan);
  size_t bytes = 0;
  check_call(workspace_size(static_cast<Algo>(c.algo), &bytes), pass, size_call, plan);
  c.workspace = std::max(c.workspace, bytes);
  slot = c;
  return slot;
}

// The buffers a pass runs on, which a timed search (ConvPlan::measure) runs the candidates on:
// the two inputs and the output, which every candidate overwrites — or, where the pass adds
// into its output (the filter gradient, an accumulated input gradient), a scratch output of
// `scratch_out_bytes` instead.
struct PassBuffers {
  Device device;
  const void* in0;
  const void* in1;
  void* out;
  size_t scratch_out_bytes = 0;
};

// Whether this pass's first call times the candidates: the plan asks for it and the stream is
// not capturing a graph.
bool measuring(const ConvPlan& plan, Device d) {
  return plan.measure && !stream_is_capturing(core::cuda_stream(d));
}

const Choice& forward_choice(ConvPlan& plan, cudnnHandle_t h, const PassBuffers& b) {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  return choose<Perf>(
      plan.fwd, plan, "conv2d_forward", CUDNN_CONVOLUTION_FWD_ALGO_COUNT, false,
      !plan.fwd.chosen && measuring(plan, b.device),
      [&](int count, int* n, Perf* perfs) {
        STOKER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
            h, plan.x.get(), plan.w, plan.conv, plan.y.get(), count, n, perfs));
      },
      [&](int count, int* n, Perf* perfs, size_t ws_bytes) {
        const Tensor ws = workspace(ws_bytes, b.device);
        STOKER_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            h, plan.x.get(), b.in0, plan.w, b.in1, plan.conv, plan.y.get(), b.out, count, n, perfs,
            ptr(ws), ws_bytes));
      },
      "cudnnGetConvolutionForwardWorkspaceSize",
      [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, plan.x.get(), plan.w, plan.conv,
                                                       plan.y.get(), algo, bytes);
      });
}

const Choice& backward_data_choice(ConvPlan& plan, cudnnHandle_t h, const PassBuffers& b) {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  return choose<Perf>(
      plan.bwd_data, plan, "conv2d_backward_data", CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, true,
      !plan.bwd_data.chosen && measuring(plan, b.device),
      [&](int count, int* n, Perf* perfs) {
        STOKER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            h, plan.w, plan.y.get(), plan.conv, plan.x.get(), count, n, perfs));
      },
      [&](int count, int* n, Perf* perfs, size_t ws_bytes) {
        const Tensor ws = workspace(ws_bytes, b.device);
        const Tensor scratch = workspace(b.scratch_out_bytes, b.device);
        STOKER_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            h, plan.w, b.in0, plan.y.get(), b.in1, plan.conv, plan.x.get(),
            scratch.defined() ? scratch.data() : b.out, count, n, perfs, ptr(ws), ws_bytes));
      },
      "cudnnGetConvolutionBackwardDataWorkspaceSize",
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, plan.w, plan.y.get(), plan.conv,
                                                            plan.x.get(), algo, bytes);
      });
}

const Choice& backward_filter_choice(ConvPlan& plan, cudnnHandle_t h, const PassBuffers& b) {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  return choose<Perf>(
      plan.bwd_filter, plan, "conv2d_backward_filter", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
      true, !plan.bwd_filter.chosen && measuring(plan, b.device),
      [&](int count, int* n, Perf* perfs) {
        STOKER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            h, plan.x.get(), plan.y.get(), plan.conv, plan.w, count, n, perfs));
      },
      [&](int count, int* n, Perf* perfs, size_t ws_bytes) {
        const Tensor ws = workspace(ws_bytes, b.device);
        const Tensor scratch = workspace(b.scratch_out_bytes, b.device);
        STOKER_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            h, plan.x.get(), b.in0, plan.y.get(), b.in1, plan.conv, plan.w,
            scratch.defined() ? scratch.data() : b.out, count, n, perfs, ptr(ws), ws_bytes));
      },
      "cudnnGetConvolutionBackwardFilterWorkspaceSize",
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, plan.x.get(), plan.y.get(),
                                                              plan.conv, plan.w, algo, bytes);
      });
}

// Enqueues one pass under device d's cuDNN lease: its algorithm (`choice(plan, handle,
// buffers)`), a workspace from the pool, then `run(handle, algo, workspace, workspace bytes)`,
// the cuDNN call named `call` in errors. The caller holds a DeviceScope for d.
template <typename ChoiceFn, typename Run>
void enqueue(Device d, ConvPlan& plan, const char* pass, const char* call, ChoiceFn choice,
             const PassBuffers& buffers, Run run) {
  const CudnnLease lease(d);
  const Choice& c = choice(plan, lease.handle(), buffers);
  const Tensor ws = workspace(c.workspace, d);
  check_call(run(lease.handle(), c.algo, ptr(ws), c.workspace), pass, call, plan);
}

}  // namespace

void conv2d_forward(const Tensor& y, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const Device d = y.device();
  const core::DeviceScope scope(d.index);
  const ConvGeometry g = detail::conv_geometry(x.shape(), w.shape(), p);
  ConvPlan& plan = plan_cache().get(d.index, x.dtype(), g);
  enqueue(d, plan, "conv2d_forward", "cudnnConvolutionForward", forward_choice,
          PassBuffers{d, x.data(), w.data(), y.data()},
          [&](cudnnHandle_t h, int algo, void* ws, size_t ws_bytes) {
            const float alpha = 1.0f, beta = 0.0f;
            return cudnnConvolutionForward(h, &alpha, plan.x.get(), x.data(), plan.w, w.data(),
                                           plan.conv, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                           ws, ws_bytes, &beta, plan.y.get(), y.data());
          });
}

void conv2d_backward_data(const Tensor& dx, const Tensor& dy, const Tensor& w,
                          const Conv2dParams& p, bool accumulate) {
  const Device d = dx.device();
  const core::DeviceScope scope(d.index);
  const ConvGeometry g = detail::conv_geometry(dx.shape(), w.shape(), p);
  ConvPlan& plan = plan_cache().get(d.index, dx.dtype(), g);
  enqueue(d, plan, "conv2d_backward_data", "cudnnConvolutionBackwardData", backward_data_choice,
          PassBuffers{d, w.data(), dy.data(), dx.data(), accumulate ? dx.nbytes() : size_t{0}},
          [&](cudnnHandle_t h, int algo, void* ws, size_t ws_bytes) {
            const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
            return cudnnConvolutionBackwardData(h, &alpha, plan.w, w.data(), plan.y.get(),
                                                dy.data(), plan.conv,
                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                                ws, ws_bytes, &beta, plan.x.get(), dx.data());
          });
}

void conv2d_backward_filter(const Tensor& dw, const Tensor& dy, const Tensor& x,
                            const Conv2dParams& p, bool accumulate) {
  const Device d = dw.device();
  const core::DeviceScope scope(d.index);
  const ConvGeometry g = detail::conv_geometry(x.shape(), dw.shape(), p);
  ConvPlan& plan = plan_cache().get(d.index, x.dtype(), g);
  // cuDNN writes the filter gradient in x's dtype. An f32 gradient of half inputs is computed
  // into a half scratch filter and added in fp32 (axpy; cast when not accumulating) — the
  // rounding autocast has too.
  const bool direct = dw.dtype() == x.dtype();
  const Tensor target = direct ? dw : Tensor::empty(dw.shape(), x.dtype(), d);
  // A timed search writes every candidate's result: into scratch where dw accumulates.
  const PassBuffers buffers{d, x.data(), dy.data(), target.data(),
                            direct ? target.nbytes() : size_t{0}};
  enqueue(d, plan, "conv2d_backward_filter", "cudnnConvolutionBackwardFilter",
          backward_filter_choice, buffers,
          [&](cudnnHandle_t h, int algo, void* ws, size_t ws_bytes) {
            const float alpha = 1.0f, beta = direct && accumulate ? 1.0f : 0.0f;
            return cudnnConvolutionBackwardFilter(
                h, &alpha, plan.x.get(), x.data(), plan.y.get(), dy.data(), plan.conv,
                static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, ws_bytes, &beta, plan.w,
                target.data());
          });
  if (direct) return;
  if (accumulate) {
    axpy_impl(dw, 1.0f, target);
  } else {
    cast_impl(dw, target);
  }
}

STOKER_REGISTER_STUB(conv2d_forward, conv2d_forward);
STOKER_REGISTER_STUB(conv2d_backward_data, conv2d_backward_data);
STOKER_REGISTER_STUB(conv2d_backward_filter, conv2d_backward_filter);

}  // namespace stoker::ops::cuda
