// CUDA GEMM through cuBLASLt, with stoker's row-major semantics.
//
// The trick: a row-major [R, C] matrix is, byte for byte, a column-major [C, R] matrix — its
// transpose. So row-major C = op(A) op(B) is computed as the column-major product
// C^T = op(B)^T op(A)^T: B is passed as cuBLASLt's first operand and A as its second, each with
// its own transpose flag and its stored shape, and no data moves.
//
// Costs kept off the per-call path: one cuBLASLt handle per device; a 32 MiB workspace per
// (device, stream), since two streams must never share one while both may run; and a cache of
// plans (descriptors + the chosen algorithm) keyed by everything the heuristic sees: shapes,
// transposes, dtypes, compute type and the pointers' alignment. All three are created on first
// use and live until exit (never destroyed during static teardown). Thread-safe.
//
// Autotuning: cuBLASLt's heuristic's first pick is not always its fastest (on the H200 its
// first pick for bf16 8192^3 ran 2.3 % slower than its second, and the MLP step gained ~1 %).
// So a new plan asks
// for up to kCandidates algorithms and times each on the call's own inputs (writing into a
// scratch output, so C is untouched), keeping the fastest. This costs a few milliseconds and
// host syncs once per shape — the warm-up step — and never during a CUDA-graph capture (a
// shape first seen while capturing takes the heuristic's pick). set_gemm_autotune(false) or
// STOKER_GEMM_AUTOTUNE=0 keeps the heuristic's first pick.
//
// Epilogues: a bias (CUBLASLT_EPILOGUE_BIAS), gelu (GELU_AUX / GELU_AUX_BIAS: C = gelu(AB +
// bias), aux = AB + bias), dgelu (DGELU: C = AB gelu'(aux)) and a bias gradient (BGRADB: the
// sums of our A = dy over K, beside the weight gradient), each part of the plan key with the
// alignment of the vectors and of aux. A plan takes the most fused epilogue cuBLASLt offers an
// algorithm for and runs the rest as separate passes (add_bias, gelu_forward, gelu_backward,
// bias_grad), so every combination works; the GELU epilogues only once a check on the device
// has shown that cuBLASLt's GELU is the tanh form ours is (see gelu_epilogue_is_tanh), the bias
// gradient only once a check has shown that BGRADB sums what we expect (bgrad_epilogue_sums_dy).
//
// FP8 (ops::gemm_fp8): the same plans with FP8 operand types (A and B may differ: E4M3 x E5M2)
// and the operands' scale_inv as cuBLASLt's A/B scale pointers, set per call like the bias.
// FP8 kernels exist only for cuBLASLt's "TN" layout (our trans_a = false, trans_b = true), which
// ops::gemm_fp8 guarantees; a shape cuBLASLt has no FP8 algorithm for makes an unusable plan
// (remembered, so the heuristic is asked once) and the caller runs the reference composition.
//
// Batched (ops::gemm_batched): the same plan with a batch count and strided batch offsets on
// the three matrix layouts, so one call runs every matrix; batch count and strides are part of
// the plan key (the autotuner times the whole batched call, whose best kernel differs from the
// single matrix's).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <compare>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/cuda_util.h"
#include "ops/activation_stubs.h"
#include "ops/attention_stubs.h"
#include "ops/copy_stubs.h"
#include "ops/fp8_stubs.h"
#include "ops/gemm_stubs.h"
#include "ops/linear_stubs.h"
#include "ops/nn_math.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kMaxCandidates = 64;

// Tuning knobs read once from the environment (for experiments; the defaults are the measured
// choice): STOKER_GEMM_CANDIDATES (algorithms the autotuner times, 1..64, default 8) and
// STOKER_GEMM_WORKSPACE_MIB (cuBLASLt workspace per stream, default 32).
int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const int x = std::atoi(v);
  return x < lo ? lo : (x > hi ? hi : x);
}
const int kCandidates = env_int("STOKER_GEMM_CANDIDATES", 8, 1, kMaxCandidates);
const size_t kWorkspaceBytes =
    static_cast<size_t>(env_int("STOKER_GEMM_WORKSPACE_MIB", 32, 1, 4096)) << 20;
constexpr int kTimedRuns = 3;
constexpr int kMaxDevices = 64;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      break;
  }
  STOKER_THROW("internal: gemm got non-float dtype ", dtype_name(t));
}

