// stoker_llm's memory plan (memory_plan.h): byte counts from the model's shapes.
#include "memory_plan.h"

#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>

#include "stoker/core/allocator.h"
#include "stoker/ops/optim.h"
#if STOKER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace stoker::llm {

namespace {

constexpr int64_t kQuantizedMin = 4096;             // optim::StateFormat::min_quantized_numel
constexpr int64_t kStateBlock = 2048;               // optim::StateFormat::block
constexpr int64_t kLogitsChunk = int64_t{1} << 30;  // nn::LinearCrossEntropyLoss's 1 GiB rule

// The sizes of the model's parameter tensors (nn::Parameter values), in parameter order.
std::vector<int64_t> tensor_sizes(const LlamaConfig& c) {
  const int64_t d = c.head_dim;
  std::vector<int64_t> out{c.vocab * c.d_model};
  for (int64_t l = 0; l < c.layers; ++l)
    for (const int64_t n :
         {c.d_model, (c.heads + 2 * c.kv_heads) * d * c.d_model, c.heads * d * c.d_model, c.d_model,
          2 * c.ffn * c.d_model, c.ffn * c.d_model})
      out.push_back(n);
  out.push_back(c.d_model);
  if (!c.tie_embeddings) out.push_back(c.vocab * c.d_model);
  return out;
}

int64_t compute_bytes(amp::Precision p) { return p == amp::Precision::fp32 ? 4 : 2; }

std::string gib(int64_t bytes) { return core::format_bytes(static_cast<size_t>(bytes)); }

}  // namespace

int64_t block_activation_bytes(const MemoryPlanInput& in) {
  const LlamaConfig& c = in.config;
  const int64_t bt = in.batch * in.seq, s = compute_bytes(in.precision);
  const int64_t e = in.precision == amp::Precision::fp8 ? 1 : s;  // a Linear's saved input
  const int64_t qkv = (c.heads + 2 * c.kv_heads) * c.head_dim, hd = c.heads * c.head_dim;
  const int64_t norms = 2 * (bt * c.d_model * s + bt * 4);  // input (or sum) and 1/rms (f32)
  const int64_t linears = bt * (c.d_model + hd + c.d_model + c.ffn) * e;
  const int64_t swiglu = bt * 2 * c.ffn * s;
  const int64_t attention =
      in.fused_attention
          ? bt * (qkv + hd) * s + in.batch * c.heads * in.seq * 4
          : bt * 3 * hd * s + in.batch * c.heads * in.seq * in.seq * s;  // k, v per query head
  return norms + linears + swiglu + attention;
}

int64_t optimizer_state_bytes(const LlamaConfig& c, const std::string& state, bool zero1,
                              int world) {
  int64_t bytes = 0;
  for (const int64_t n : tensor_sizes(c)) {
    if (state == "bf16") {
      bytes += 4 * n;
    } else if (state == "int8" && n >= kQuantizedMin) {
      bytes += 2 * (n + (n + kStateBlock - 1) / kStateBlock * 4);
    } else {
      bytes += 8 * n;
    }
  }
  bytes = zero1 ? (bytes + world - 1) / std::max(1, world) : bytes;
  return bytes + static_cast<int64_t>(sizeof(ops::AdamWStepState));  // the step count
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  const LlamaConfig& c = in.config;
  const int64_t n = c.parameter_count(), s = compute_bytes(in.precision);
  const int64_t bt = in.batch * in.seq;
  MemoryPlan p;
  p.weights = 4 * n + (in.precision == amp::Precision::fp32 ? 0 : 2 * n);
  p.gradients = 4 * n;
  p.optimizer = optimizer_state_bytes(c, in.optimizer_state, in.zero1, in.world);
  const int64_t block = block_activation_bytes(in);
  const int64_t input = bt * c.d_model * s;
  const int64_t wrapped =
      in.checkpoint_every > 0 ? (c.layers + in.checkpoint_every - 1) / in.checkpoint_every : 0;
  p.activations = (c.layers - wrapped) * block + wrapped * input + (wrapped > 0 ? block : 0) +
                  2 * input + bt * 4;  // + the final norm's input and 1/rms, the head's input
  const int64_t rows = std::clamp<int64_t>(kLogitsChunk / (c.vocab * s), 1, bt);
  p.logits = 2 * rows * c.vocab * s;  // a chunk of logits and its gradient
  return p;
}

