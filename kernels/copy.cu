// CUDA fill, cast and cast_multi.
//
// fill: the value is converted to the tensor's dtype ONCE, on the host, with exactly the
// expression the CPU reference uses (static_cast<float> then core/half.h for f16/bf16,
// static_cast from double for the integer types), so both backends write the same bits. The
// kernel then only replicates a bit pattern with 16-byte stores; a pattern whose bytes are all
// equal (zeros, the common case) is a cudaMemsetAsync instead.
// cast: widen exactly to fp32, round once to the destination (RNE, NaN payload kept) with the
// conversions of kernel_util.cuh, which give the bits of core/half.h, as the CPU reference
// does. Same dtype is a device-to-device copy.
// cast_multi: the same conversions over a list of f32 tensors in one multi-tensor launch
// (multi_tensor.cuh), the refresh of mixed-precision weight copies after an optimizer step.
#include <cstring>

#include "kernel_util.cuh"
#include "multi_tensor.cuh"
#include "ops/copy_stubs.h"

namespace stoker::ops::cuda {

namespace {

// Writes `value` (an element's raw bits) to n elements; W is an unsigned word of the element's
// size. Reads nothing.
template <typename W>
__global__ void __launch_bounds__(kBlockSize)
    fill_kernel(W* out, W value, int64_t n, int64_t head, int64_t packs) {
  constexpr int V = 16 / sizeof(W);
  Pack<W, V> pack;
#pragma unroll
  for (int k = 0; k < V; ++k) pack.v[k] = value;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = tid; p < packs; p += stride) store_pack<V>(out + head + p * V, pack);
  const int64_t body_end = head + packs * V;
  for (int64_t j = tid; j < n - packs * V; j += stride)
    out[scalar_index(j, head, body_end)] = value;
}

template <typename W>
void launch_fill(const Tensor& out, W value) {
  W* p = static_cast<W*>(out.data());
  const int64_t n = out.numel();
  const cudaStream_t stream = core::cuda_stream(out.device());
  unsigned char bytes[sizeof(W)];
  std::memcpy(bytes, &value, sizeof(W));
  if (std::all_of(bytes, bytes + sizeof(W), [&](unsigned char b) { return b == bytes[0]; })) {
    STOKER_CUDA_CHECK(cudaMemsetAsync(p, bytes[0], out.nbytes(), stream));
    return;
  }
  constexpr int V = 16 / sizeof(W);
  const VectorPlan plan = plan_vectors<V>(n, {{p, sizeof(W)}});
  const unsigned grid = grid_for(std::max(plan.packs, n - plan.packs * V), out.device().index);
  fill_kernel<<<grid, kBlockSize, 0, stream>>>(p, value, n, plan.head, plan.packs);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

template <typename W, typename T>
W bits_of(T v) {
  static_assert(sizeof(W) == sizeof(T));
  W w;
  std::memcpy(&w, &v, sizeof(W));
  return w;
}

struct IdentityOp {
  __device__ float operator()(float v) const { return v; }
};

// The f32 list (p) rounded into its half copies. A copy's pointer travels in s1 (typed as
// float* there, reinterpreted here: one argument block serves every multi-tensor op).
template <typename T>
struct CastToHalfOp {
  __device__ void operator()(const MultiTensorArgs& a, int t, int64_t i) const {
    reinterpret_cast<T*>(a.s1[t])[i] = from_float<T>(a.p[t][i]);
  }
};

}  // namespace

void fill(const Tensor& out, double value) {
  const core::DeviceScope scope(out.device().index);
  const float f = static_cast<float>(value);
  switch (out.dtype()) {
    case DType::f32:
      return launch_fill(out, bits_of<uint32_t>(f));
    case DType::f16:
      return launch_fill(out, core::float_to_half_bits(f));
    case DType::bf16:
      return launch_fill(out, core::float_to_bf16_bits(f));
    case DType::i32:
      return launch_fill(out, bits_of<uint32_t>(static_cast<int32_t>(value)));
    case DType::i64:
      return launch_fill(out, bits_of<uint64_t>(static_cast<int64_t>(value)));
    case DType::u8:
      return launch_fill(out, static_cast<uint8_t>(value));
  }
}

void cast(const Tensor& dst, const Tensor& src) {
  const core::DeviceScope scope(dst.device().index);
  if (dst.dtype() == src.dtype()) {
    if (dst.data() != src.data()) {
      STOKER_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.nbytes(),
                                        cudaMemcpyDeviceToDevice, core::cuda_stream(dst.device())));
    }
    return;
  }
  visit_float(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    visit_float(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      if constexpr (!std::is_same_v<D, S>) {  // same dtype was the copy above
        launch_map(dst.device(), static_cast<D*>(dst.data()), static_cast<const S*>(src.data()),
                   static_cast<const void*>(nullptr), dst.numel(), IdentityOp{});
      }
    });
  });
}

void cast_multi(std::span<const Tensor> dsts, std::span<const Tensor> srcs) {
  if (dsts[0].dtype() == DType::f16)
    launch_multi_tensor(srcs, {}, dsts, {}, Tensor(), CastToHalfOp<core::Half>{});
  else
    launch_multi_tensor(srcs, {}, dsts, {}, Tensor(), CastToHalfOp<core::BFloat16>{});
}

STOKER_REGISTER_STUB(fill, fill);
STOKER_REGISTER_STUB(cast, cast);
STOKER_REGISTER_STUB(cast_multi, cast_multi);

}  // namespace stoker::ops::cuda