// Largest power of two (at most 256) that divides the address — and, for a batch, the byte
// distance between its matrices: what cuBLASLt may assume of every matrix's start.
uint32_t alignment_of(const void* p, uint64_t batch_stride_bytes = 0) {
  const auto a = reinterpret_cast<uintptr_t>(p) | batch_stride_bytes;
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  int device;
  int64_t m, n, k;
  bool trans_a, trans_b;
  int ab_type, c_type, compute_type;  // ab_type: A's (and B's, unless FP8 gives B its own)
  int b_type;                         // B's type: ab_type except for FP8 operands
  uint32_t align_a, align_b, align_c;
  int bias_type;        // cudaDataType_t of the bias asked for in the epilogue, -1: none
  bool bias_grad;       // a bias gradient (f32 [m]) asked for
  uint32_t align_bias;  // the bias's or the bias gradient's alignment; 0: neither
  int epilogue;         // GemmEpilogue asked for (gelu, dgelu: an aux matrix of C's type and shape)
  uint32_t align_aux;   // the aux pointer's alignment (the heuristic reads it); 0: no aux
  int64_t batch;        // matrices per call (1: ops::gemm); the strides below are 0 then
  int64_t stride_a, stride_b, stride_c;  // elements between consecutive matrices
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr;   // our B
  cublasLtMatrixLayout_t second = nullptr;  // our A
  cublasLtMatrixLayout_t out = nullptr;     // our C (also D)
  cublasLtMatmulAlgo_t algo{};
  // What the descriptor's epilogue does: the bias (add_bias otherwise), the GELU (writing aux;
  // otherwise the GEMM writes the pre-activation into aux and gelu_forward follows) and the
  // GELU's derivative (otherwise gelu_backward follows) and the bias gradient (otherwise
  // bias_grad follows). Each false when not asked for or when
  // cuBLASLt offered no algorithm for an epilogue that has it (see make_plan).
  bool fused_bias = false;
  bool fused_gelu = false;
  bool fused_dgelu = false;
  bool fused_bias_grad = false;
  bool usable = true;  // false: an FP8 shape cuBLASLt has no algorithm for (see make_plan)
  std::mutex mu;       // the bias and aux pointers are descriptor attributes, set per call
};

struct Resources {
  cublasLtHandle_t handle;
  void* workspace;
  Plan* plan;
};

// What the autotuner may run: the call's inputs and stream.
struct TuneInputs {
  const void* a;
  const void* b;
  size_t c_bytes;
  cudaStream_t stream;
  const void* bias;  // nullptr: none
  const void* aux;   // nullptr: none (written by a GELU_AUX epilogue: fine, the call rewrites it)
  bool gelu_is_tanh = false;   // set by Cache::get: the GELU epilogues may be used
  void* bias_grad = nullptr;   // nullptr: none (written by BGRADB: fine, the call rewrites it)
  bool bgrad_sums_dy = false;  // set by Cache::get: the BGRADB epilogue may be used
};

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

// Times `algo` on scratch output memory: the mean of kTimedRuns runs after one warm-up run, in
// milliseconds; infinity when the algorithm fails to run.
float time_algo(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                const TuneInputs& in, void* scratch_c, void* workspace, cudaEvent_t start,
                cudaEvent_t stop) {
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    return cublasLtMatmul(handle, plan.op, &alpha, in.b, plan.first, in.a, plan.second, &beta,
                          scratch_c, plan.out, scratch_c, plan.out, &algo, workspace,
                          kWorkspaceBytes, in.stream);
  };
  if (run() != CUBLAS_STATUS_SUCCESS) return std::numeric_limits<float>::infinity();
  cudaEventRecord(start, in.stream);
  for (int i = 0; i < kTimedRuns; ++i)
    if (run() != CUBLAS_STATUS_SUCCESS) return std::numeric_limits<float>::infinity();
  cudaEventRecord(stop, in.stream);
  core::note_host_sync();
  if (cudaEventSynchronize(stop) != cudaSuccess) return std::numeric_limits<float>::infinity();
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  return ms / kTimedRuns;
}

// The one-off matmuls of the device checks below: D = A B with `op`, once per beta, on the
// heuristic's first algorithm (no plan, no autotuning). False when cuBLASLt offers none
// (`offered` says which) or a call fails.
bool run_check_matmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                      const void* a, cublasLtMatrixLayout_t lb, const void* b,
                      cublasLtMatrixLayout_t ld, void* d, std::initializer_list<float> betas,
                      void* workspace, cudaStream_t stream, bool* offered = nullptr) {
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const uint64_t ws = kWorkspaceBytes;
  bool ok = cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof(ws)) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, ld, ld, pref, 1, &result, &found) ==
                CUBLAS_STATUS_SUCCESS &&
            found > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (offered != nullptr) *offered = ok;
  const float alpha = 1.0f;
  for (const float& beta : betas)
    ok = ok && cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &result.algo,
                              workspace, kWorkspaceBytes, stream) == CUBLAS_STATUS_SUCCESS;
  return ok;
}

