// Private helpers shared by the CUDA kernels in kernels/*.cu (device code and launch sizing).
//
// Why element conversions match core/half.h bit for bit: the CPU reference rounds with those
// STOKER_HD functions, so a GPU result must have the same bits, NaN payloads included. bf16 uses
// them directly (a few integer ops). For f16 the software path costs more than the memory
// traffic, so the hardware cvt (IEEE round-to-nearest-even, exactly what half.h implements)
// handles every non-NaN value and only NaN, which the hardware canonicalizes, takes the
// half.h path. Checked on sm_90 against half.h over all 2^32 floats and all 65536 halves.
//
// Why `Pack`: a memory-bound kernel reaches HBM bandwidth only with wide accesses. A Pack is V
// consecutive elements aligned to min(16, V * sizeof(T)) bytes, so loading one is a single 64-
// or 128-bit instruction. `plan_vectors` finds the first element at which every pointer of an
// op is aligned for its Pack; the few elements before it and after the last whole Pack go
// through a scalar path, and so does everything when the pointers disagree.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "core/cuda_util.h"
#include "stoker/core/dtype.h"
#include "stoker/core/error.h"
#include "stoker/core/half.h"

namespace stoker::ops::cuda {

using core::BFloat16;
using core::Half;

constexpr int kBlockSize = 256;  // threads per block of every elementwise kernel
constexpr int kBlocksPerSm = 8;  // 8 x 256 = 2048 threads: a full SM on sm_80/sm_90

// Streaming multiprocessors of device `index` (queried once per device).
inline int sm_count(int index) {
  static std::array<std::atomic<int>, 64> cache{};
  STOKER_CHECK(index >= 0 && index < 64, "internal: bad CUDA device index ", index);
  int n = cache[index].load(std::memory_order_relaxed);
  if (n == 0) {
    STOKER_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, index));
    cache[index].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Blocks for a grid-stride loop over `items` work items: enough to fill the GPU once, no more.
inline unsigned grid_for(int64_t items, int device_index) {
  const int64_t wanted = (items + kBlockSize - 1) / kBlockSize;
  const int64_t cap = static_cast<int64_t>(sm_count(device_index)) * kBlocksPerSm;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

// ---- element conversions (fp32 math, one rounding on store) ----

__device__ STOKER_FORCEINLINE float to_float(float v) { return v; }
__device__ STOKER_FORCEINLINE float to_float(Half v) {
  if ((v.bits & 0x7fffu) > 0x7c00u) return core::half_bits_to_float(v.bits);  // NaN payload
  return __half2float(__ushort_as_half(v.bits));
}
__device__ STOKER_FORCEINLINE float to_float(BFloat16 v) {
  return core::bf16_bits_to_float(v.bits);
}

template <typename T>
__device__ STOKER_FORCEINLINE T from_float(float v);
template <>
__device__ STOKER_FORCEINLINE float from_float<float>(float v) {
  return v;
}
template <>
__device__ STOKER_FORCEINLINE Half from_float<Half>(float v) {
  if (v != v) return Half::from_bits(core::float_to_half_bits(v));  // NaN payload
  return Half::from_bits(__half_as_ushort(__float2half_rn(v)));
}
template <>
__device__ STOKER_FORCEINLINE BFloat16 from_float<BFloat16>(float v) {
  return BFloat16::from_bits(core::float_to_bf16_bits(v));
}

// ---- vector access ----

// Elements per access: 16 bytes of the widest type of an op (the narrower ones move 8 bytes).
// Not 16 bytes of the narrowest: a thread writing 32 contiguous bytes as two 16-byte stores
// leaves every store instruction of a warp half-covering its sectors, which measured ~30%
// slower on an H200 than two fully coalesced passes.
template <typename... T>
constexpr int pack_width() {
  return static_cast<int>(16 / std::max({sizeof(T)...}));
}

template <typename T, int V>
constexpr size_t pack_align() {
  return sizeof(T) * V >= 16 ? 16 : sizeof(T) * V;
}

template <typename T, int V>
struct alignas(pack_align<T, V>()) Pack {
  T v[V];
};

// The access goes through a built-in vector type of the Pack's size, with the alignment stated
// on the pointer: without __builtin_assume_aligned, nvcc split some unrolled 16-byte stores into
// four 4-byte ones (measured: a fill ran at 2.8 instead of 4.3 TB/s on an H200).
template <size_t kBytes>
struct RawWord;
template <>
struct RawWord<16> {
  using type = uint4;
};
template <>
struct RawWord<8> {
  using type = uint2;
};
template <>
struct RawWord<4> {
  using type = uint32_t;
};
template <>
struct RawWord<2> {
  using type = uint16_t;
};
template <>
struct RawWord<1> {
  using type = uint8_t;
};

// Packs above 16 bytes (e.g. 8 floats beside 8 halves) move as several 16-byte words.
template <int V, typename T>
__device__ STOKER_FORCEINLINE Pack<T, V> load_pack(const T* p) {
  constexpr size_t kBytes = sizeof(Pack<T, V>);
  Pack<T, V> r;
  if constexpr (kBytes > 16) {
    static_assert(kBytes % 16 == 0);
    const uint4* q = static_cast<const uint4*>(__builtin_assume_aligned(p, 16));
    uint4 w[kBytes / 16];
#pragma unroll
    for (size_t k = 0; k < kBytes / 16; ++k) w[k] = q[k];
    memcpy(&r, w, kBytes);
  } else {
    using W = typename RawWord<kBytes>::type;
    const W w = *static_cast<const W*>(__builtin_assume_aligned(p, sizeof(W)));
    memcpy(&r, &w, kBytes);
  }
  return r;
}

template <int V, typename T>
__device__ STOKER_FORCEINLINE void store_pack(T* p, const Pack<T, V>& v) {
  constexpr size_t kBytes = sizeof(Pack<T, V>);
  if constexpr (kBytes > 16) {
    static_assert(kBytes % 16 == 0);
    uint4* q = static_cast<uint4*>(__builtin_assume_aligned(p, 16));
    uint4 w[kBytes / 16];
    memcpy(w, &v, kBytes);
#pragma unroll
    for (size_t k = 0; k < kBytes / 16; ++k) q[k] = w[k];
  } else {
    using W = typename RawWord<kBytes>::type;
    W w;
    memcpy(&w, &v, kBytes);
    *static_cast<W*>(__builtin_assume_aligned(p, sizeof(W))) = w;
  }
}

// V consecutive elements at p as floats, and back with one rounding each (p aligned for a
// Pack of V; V == 1: a plain element access).
template <int V, typename T>
__device__ STOKER_FORCEINLINE void load_floats(float (&v)[V], const T* p) {
  if constexpr (V == 1) {
    v[0] = to_float(*p);
  } else {
    const Pack<T, V> q = load_pack<V>(p);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = to_float(q.v[k]);
  }
}

template <int V, typename T>
__device__ STOKER_FORCEINLINE void store_floats(T* p, const float (&v)[V]) {
  if constexpr (V == 1) {
    *p = from_float<T>(v[0]);
  } else {
    Pack<T, V> q;
#pragma unroll
    for (int k = 0; k < V; ++k) q.v[k] = from_float<T>(v[k]);
    store_pack<V>(p, q);
  }
}

// Where the vector path of an n-element op starts (`head`) and how many whole Packs it covers.
// Elements outside [head, head + packs * V) take the scalar path.
struct VectorPlan {
  int64_t head = 0;
  int64_t packs = 0;
};

struct Operand {
  const void* ptr;
  size_t elem_size;
};

template <int V>
VectorPlan plan_vectors(int64_t n, std::initializer_list<Operand> operands) {
  const Operand& first = *operands.begin();
  const size_t align0 = std::min<size_t>(16, first.elem_size * V);
  const auto addr0 = reinterpret_cast<uintptr_t>(first.ptr);
  const int64_t head = static_cast<int64_t>(((align0 - addr0 % align0) % align0) / first.elem_size);
  VectorPlan plan;
  if (head >= n) return plan;  // too short to reach an aligned element: all scalar
  for (const Operand& op : operands) {
    const size_t align = std::min<size_t>(16, op.elem_size * V);
    const uintptr_t at_head = reinterpret_cast<uintptr_t>(op.ptr) + head * op.elem_size;
    if (at_head % align != 0) return plan;  // misaligned relative to the first: all scalar
  }
  plan.head = head;
  plan.packs = (n - head) / V;
  return plan;
}

// Index of the j-th scalar-path element: the head elements first, then the tail.
__device__ STOKER_FORCEINLINE int64_t scalar_index(int64_t j, int64_t head, int64_t body_end) {
  return j < head ? j : body_end + (j - head);
}

// ---- out[i] = op(in0[i]) or op(in0[i], in1[i]) ----

// One pass over memory: each element is read once per input and written once. `out` may alias
// an input exactly (each thread reads its elements before writing them). In1 = void: unary.
template <int V, typename Out, typename In0, typename In1, typename Op>
__global__ void __launch_bounds__(kBlockSize)
    map_kernel(Out* out, const In0* in0, const In1* in1, int64_t n, int64_t head, int64_t packs,
               Op op) {
  constexpr bool kUnary = std::is_void_v<In1>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = tid; p < packs; p += stride) {
    const int64_t i = head + p * V;
    const Pack<In0, V> a = load_pack<V>(in0 + i);
    Pack<Out, V> r;
    if constexpr (kUnary) {
#pragma unroll
      for (int k = 0; k < V; ++k) r.v[k] = from_float<Out>(op(to_float(a.v[k])));
    } else {
      const Pack<In1, V> b = load_pack<V>(in1 + i);
#pragma unroll
      for (int k = 0; k < V; ++k) r.v[k] = from_float<Out>(op(to_float(a.v[k]), to_float(b.v[k])));
    }
    store_pack<V>(out + i, r);
  }
  const int64_t body_end = head + packs * V;
  const int64_t scalars = n - packs * V;
  for (int64_t j = tid; j < scalars; j += stride) {
    const int64_t i = scalar_index(j, head, body_end);
    if constexpr (kUnary) {
      out[i] = from_float<Out>(op(to_float(in0[i])));
    } else {
      out[i] = from_float<Out>(op(to_float(in0[i]), to_float(in1[i])));
    }
  }
}

// Enqueues map_kernel on the current stream of `device` (caller holds a DeviceScope).
template <typename Out, typename In0, typename In1, typename Op>
void launch_map(core::Device device, Out* out, const In0* in0, const In1* in1, int64_t n, Op op) {
  using In1Size = std::conditional_t<std::is_void_v<In1>, In0, In1>;
  constexpr int V = pack_width<Out, In0, In1Size>();
  const VectorPlan plan =
      std::is_void_v<In1>
          ? plan_vectors<V>(n, {{out, sizeof(Out)}, {in0, sizeof(In0)}})
          : plan_vectors<V>(n, {{out, sizeof(Out)}, {in0, sizeof(In0)}, {in1, sizeof(In1Size)}});
  const int64_t scalars = n - plan.packs * V;
  const unsigned grid = grid_for(std::max(plan.packs, scalars), device.index);
  map_kernel<V><<<grid, kBlockSize, 0, core::cuda_stream(device)>>>(out, in0, in1, n, plan.head,
                                                                    plan.packs, op);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

// ---- dtype dispatch on the host ----

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the storage type of float dtype t.
template <typename F>
decltype(auto) visit_float(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f16:
      return f(TypeTag<Half>{});
    case DType::bf16:
      return f(TypeTag<BFloat16>{});
    default:
      break;
  }
  STOKER_THROW("internal: CUDA kernel called with non-float dtype ", dtype_name(t));
}

}  // namespace stoker::ops::cuda