std::string MemoryPlan::table() const {
  return fmt::format(
      "  weights      {:>10}  (f32 masters + compute copies)\n"
      "  gradients    {:>10}  (f32)\n"
      "  optimizer    {:>10}  (AdamW moments)\n"
      "  activations  {:>10}  (saved for backward, one micro-batch)\n"
      "  logits       {:>10}  (one chunk of the fused head and its gradient)\n"
      "  total        {:>10}  per rank\n",
      gib(weights), gib(gradients), gib(optimizer), gib(activations), gib(logits), gib(total()));
}

std::string MemoryPlan::line() const {
  return fmt::format(
      "memory plan: {} weights + {} gradients + {} optimizer + {} activations + {} logits = {} "
      "per rank",
      gib(weights), gib(gradients), gib(optimizer), gib(activations), gib(logits), gib(total()));
}

int64_t free_device_memory(Device device) {
  if (device.is_cpu()) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : -1;
  }
#if STOKER_WITH_CUDA
  int before = 0;
  size_t free = 0, total = 0;
  if (cudaGetDevice(&before) != cudaSuccess || cudaSetDevice(device.index) != cudaSuccess)
    return -1;
  const bool ok = cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaSetDevice(before);
  return ok ? static_cast<int64_t>(free) : -1;
#else
  return -1;
#endif
}

std::string advice_to_fit(const MemoryPlanInput& in, int64_t free_bytes) {
  const int64_t need = plan_memory(in).total();
  if (free_bytes < 0 || need <= free_bytes) return "";
  std::string out = fmt::format(
      "the run needs {} per rank ({} B x {} T, {}, optimizer state {}{}) and the device has {} "
      "free. Each of these, added to the ones above it, gives:\n",
      gib(need), in.batch, in.seq, amp::precision_name(in.precision), in.optimizer_state,
      in.checkpoint_every > 0
          ? fmt::format(", activation checkpointing every {}", in.checkpoint_every)
          : "",
      gib(free_bytes));
  MemoryPlanInput t = in;
  auto step = [&](const std::string& flags) {
    const int64_t total = plan_memory(t).total();
    out +=
        fmt::format("  {:<40} {:>10}{}\n", flags, gib(total), total <= free_bytes ? "  fits" : "");
    return total <= free_bytes;
  };
  if (t.checkpoint_every != 1) {
    t.checkpoint_every = 1;
    if (step("--activation-checkpoint-every 1")) return out;
  }
  if (t.optimizer_state != "int8") {
    t.optimizer_state = "int8";
    if (step("--optimizer-state int8")) return out;
  }
  for (const int world : {2, 4, 8}) {
    if (t.zero1 && t.world >= world) continue;
    t.zero1 = true;
    t.world = world;
    if (step(fmt::format("--zero1 over {} ranks (stoker launch)", world))) return out;
  }
  while (t.batch > 1) {
    t.batch /= 2;
    if (step(fmt::format("--batch {}", t.batch))) return out;
  }
  if (t.precision == amp::Precision::fp32) {
    t.precision = amp::Precision::bf16;
    if (step("--precision bf16")) return out;
  }
  const MemoryPlan last = plan_memory(t);
  out += fmt::format(
      "  none of these fits: the weights and gradients alone take {} per rank (ZeRO-1 shards "
      "only the optimizer state); use a shorter --context or a device with more memory\n",
      gib(last.weights + last.gradients));
  return out;
}

}  // namespace stoker::llm