// Whether cuBLASLt's GELU epilogues compute the tanh-form GELU that ops::gelu_forward and
// gelu_backward compute (the documentation does not say; see make_plan). Runs GELU_AUX and
// DGELU once on 64 known inputs in [-6, 6] (fp32: the product is exactly the input) and
// compares with the tanh form and the erf form: the tanh form must be matched to 1e-4 and at
// least four times more closely than the erf form (they differ by up to ~5e-4 there). Any
// failure to run says false: the unfused composition is always correct. Synchronizes the
// stream; never called while it is capturing.
bool gelu_epilogue_is_tanh(cublasLtHandle_t handle, void* workspace, cudaStream_t stream) {
  constexpr int m = 64;
  std::array<float, m> x{}, ones{};
  for (int i = 0; i < m; ++i) {
    x[i] = -6.0f + 12.0f * static_cast<float>(i) / (m - 1);
    ones[i] = 1.0f;
  }
  float* buf = nullptr;  // x | ones | d | aux
  if (cudaMalloc(&buf, 4 * m * sizeof(float)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  float* const dx = buf;
  float* const dones = buf + m;
  float* const dd = buf + 2 * m;
  float* dAux = buf + 3 * m;
  bool ok = cudaMemcpyAsync(dx, x.data(), m * sizeof(float), cudaMemcpyHostToDevice, stream) ==
                cudaSuccess &&
            cudaMemcpyAsync(dones, ones.data(), m * sizeof(float), cudaMemcpyHostToDevice,
                            stream) == cudaSuccess;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  ok = ok && cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, 1, m) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 1, 1, 1) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, 1, m) == CUBLAS_STATUS_SUCCESS;
  std::array<double, 2> err_tanh{}, err_erf{};
  for (int pass = 0; ok && pass < 2; ++pass) {
    // pass 0: D = GELU(x * 1), aux = x; pass 1: D = (1 * 1) GELU'(aux), aux = x.
    const cublasLtEpilogue_t epilogue =
        pass == 0 ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_DGELU;
    float* const a = pass == 0 ? dx : dones;
    void* const aux = pass == 0 ? static_cast<void*>(dAux) : static_cast<void*>(dx);
    const int64_t aux_ld = m;
    cublasLtMatmulDesc_t op = nullptr;
    ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok = ok &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                        sizeof(epilogue)) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                        sizeof(aux)) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                        sizeof(aux_ld)) == CUBLAS_STATUS_SUCCESS;
    ok = ok && run_check_matmul(handle, op, la, a, lb, dones, ld, dd, {0.0f}, workspace, stream);
    std::array<float, m> out{};
    ok = ok &&
         cudaMemcpyAsync(out.data(), dd, m * sizeof(float), cudaMemcpyDeviceToHost, stream) ==
             cudaSuccess &&
         cudaStreamSynchronize(stream) == cudaSuccess;
    if (op) cublasLtMatmulDescDestroy(op);
    for (int i = 0; ok && i < m; ++i) {
      const double v = x[i];
      const double erf_form = pass == 0 ? 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))
                                        : 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) +
                                              v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
      const double tanh_form = pass == 0 ? detail::gelu(x[i]) : detail::gelu_grad(x[i]);
      err_tanh[pass] = std::max(err_tanh[pass], std::fabs(out[i] - tanh_form));
      err_erf[pass] = std::max(err_erf[pass], std::fabs(out[i] - erf_form));
    }
  }
  core::note_host_sync();
  for (auto l : {la, lb, ld})
    if (l) cublasLtMatrixLayoutDestroy(l);
  cudaFree(buf);
  cudaGetLastError();  // a failed launch must not poison later calls
  for (int pass = 0; ok && pass < 2; ++pass)
    ok = err_tanh[pass] <= 1e-4 && 4.0 * err_tanh[pass] < err_erf[pass];
  // Said once per device when the fusion is off (a speed matter, not a correctness one), and
  // always with STOKER_GEMM_VERBOSE=1.
  static const bool verbose = env_int("STOKER_GEMM_VERBOSE", 0, 0, 1) == 1;
  if (verbose || !ok)
    std::fprintf(stderr,
                 "stoker gemm: cuBLASLt GELU epilogue max |diff| vs the tanh form %.3g, vs the "
                 "erf form %.3g; DGELU %.3g, %.3g: %s\n",
                 err_tanh[0], err_erf[0], err_tanh[1], err_erf[1],
                 ok ? "the tanh form, the gelu/dgelu epilogues are fused"
                    : "not the tanh form (or it did not run): the gelu/dgelu epilogues run as "
                      "separate passes");
  return ok;
}

