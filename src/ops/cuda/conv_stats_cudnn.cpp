// ops::conv2d_forward_stats on CUDA: the convolution and its output's per-channel sum and sum of
// squares as one cuDNN graph (graph API: a ConvolutionForward operation whose output feeds a
// GenStats operation), which cuDNN's runtime-fusion engines compile into one kernel — the
// statistics come out of the convolution's epilogue, so the batch norm after it needs no pass
// of its own over y for them.
//
// Whether an engine exists depends on the GPU, the cuDNN version, the dtype, the layout and the
// shapes, and is only known by asking: a plan per problem (the same key as the convolution's
// plans) builds the graph, takes cuDNN's heuristic list of engine configurations and keeps the
// first whose execution plan finalizes (runtime compilation happens there, once per problem).
// A problem without one is remembered as unsupported with cuDNN's last status, which
// conv2d_forward_stats_supported reports and conv2d_forward_stats throws with.
//
// Descriptors are created once per problem and live as long as the process (like the
// convolution plans: never destroyed during static teardown). Each call builds a small variant
// pack (the five device pointers and the workspace) and executes on the current stream.
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/conv_stubs.h"
#include "ops/cuda/conv_problem.h"
#include "ops/cuda/cudnn_util.h"
#include "ops/geometry.h"

namespace stoker::ops::cuda {

namespace {

using detail::ConvGeometry;

// One backend descriptor, destroyed with its owner.
class Backend {
 public:
  explicit Backend(cudnnBackendDescriptorType_t type) {
    STOKER_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Backend() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  // Sets an attribute; the status is returned (graph building reports it, never throws).
  cudnnStatus_t set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                    int64_t count, const void* values) {
    return cudnnBackendSetAttribute(d_, name, type, count, values);
  }
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const Backend& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The uids of the graph's tensors in the variant pack.
enum Uid : int64_t { kX = 1, kW = 2, kY = 3, kSum = 4, kSumSq = 5 };

struct StatsPlan {
  bool supported = false;
  std::string why;  // unsupported: the step that failed and cuDNN's status
  std::vector<std::unique_ptr<Backend>> keep;  // every descriptor the plan refers to
  Backend* plan = nullptr;
  int64_t workspace = 0;
};

// Logical [d0, d1, d2, d3] = [N, C, H, W] (or [K, C/g, R, S]) strides of a packed tensor stored
// in `layout`.
std::array<int64_t, 4> strides(Layout layout, int64_t c, int64_t h, int64_t w) {
  if (layout == Layout::nchw) return {c * h * w, h * w, w, 1};
  return {h * w * c, 1, w * c, c};  // NHWC / KRSC
}

// Builds the graph for one problem; on the first failing step records why and returns.
void build(StatsPlan& p, cudnnHandle_t handle, DType t, const ConvGeometry& g) {
  const auto fail = [&](const char* step, cudnnStatus_t st) {
    p.why = std::string(step) + ": " + cudnnGetErrorString(st);
    return false;
  };
  const auto add = [&](cudnnBackendDescriptorType_t type) -> Backend& {
    p.keep.push_back(std::make_unique<Backend>(type));
    return *p.keep.back();
  };
  if (t == DType::f32) {  // the fused engines run f32 on TF32 tensor cores: not exact f32
    p.why = "f32 is not fused (cuDNN's fused engines compute it in TF32); use bf16 or f16";
    return;
  }
  const cudnnDataType_t io = cudnn_dtype(t), f32 = CUDNN_DATA_FLOAT;
  const auto tensor = [&](int64_t uid, cudnnDataType_t dt, std::array<int64_t, 4> dims,
                          std::array<int64_t, 4> str, Backend*& out) {
    Backend& d = add(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    cudnnStatus_t st = d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    if (st == CUDNN_STATUS_SUCCESS)
      st = d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    if (st == CUDNN_STATUS_SUCCESS)
      st = d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (st == CUDNN_STATUS_SUCCESS) st = d.finalize();
    out = &d;
    return st == CUDNN_STATUS_SUCCESS || fail("tensor descriptor", st);
  };
  Backend *x = nullptr, *w = nullptr, *y = nullptr, *sum = nullptr, *sq = nullptr;
  if (!tensor(kX, io, {g.n, g.c, g.h, g.w}, strides(g.layout, g.c, g.h, g.w), x) ||
      !tensor(kW, io, {g.k, g.cg, g.r, g.s}, strides(g.layout, g.cg, g.r, g.s), w) ||
      !tensor(kY, io, {g.n, g.k, g.oh, g.ow}, strides(g.layout, g.k, g.oh, g.ow), y) ||
      !tensor(kSum, f32, {1, g.k, 1, 1}, strides(g.layout, g.k, 1, 1), sum) ||
      !tensor(kSumSq, f32, {1, g.k, 1, 1}, strides(g.layout, g.k, 1, 1), sq))
    return;

  Backend& conv = add(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  {
    const int64_t dims = 2;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const std::array<int64_t, 2> dil{g.dh, g.dw}, str{g.sh, g.sw}, pad{g.ph, g.pw};
    cudnnStatus_t st = conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    if (st == CUDNN_STATUS_SUCCESS)
      st = conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    if (st == CUDNN_STATUS_SUCCESS)
      st = conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    if (st == CUDNN_STATUS_SUCCESS)
      st = conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data());
    if (st == CUDNN_STATUS_SUCCESS) st = conv.finalize();
    if (st != CUDNN_STATUS_SUCCESS) return (void)fail("convolution descriptor", st);
  }

  Backend& fwd = add(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  {
    const float alpha = 1.0f, beta = 0.0f;
    cudnnStatus_t st = fwd.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, *x);
    if (st == CUDNN_STATUS_SUCCESS) st = fwd.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, *w);
    if (st == CUDNN_STATUS_SUCCESS) st = fwd.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, *y);
    if (st == CUDNN_STATUS_SUCCESS)
      st = fwd.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
    if (st == CUDNN_STATUS_SUCCESS)
      st = fwd.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    if (st == CUDNN_STATUS_SUCCESS)
      st = fwd.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    if (st == CUDNN_STATUS_SUCCESS) st = fwd.finalize();
    if (st != CUDNN_STATUS_SUCCESS) return (void)fail("convolution forward operation", st);
  }