// Whether cuBLASLt's BGRADB epilogue, in the weight-gradient layout stoker uses (our C [m, n]
// f32 = A^T B with A = dy [k, m] and B = x [k, n] bf16: cuBLASLt's first operand x untransposed,
// its second dy transposed), writes sum_k dy[k, i] into the f32 bias vector and leaves the
// product as it is, with beta 0 and with beta 1 (a later micro-batch). The documentation says "bias
// gradient based on the input matrix B ... the number of columns of D", which is our dy and our m,
// but the mapping through the row-major trick is easy to get wrong and a wrong bias gradient trains
// quietly; so it is checked once per device on small integers (exact in bf16 and in fp32 sums). Any
// failure to run says false: the separate bias_grad pass is always correct. Synchronizes; never
// called while capturing.
bool bgrad_epilogue_sums_dy(cublasLtHandle_t handle, void* workspace, cudaStream_t stream) {
  constexpr int m = 16, n = 8, k = 32;
  std::array<uint16_t, k * m> dy{};
  std::array<uint16_t, k * n> x{};
  std::array<float, k * m> dy_f{};
  std::array<float, k * n> x_f{};
  const auto bf16 = [](float f) {  // exact for these small integers
    uint32_t u = 0;
    std::memcpy(&u, &f, sizeof(u));
    return static_cast<uint16_t>(u >> 16);
  };
  for (int r = 0; r < k; ++r) {
    for (int i = 0; i < m; ++i) {
      dy_f[r * m + i] = static_cast<float>((r * 7 + i * 3) % 9 - 4);
      dy[r * m + i] = bf16(dy_f[r * m + i]);
    }
    for (int j = 0; j < n; ++j) {
      x_f[r * n + j] = static_cast<float>((r + 2 * j) % 5 - 2);
      x[r * n + j] = bf16(x_f[r * n + j]);
    }
  }
  void* buf = nullptr;  // dy | x | d | bias gradient
  const size_t dy_bytes = sizeof(dy), x_bytes = sizeof(x), d_bytes = m * n * sizeof(float);
  if (cudaMalloc(&buf, dy_bytes + x_bytes + d_bytes + m * sizeof(float)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  char* const base = static_cast<char*>(buf);
  void* const d_dy = base;
  void* const d_x = base + dy_bytes;
  void* const d_d = base + dy_bytes + x_bytes;
  void* d_bias = base + dy_bytes + x_bytes + d_bytes;
  bool ok =
      cudaMemcpyAsync(d_dy, dy.data(), dy_bytes, cudaMemcpyHostToDevice, stream) == cudaSuccess &&
      cudaMemcpyAsync(d_x, x.data(), x_bytes, cudaMemcpyHostToDevice, stream) == cudaSuccess;
  cublasLtMatrixLayout_t lx = nullptr, ldy = nullptr, ld = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  ok = ok && cublasLtMatrixLayoutCreate(&lx, CUDA_R_16BF, n, k, n) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&ldy, CUDA_R_16BF, m, k, m) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, n, m, n) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  const cublasOperation_t op_n = CUBLAS_OP_N, op_t = CUBLAS_OP_T;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BGRADB;
  const cudaDataType_t bias_type = CUDA_R_32F;
  ok = ok &&
       cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_n, sizeof(op_n)) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_t, sizeof(op_t)) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                      sizeof(epilogue)) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                      sizeof(bias_type)) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d_bias,
                                      sizeof(d_bias)) == CUBLAS_STATUS_SUCCESS;
  // Twice: beta 0, then beta 1 as a later micro-batch accumulates dW (so D ends at twice the
  // product), with the bias gradient written, not accumulated, each time.
  bool offered = false;
  ok = ok && run_check_matmul(handle, op, lx, d_x, ldy, d_dy, ld, d_d, {0.0f, 1.0f}, workspace,
                              stream, &offered);
  std::array<float, m * n> d{};
  std::array<float, m> bias{};
  ok = ok &&
       cudaMemcpyAsync(d.data(), d_d, d_bytes, cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
       cudaMemcpyAsync(bias.data(), d_bias, sizeof(bias), cudaMemcpyDeviceToHost, stream) ==
           cudaSuccess &&
       cudaStreamSynchronize(stream) == cudaSuccess;
  core::note_host_sync();
  if (op) cublasLtMatmulDescDestroy(op);
  for (auto l : {lx, ldy, ld})
    if (l) cublasLtMatrixLayoutDestroy(l);
  cudaFree(buf);
  cudaGetLastError();  // a failed launch must not poison later calls
  double bias_err = 0.0, d_err = 0.0;
  for (int i = 0; ok && i < m; ++i) {
    double sum = 0.0;
    for (int r = 0; r < k; ++r) sum += dy_f[r * m + i];
    bias_err = std::max(bias_err, std::fabs(bias[i] - sum));
    for (int j = 0; j < n; ++j) {  // our C[i, j] is column-major D's element (j, i)
      double dot = 0.0;
      for (int r = 0; r < k; ++r) dot += dy_f[r * m + i] * x_f[r * n + j];
      d_err = std::max(d_err, std::fabs(d[i * n + j] - 2.0 * dot));
    }
  }
  ok = ok && bias_err == 0.0 && d_err == 0.0;
  static const bool verbose = env_int("STOKER_GEMM_VERBOSE", 0, 0, 1) == 1;
  if (verbose || !ok)
    std::fprintf(stderr,
                 "stoker gemm: cuBLASLt BGRADB epilogue: bias gradient max |diff| %.3g, product "
                 "%.3g%s: %s\n",
                 bias_err, d_err, offered ? "" : " (no algorithm offered)",
                 ok ? "the bias gradient is fused into the weight-gradient GEMM"
                    : "the bias gradient runs as its own pass");
  return ok;
}

class Cache {
 public:
  // Everything one call needs, under one lock; created on first use. The caller holds a
  // DeviceScope for key.device.
  Resources get(const PlanKey& key, const TuneInputs& in, DType ab, DType c, bool fp8) {
    const cudaStream_t stream = in.stream;
    std::lock_guard<std::mutex> lock(mu_);
    cublasLtHandle_t& handle = handles_.at(key.device);
    if (!handle) STOKER_CUBLAS_CHECK(cublasLtCreate(&handle));
    void*& workspace = workspaces_[{key.device, stream}];
    if (!workspace) STOKER_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
    std::unique_ptr<Plan>& plan = plans_[key];
    if (!plan) {
      TuneInputs tune = in;
      if (key.epilogue != static_cast<int>(GemmEpilogue::none)) {
        // -1: not checked yet. The check synchronizes, so a plan first made while the stream is
        // capturing a CUDA graph stays unfused (as it stays untuned); a warm-up step before the
        // capture makes the plans that the captured steps use.
        int& verdict = gelu_tanh_.at(key.device);
        if (verdict < 0 && !stream_is_capturing(stream))
          verdict = gelu_epilogue_is_tanh(handle, workspace, stream) ? 1 : 0;
        tune.gelu_is_tanh = verdict == 1;
      }
      if (key.bias_grad) {  // the same once-per-device pattern for BGRADB
        int& verdict = bgrad_ok_.at(key.device);
        if (verdict < 0 && !stream_is_capturing(stream))
          verdict = bgrad_epilogue_sums_dy(handle, workspace, stream) ? 1 : 0;
        tune.bgrad_sums_dy = verdict == 1;
      }
      plan = make_plan(key, handle, ab, c, tune, workspace, fp8);
    }
    return {handle, workspace, plan.get()};
  }