  Backend& stats = add(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  {
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnStatus_t st =
        stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    if (st == CUDNN_STATUS_SUCCESS)
      st = stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    if (st == CUDNN_STATUS_SUCCESS) st = stats.set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, *y);
    if (st == CUDNN_STATUS_SUCCESS) st = stats.set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, *sum);
    if (st == CUDNN_STATUS_SUCCESS) st = stats.set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, *sq);
    if (st == CUDNN_STATUS_SUCCESS) st = stats.finalize();
    if (st != CUDNN_STATUS_SUCCESS) return (void)fail("GenStats operation", st);
  }

  Backend& graph = add(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  {
    const std::array<cudnnBackendDescriptor_t, 2> ops{fwd.get(), stats.get()};
    cudnnStatus_t st = graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    if (st == CUDNN_STATUS_SUCCESS)
      st = graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, ops.data());
    if (st == CUDNN_STATUS_SUCCESS) st = graph.finalize();
    if (st != CUDNN_STATUS_SUCCESS) return (void)fail("operation graph", st);
  }

  // cuDNN's ranking of engine configurations (mode A: its fast heuristic), then the first that
  // makes an execution plan.
  Backend& heur = add(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  {
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cudnnStatus_t st = heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    if (st == CUDNN_STATUS_SUCCESS)
      st = heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (st == CUDNN_STATUS_SUCCESS) st = heur.finalize();
    if (st != CUDNN_STATUS_SUCCESS) return (void)fail("engine heuristics", st);
  }
  constexpr int kMaxConfigs = 16;
  std::vector<Backend*> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < kMaxConfigs; ++i) {
    configs.push_back(&add(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t count = 0;
  cudnnStatus_t st =
      cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxConfigs, &count, raw.data());
  if (st != CUDNN_STATUS_SUCCESS) return (void)fail("engine heuristics results", st);
  if (count == 0) {
    p.why = "cuDNN's heuristics list no engine for this graph";
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    Backend& plan = add(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    const cudnnBackendDescriptor_t cfg = raw[static_cast<size_t>(i)];
    st = plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    if (st == CUDNN_STATUS_SUCCESS)
      st =
          plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (st == CUDNN_STATUS_SUCCESS) st = plan.finalize();
    if (st != CUDNN_STATUS_SUCCESS) {
      fail("execution plan (every engine configuration cuDNN listed)", st);
      continue;
    }
    int64_t ws = 0, got = 0;
    st = cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                  CUDNN_TYPE_INT64, 1, &got, &ws);
    if (st != CUDNN_STATUS_SUCCESS) {
      fail("execution plan workspace size", st);
      continue;
    }
    p.plan = &plan;
    p.workspace = ws;
    p.supported = true;
    p.why.clear();
    return;
  }
}

class StatsPlans {
 public:
  // The plan of one problem, built on first use under the device's cuDNN lease.
  StatsPlan& get(const CudnnLease& lease, int device, DType t, const ConvGeometry& g) {
    const ConvProblem key = ConvProblem::of(device, t, g);
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<StatsPlan>& p = plans_[key];
    if (!p) {
      p = std::make_unique<StatsPlan>();
      build(*p, lease.handle(), t, g);
    }
    return *p;
  }

 private:
  std::mutex mu_;
  std::map<ConvProblem, std::unique_ptr<StatsPlan>> plans_;
};

StatsPlans& stats_plans() {
  static auto* p = new StatsPlans();  // never destroyed: descriptors outlive static teardown
  return *p;
}

}  // namespace

std::string conv2d_forward_stats_unsupported(const Tensor& x, const Tensor& w,
                                             const Conv2dParams& p) {
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  const ConvGeometry g = detail::conv_geometry(x.shape(), w.shape(), p);
  const CudnnLease lease(d);
  const StatsPlan& plan = stats_plans().get(lease, d.index, x.dtype(), g);
  return plan.supported ? std::string() : plan.why;
}

void conv2d_forward_stats(const Tensor& y, const Tensor& sum, const Tensor& sum_sq, const Tensor& x,
                          const Tensor& w, const Conv2dParams& p) {
  const Device d = x.device();
  const core::DeviceScope scope(d.index);
  const ConvGeometry g = detail::conv_geometry(x.shape(), w.shape(), p);
  const CudnnLease lease(d);
  StatsPlan& plan = stats_plans().get(lease, d.index, x.dtype(), g);
  STOKER_CHECK(plan.supported, "ops::conv2d_forward_stats: cuDNN has no fused engine for x ",
               x.str(), " and w ", w.str(), " on ", d.str(), " (", plan.why,
               "); ask ops::conv2d_forward_stats_supported first and run conv2d_forward and the "
               "statistics apart where it says no");
  for (const Tensor* t : {&y, &sum, &sum_sq, &x, &w})
    STOKER_CHECK(reinterpret_cast<uintptr_t>(t->data()) % 16 == 0,
                 "ops::conv2d_forward_stats: ", t->str(),
                 " does not start on a 16-byte boundary, which the fused graph was planned for; "
                 "pass whole tensors (not offset views)");
  const Tensor ws = plan.workspace > 0 ? Tensor::empty({plan.workspace}, DType::u8, d) : Tensor();
  const std::array<int64_t, 5> uids{kX, kW, kY, kSum, kSumSq};
  std::array<void*, 5> ptrs{x.data(), w.data(), y.data(), sum.data(), sum_sq.data()};
  void* wsp = ws.defined() ? ws.data() : nullptr;
  Backend pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  STOKER_CUDNN_CHECK(
      pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids.data()));
  STOKER_CUDNN_CHECK(
      pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs.data()));
  STOKER_CUDNN_CHECK(pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp));
  STOKER_CUDNN_CHECK(pack.finalize());
  STOKER_CUDNN_CHECK(cudnnBackendExecute(lease.handle(), plan.plan->get(), pack.get()));
}

STOKER_REGISTER_STUB(conv2d_forward_stats_unsupported, conv2d_forward_stats_unsupported);
STOKER_REGISTER_STUB(conv2d_forward_stats, conv2d_forward_stats);

}  // namespace stoker::ops::cuda