 private:
  static std::unique_ptr<Plan> make_plan(const PlanKey& key, cublasLtHandle_t handle, DType ab,
                                         DType c, const TuneInputs& in, void* workspace_ptr,
                                         bool fp8) {
    auto plan = std::make_unique<Plan>();
    const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto compute = static_cast<cublasComputeType_t>(key.compute_type);
    auto make_op = [&] {
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                         &op_first, sizeof(op_first)));
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                         &op_second, sizeof(op_second)));
      const cublasLtPointerMode_t host_scalars = CUBLASLT_POINTER_MODE_HOST;
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &host_scalars, sizeof(host_scalars)));
    };
    make_op();

    // Stored (column-major) shapes: row-major B [K, N] is column-major N x K, and so on.
    const auto a_type = static_cast<cudaDataType_t>(key.ab_type);
    const auto b_type = static_cast<cudaDataType_t>(key.b_type);
    const uint64_t first_rows = key.trans_b ? key.k : key.n;
    const uint64_t first_cols = key.trans_b ? key.n : key.k;
    const uint64_t second_rows = key.trans_a ? key.m : key.k;
    const uint64_t second_cols = key.trans_a ? key.k : key.m;
    STOKER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->first, b_type, first_rows, first_cols,
                                                   static_cast<int64_t>(first_rows)));
    STOKER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->second, a_type, second_rows, second_cols,
                                                   static_cast<int64_t>(second_rows)));
    STOKER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
        &plan->out, static_cast<cudaDataType_t>(key.c_type), key.n, key.m, key.n));
    if (key.batch > 1) {
      const int32_t count = static_cast<int32_t>(key.batch);
      const auto set_batch = [&](cublasLtMatrixLayout_t layout, int64_t stride) {
        STOKER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        STOKER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
      };
      set_batch(plan->first, key.stride_b);
      set_batch(plan->second, key.stride_a);
      set_batch(plan->out, key.stride_c);
    }

    cublasLtMatmulPreference_t pref = nullptr;
    STOKER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t workspace = kWorkspaceBytes;
    const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
      STOKER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
    };
    set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // first operand = B
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
    // Split-K partial sums only in the compute type (fp32): the in-place and output-type
    // reduction schemes add the partial products in the output dtype, which for a bf16/f16 C
    // loses several ulps (seen: a candidate the autotuner timed fastest put 3 % of a
    // bf16 [1023, 257] product 8 ulps off).
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    set_pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);

    std::array<cublasLtMatmulHeuristicResult_t, kMaxCandidates> results{};
    int found = 0;
    const bool tune = gemm_autotune() && !stream_is_capturing(in.stream);
    auto query = [&] {
      return cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->first, plan->second, plan->out,
                                            plan->out, pref, tune ? kCandidates : 1, results.data(),
                                            &found);
    };
    // The epilogue: the first of the candidates (most fused first) for which cuBLASLt offers an
    // algorithm; DEFAULT (no epilogue attribute at all) last. What the chosen one leaves out
    // runs as separate passes after the GEMM (run_gemm). The bias vector is added in fp32
    // before D is rounded (D's rows are our columns); cuBLASLt takes a bias in D's dtype (or f32
    // with an f32 D), any other combination is refused by the heuristic.
    //
    // Which GELU: cuBLASLt's documentation (cublasLt.h of CUDA 13.0, cublasLtEpilogue_t;
    // docs.nvidia.com/cuda/cublas, "cublasLtEpilogue_t") says only "apply GELU point-wise
    // transform to the results (x:=GELU(x))" and names no formula. Ours is the tanh form
    // (PyTorch's approximate="tanh"); the two forms differ by up to ~5e-4, which a bf16 output
    // can show. So a GELU epilogue is used only after a one-time check on the device that the
    // epilogue's GELU and DGELU are the tanh form (gelu_epilogue_is_tanh below); otherwise the
    // unfused composition runs.
    const bool has_bias = key.bias_type >= 0;
    const bool has_aux = key.epilogue != static_cast<int>(GemmEpilogue::none);
    // The aux matrix is column-major n x m (our [m, n]) with leading dimension n, which cuBLASLt
    // requires to be a multiple of 8 (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD in cublasLt.h).
    const bool aux_ok = has_aux && key.n % 8 == 0 && in.gelu_is_tanh;
    struct Candidate {
      cublasLtEpilogue_t epilogue;
      bool bias, gelu, dgelu, bias_grad;
    };
    std::array<Candidate, 3> candidates{};
    int count = 0;
    if (key.epilogue == static_cast<int>(GemmEpilogue::gelu) && aux_ok)
      candidates[count++] = {
          has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, has_bias, true,
          false, false};
    if (key.epilogue == static_cast<int>(GemmEpilogue::dgelu) && aux_ok)
      candidates[count++] = {CUBLASLT_EPILOGUE_DGELU, false, false, true, false};
    if (has_bias) candidates[count++] = {CUBLASLT_EPILOGUE_BIAS, true, false, false, false};
    // The bias gradient's type is C's (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER), so only
    // an f32 C (the weight gradient) gives the f32 sums stoker keeps.
    if (key.bias_grad && key.c_type == CUDA_R_32F && in.bgrad_sums_dy)
      candidates[count++] = {CUBLASLT_EPILOGUE_BGRADB, false, false, false, true};
    bool chosen = false;
    for (int i = 0; i < count && !chosen; ++i) {
      const Candidate& cand = candidates[i];
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                         &cand.epilogue, sizeof(cand.epilogue)));
      if (cand.bias_grad) {
        const cudaDataType_t f32 = CUDA_R_32F;
        STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof(f32)));
        STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &in.bias_grad, sizeof(in.bias_grad)));
      }
      if (cand.bias) {
        const auto bias_type = static_cast<cudaDataType_t>(key.bias_type);
        STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &in.bias, sizeof(in.bias)));
      }
      if (cand.gelu || cand.dgelu) {
        const int64_t ld = key.n;
        STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &in.aux, sizeof(in.aux)));
        STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
      }
      chosen = query() == CUBLAS_STATUS_SUCCESS && found > 0;
      if (chosen) {
        plan->fused_bias = cand.bias;
        plan->fused_gelu = cand.gelu;
        plan->fused_dgelu = cand.dgelu;
        plan->fused_bias_grad = cand.bias_grad;
      } else {  // a clean descriptor: no epilogue attributes left behind
        cublasLtMatmulDescDestroy(plan->op);
        make_op();
      }
    }
    const cublasStatus_t status = chosen ? CUBLAS_STATUS_SUCCESS : query();
    cublasLtMatmulPreferenceDestroy(pref);
    if (fp8 && (status != CUBLAS_STATUS_SUCCESS || found == 0)) {
      plan->usable = false;  // the caller runs the reference composition
      return plan;
    }
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
      STOKER_THROW("gemm: cuBLASLt found no algorithm for ", key.batch > 1 ? "a batch of " : "",
                   key.batch > 1 ? std::to_string(key.batch) + " " : "", "C ", dtype_name(c), "[",
                   key.m, ", ", key.n, "] = op(A) ", dtype_name(ab), "[", key.m, ", ", key.k, "]",
                   key.trans_a ? " (A transposed)" : "", " x op(B) ", dtype_name(ab), "[", key.k,
                   ", ", key.n, "]", key.trans_b ? " (B transposed)" : "", " (pointer alignment A ",
                   key.align_a, " B ", key.align_b, " C ", key.align_c, " bytes, compute ",
                   compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? "fp32 with TF32" : "fp32", ")");
    }
    STOKER_CUBLAS_CHECK(status);
    plan->algo = results[0].algo;
    if (tune && found > 1)
      plan->algo = fastest(*plan, handle, results.data(), found, in, workspace_ptr);
    return plan;
  }

  // The candidate with the lowest measured time (the heuristic's first on ties or failures).
  static cublasLtMatmulAlgo_t fastest(const Plan& plan, cublasLtHandle_t handle,
                                      const cublasLtMatmulHeuristicResult_t* results, int found,
                                      const TuneInputs& in, void* workspace) {
    void* scratch = nullptr;
    if (cudaMallocAsync(&scratch, in.c_bytes, in.stream) != cudaSuccess) {
      cudaGetLastError();  // no memory to spare for tuning: keep the heuristic's pick
      return results[0].algo;
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    int best = 0;
    float best_ms = std::numeric_limits<float>::infinity();
    static const bool verbose = env_int("STOKER_GEMM_VERBOSE", 0, 0, 1) == 1;
    for (int i = 0; i < found; ++i) {
      const float ms =
          time_algo(handle, plan, results[i].algo, in, scratch, workspace, start, stop);
      if (verbose)
        std::fprintf(stderr,
                     "stoker gemm autotune: candidate %d of %d: %.4f ms (workspace %zu B)\n", i,
                     found, ms, results[i].workspaceSize);
      if (ms < best_ms) {
        best_ms = ms;
        best = i;
      }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFreeAsync(scratch, in.stream);
    cudaGetLastError();  // a candidate that failed to launch must not poison later calls
    return results[best].algo;
  }

  std::mutex mu_;
  std::array<cublasLtHandle_t, kMaxDevices> handles_{};
  static std::array<int, kMaxDevices> unknown() {
    std::array<int, kMaxDevices> a{};
    a.fill(-1);
    return a;
  }
  // Per device: the verdicts of gelu_epilogue_is_tanh and bgrad_epilogue_sums_dy, -1: unknown.
  std::array<int, kMaxDevices> gelu_tanh_ = unknown();
  std::array<int, kMaxDevices> bgrad_ok_ = unknown();
  std::map<std::pair<int, cudaStream_t>, void*> workspaces_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;  // node-based: references stay valid
};

Cache& cache() {
  static auto* c = new Cache();  // never destroyed: plans and memory outlive static teardown
  return *c;
}

}  // namespace

namespace {

// FP8 operands of run_gemm: their cuBLASLt types and scale_inv pointers (device, f32).
struct Fp8Operands {
  cudaDataType_t a_type, b_type;
  const void* a_scale_inv;
  const void* b_scale_inv;
};

cudaDataType_t fp8_type(core::Fp8Format f) {
  return f == core::Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

// One cuBLASLt call for `batch` matrices (the last two dimensions of a, b, c; batch 1: gemm).
// With fp8: a and b hold FP8 codes (u8 tensors); returns false, doing nothing, when cuBLASLt has
// no FP8 algorithm for the call (otherwise always true).
bool run_gemm(const Tensor& c, const Tensor& a, const Tensor& b, int64_t batch,
              const GemmOptions& o, const Fp8Operands* fp8 = nullptr) {
  const core::Device device = c.device();
  const core::DeviceScope scope(device.index);
  const cudaStream_t stream = core::cuda_stream(device);

  PlanKey key{};
  key.device = device.index;
  key.m = c.size(-2);
  key.n = c.size(-1);
  key.k = o.trans_a ? a.size(-2) : a.size(-1);
  key.trans_a = o.trans_a;
  key.trans_b = o.trans_b;
  key.ab_type = fp8 ? fp8->a_type : cuda_type(a.dtype());
  key.b_type = fp8 ? fp8->b_type : key.ab_type;
  key.c_type = cuda_type(c.dtype());
  key.compute_type = (!fp8 && a.dtype() == DType::f32 && allow_tf32())
                         ? CUBLAS_COMPUTE_32F_FAST_TF32
                         : CUBLAS_COMPUTE_32F;
  key.batch = batch;
  if (batch > 1) {
    key.stride_a = a.numel() / batch;
    key.stride_b = b.numel() / batch;
    key.stride_c = c.numel() / batch;
  }
  const auto stride_bytes = [](int64_t stride, DType t) {
    return static_cast<uint64_t>(stride) * dtype_size(t);
  };
  key.align_a = alignment_of(a.data(), stride_bytes(key.stride_a, a.dtype()));
  key.align_b = alignment_of(b.data(), stride_bytes(key.stride_b, b.dtype()));
  key.align_c = alignment_of(c.data(), stride_bytes(key.stride_c, c.dtype()));

  key.bias_type = o.bias ? static_cast<int>(cuda_type(o.bias->dtype())) : -1;
  key.epilogue = static_cast<int>(o.epilogue);
  const void* bias = o.bias ? o.bias->data() : nullptr;
  const void* aux = o.aux ? o.aux->data() : nullptr;
  void* bias_grad = o.bias_grad ? o.bias_grad->data() : nullptr;
  key.bias_grad = o.bias_grad != nullptr;
  if (bias || bias_grad) key.align_bias = alignment_of(bias ? bias : bias_grad);
  if (o.aux) {
    key.align_aux = alignment_of(aux);
    // An unfused GELU has the GEMM write the pre-activation into aux: the algorithm must suit
    // that buffer as well as C.
    if (o.epilogue == GemmEpilogue::gelu) key.align_c = std::min(key.align_c, key.align_aux);
  }
  TuneInputs inputs{a.data(), b.data(), c.nbytes(), stream, bias, aux};
  inputs.bias_grad = bias_grad;
  const Resources r = cache().get(key, inputs, a.dtype(), c.dtype(), fp8 != nullptr);
  Plan& plan = *r.plan;
  if (!plan.usable) return false;
  const float alpha = o.alpha;
  const float beta = o.beta;
  // Where the GEMM writes: C, or aux when the GELU runs as a separate pass after it.
  const bool gelu_after = o.epilogue == GemmEpilogue::gelu && !plan.fused_gelu;
  const Tensor& out = gelu_after ? *o.aux : c;
  {
    const std::lock_guard<std::mutex> lock(plan.mu);
    if (plan.fused_bias)
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &bias, sizeof(bias)));
    if (plan.fused_bias_grad)
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &bias_grad, sizeof(bias_grad)));
    if (plan.fused_gelu || plan.fused_dgelu)
      STOKER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    if (fp8) {  // cuBLASLt's A is our B (see the top of this file)
      STOKER_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                         &fp8->b_scale_inv, sizeof(fp8->b_scale_inv)));
      STOKER_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                         &fp8->a_scale_inv, sizeof(fp8->a_scale_inv)));
    }
    STOKER_CUBLAS_CHECK(cublasLtMatmul(r.handle, plan.op, &alpha, b.data(), plan.first, a.data(),
                                       plan.second, &beta, out.data(), plan.out, out.data(),
                                       plan.out, &plan.algo, r.workspace, kWorkspaceBytes, stream));
  }
  if (o.bias && !plan.fused_bias) {
    if (o.bias->dtype() == DType::f32) {
      add_bias_impl(out, *o.bias);
    } else {
      const Tensor wide = Tensor::empty(o.bias->shape(), DType::f32, device);
      cast_impl(wide, *o.bias);
      add_bias_impl(out, wide);
    }
  }
  if (o.bias_grad && !plan.fused_bias_grad) {  // a = dy [k, m]: its column sums
    fill_impl(*o.bias_grad, 0.0);
    bias_grad_impl(*o.bias_grad, a);
  }
  if (gelu_after) gelu_forward_impl(c, *o.aux);
  if (o.epilogue == GemmEpilogue::dgelu && !plan.fused_dgelu) gelu_backward_impl(c, c, *o.aux);
  return true;
}

}  // namespace

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o) {
  run_gemm(c, a, b, 1, o);
}

STOKER_REGISTER_STUB(gemm, gemm);

void gemm_batched(const Tensor& c, const Tensor& a, const Tensor& b, int64_t batch,
                  const GemmOptions& o) {
  run_gemm(c, a, b, batch, o);
}

STOKER_REGISTER_STUB(gemm_batched, gemm_batched);

bool gemm_fp8(const Tensor& c, const Fp8Tensor& a, const Fp8Tensor& b, const GemmOptions& o) {
  // The FP8 kernels' layout needs: every dimension a multiple of 16 and 16-byte aligned
  // operands (cuBLASLt's FP8 requirements); otherwise the caller's reference composition.
  const int64_t m = c.size(0), n = c.size(1), k = a.codes.size(1);
  if (m % 16 != 0 || n % 16 != 0 || k % 16 != 0 || alignment_of(a.codes.data()) < 16 ||
      alignment_of(b.codes.data()) < 16 || alignment_of(c.data()) < 16)
    return false;
  const Fp8Operands fp8{fp8_type(a.format), fp8_type(b.format), a.scale_inv.data(),
                        b.scale_inv.data()};
  return run_gemm(c, a.codes, b.codes, 1, o, &fp8);
}

STOKER_REGISTER_STUB(gemm_fp8, gemm_fp8);

}  // namespace stoker::ops::cuda
